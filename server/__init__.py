"""A dual-era MCP server for HTTP: declare a :class:`Catalog`, serve it with ``python -m server``.

The public API for server authors is re-exported here.
"""

from server.catalog import Catalog
from server.catalog.content import (
    Audio,
    BlobContents,
    Completion,
    EmbeddedResource,
    Icon,
    Image,
    PromptMessage,
    ResourceLink,
    Text,
    TextContents,
    ToolResult,
    assistant,
    user,
)
from server.catalog.frontmatter import SkillError
from server.context import Context, Elicitation, ElicitResult, InputRequest, Roots, Sampling
from server.errors import InternalError, MissingClientCapability, ToolError

__all__ = [
    "Audio",
    "BlobContents",
    "Catalog",
    "Completion",
    "Context",
    "ElicitResult",
    "Elicitation",
    "EmbeddedResource",
    "Icon",
    "Image",
    "InputRequest",
    "InternalError",
    "MissingClientCapability",
    "PromptMessage",
    "ResourceLink",
    "Roots",
    "Sampling",
    "SkillError",
    "Text",
    "TextContents",
    "ToolError",
    "ToolResult",
    "assistant",
    "user",
]
