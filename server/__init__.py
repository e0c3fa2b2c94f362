"""A dual-era MCP server for HTTP: declare a :class:`Catalog`, serve it with ``python -m server``.

The public API for server authors is re-exported here. ``create_app`` (the ASGI app, to run
under any ASGI server or mount in a host app) and ``serve`` (``python -m server`` from
Python) need the web stack, so they are imported on first use: ``import server`` to declare
a catalog loads none of it. ``Settings`` (every ``MCP_*`` setting, for ``create_app``) is
imported on first use too, so declaring a catalog reads no environment.
"""

from typing import TYPE_CHECKING, Any

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
from server.errors import (
    InternalError,
    InvalidParams,
    MissingClientCapability,
    ResourceNotFound,
    ToolError,
)

if TYPE_CHECKING:
    from server.app import create_app
    from server.serving.server import serve
    from server.settings import Settings

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
    "InvalidParams",
    "MissingClientCapability",
    "PromptMessage",
    "ResourceLink",
    "ResourceNotFound",
    "Roots",
    "Sampling",
    "Settings",
    "SkillError",
    "Text",
    "TextContents",
    "ToolError",
    "ToolResult",
    "assistant",
    "create_app",
    "serve",
    "user",
]

# Where the names imported on first use live (tests/test_layout.py allows these edges).
_ON_FIRST_USE = {
    "create_app": "server.app",
    "serve": "server.serving.server",
    "Settings": "server.settings",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
