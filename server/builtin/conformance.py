"""The ``conformance`` catalog: the fixtures the official MCP conformance suite calls by name.

Names, texts and shapes follow what ``@modelcontextprotocol/conformance`` checks (see
``shared/conformance.md``); tool order matters (the suite calls the first listed tool with no
arguments, so ``test_simple_text`` comes first). Every fixture goes through the same public
declaration API a server author uses: nothing here reaches into the server's internals.

The elicitation-form and input-required fixtures live in its sibling
:mod:`server.builtin.conformance_asking`, declared at their place in the list; the extensions'
(tasks and skills) in :mod:`server.builtin.conformance_extensions`, declared last.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from server import (
    Audio,
    BlobContents,
    Catalog,
    Completion,
    Context,
    EmbeddedResource,
    Image,
    MissingClientCapability,
    PromptMessage,
    Text,
    TextContents,
    ToolResult,
    user,
)
from server.builtin.conformance_asking import (
    NAME_SCHEMA,
    add_elicitation_form_fixtures,
    add_input_required_fixtures,
)
from server.builtin.conformance_extensions import add_extension_fixtures

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAAB"
    "JRU5ErkJggg=="
)
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

catalog = Catalog(
    "mcp-conformance-test-server",
    "0.1.0",
    title="Conformance fixtures",
    instructions="Fixtures for the official MCP conformance suite.",
)


# -- content --------------------------------------------------------------------------------


@catalog.tool
async def test_simple_text() -> str:
    """Returns a simple text response."""
    return "This is a simple text response for testing."


@catalog.tool
async def test_image_content() -> Image:
    """Returns an image (a 1x1 red PNG)."""
    return Image(PNG, "image/png")


@catalog.tool
async def test_audio_content() -> Audio:
    """Returns a short WAV clip."""
    return Audio(WAV, "audio/wav")


@catalog.tool
async def test_embedded_resource() -> EmbeddedResource:
    """Returns an embedded text resource."""
    return EmbeddedResource(
        TextContents(
            "test://embedded-resource", "This is an embedded resource content.", "text/plain"
        )
    )


@catalog.tool
async def test_multiple_content_types() -> list[Any]:
    """Returns text, an image and an embedded resource."""
    return [
        Text("Multiple content types test:"),
        Image(PNG, "image/png"),
        EmbeddedResource(
            TextContents(
                "test://mixed-content-resource", '{"test":"data","value":123}', "application/json"
            )
        ),
    ]


@catalog.tool
async def test_error_handling() -> ToolResult:
    """Always fails with an error result (not a protocol error)."""
    return ToolResult([Text("This tool intentionally returns an error for testing")], is_error=True)


# -- notifications -------------------------------------------------------------------------


@catalog.tool
async def test_tool_with_logging(ctx: Context) -> str:
    """Sends three log messages while it runs."""
    for step in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(step, logger="test_tool_with_logging")
        await asyncio.sleep(0.05)
    return "Logging test completed."


@catalog.tool
async def test_logging_tool(ctx: Context) -> str:
    """Logs at every level; the client sees only what its requested log level admits."""
    await ctx.debug("debug message from test_logging_tool")
    await ctx.info("info message from test_logging_tool")
    await ctx.warning("warning message from test_logging_tool")
    return "Logged at debug, info and warning."


@catalog.tool
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100."""
    for progress in (0, 50, 100):
        await ctx.report_progress(progress, 100, f"Completed step {progress} of 100")
        if progress < 100:
            await asyncio.sleep(0.05)
    return str(ctx.progress_token) if ctx.progress_token is not None else "Progress complete."


# -- asking the client -----------------------------------------------------------------------


@catalog.tool
async def test_sampling(ctx: Context, prompt: str = "Hello") -> str:
    """Asks the client's model to answer a prompt (sampling)."""
    reply = await ctx.sample(prompt, 100)
    content = reply.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return f"LLM response: {text}"


@catalog.tool
async def test_elicitation(ctx: Context, message: str = "Please provide your information") -> str:
    """Asks the user for a username and an email (elicitation)."""
    answer = await ctx.elicit(
        message,
        {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "Your username"},
                "email": {"type": "string", "description": "Your email address"},
            },
            "required": ["username", "email"],
        },
    )
    return f"User response: action={answer.action}, content={answer.content}"


add_elicitation_form_fixtures(catalog)


@catalog.tool
async def test_missing_capability(ctx: Context) -> str:
    """Needs the client's sampling capability; refuses with -32021 without it."""
    if not ctx.client_supports("sampling"):
        raise MissingClientCapability({"sampling": {}}, "test_missing_capability samples")
    return "Client declared sampling capability; proceeding."


@catalog.tool
async def test_streaming_elicitation(ctx: Context) -> str:
    """Asks for a name while streaming progress; never a server-to-client request on 2026."""
    await ctx.report_progress(0, 1, "asking for a name")
    answer = await ctx.elicit("What is your name?", NAME_SCHEMA, key="user_name")
    return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"


# The input-required (multi-round) fixtures, declared here so the list order stays the same.
add_input_required_fixtures(catalog)


@catalog.tool
async def test_reconnection(ctx: Context) -> str:
    """Closes its own SSE connection mid-call; the client resumes with Last-Event-ID."""
    await asyncio.sleep(0.05)
    ctx.close_stream()
    await asyncio.sleep(0.2)
    return "Reconnection test completed"


# -- list changes and headers -----------------------------------------------------------------


@catalog.tool
async def test_trigger_tool_change() -> str:
    """Adds and removes a temporary tool, so tools/list_changed is sent (list ends unchanged)."""

    async def test_temporary_tool() -> str:
        """A temporary tool."""
        return "temporary"

    catalog.tool(test_temporary_tool)
    catalog.remove_tool("test_temporary_tool")
    return "tool list changed"


@catalog.tool
async def test_trigger_prompt_change() -> str:
    """Adds and removes a temporary prompt, so prompts/list_changed is sent."""

    def test_temporary_prompt() -> str:
        """A temporary prompt."""
        return "temporary"

    catalog.prompt(test_temporary_prompt)
    catalog.remove_prompt("test_temporary_prompt")
    return "prompt list changed"


@catalog.tool
async def test_x_mcp_header(
    region: Annotated[
        str,
        Field(
            description="Mirrored into the Mcp-Param-Region header",
            json_schema_extra={"x-mcp-header": "Region"},
        ),
    ] = "<none>",
) -> str:
    """Echoes a parameter that clients mirror into the Mcp-Param-Region header."""
    return f"region={region}"


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


@catalog.tool(input_schema=JSON_SCHEMA_2020_12)
async def json_schema_2020_12_tool(
    name: str | None = None, address: dict[str, Any] | None = None
) -> str:
    """Publishes a JSON Schema 2020-12 input schema verbatim."""
    return f"name={name}, address={address}"


# -- resources -------------------------------------------------------------------------------


@catalog.resource("test://static-text", name="static-text", mime_type="text/plain")
def static_text() -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@catalog.resource("test://static-binary", name="static-binary", mime_type="image/png")
def static_binary() -> BlobContents:
    """A static binary resource (a PNG)."""
    return BlobContents("test://static-binary", PNG, "image/png")


@catalog.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
def watched_resource() -> str:
    """A resource clients can subscribe to."""
    return "Watched resource content"


@catalog.resource_template(
    "test://template/{id}/data", name="template-data", mime_type="application/json"
)
def template_data(id: str) -> str:
    """Data for an id, from a template."""
    return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'


@catalog.completion(template="test://template/{id}/data", argument="id")
def complete_template_id(value: str, arguments: Mapping[str, str]) -> list[str]:
    return [candidate for candidate in ("1", "2", "3", "123") if candidate.startswith(value)]


# -- prompts ---------------------------------------------------------------------------------


@catalog.prompt
def test_simple_prompt() -> str:
    """A simple prompt without arguments."""
    return "This is a simple prompt for testing."


@catalog.prompt
def test_prompt_with_arguments(
    arg1: Annotated[str, Field(description="First test argument")],
    arg2: Annotated[str, Field(description="Second test argument")],
) -> str:
    """A prompt with two required arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@catalog.completion(prompt="test_prompt_with_arguments", argument="arg1")
def complete_arg1(value: str, arguments: Mapping[str, str]) -> Completion:
    values = [word for word in ("paris", "park", "parade") if word.startswith(value)]
    return Completion(values, total=len(values), has_more=False)


@catalog.prompt
def test_prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],
) -> list[PromptMessage]:
    """A prompt that embeds the resource it is given."""
    return [
        user(
            EmbeddedResource(
                TextContents(resourceUri, "Embedded resource content for testing.", "text/plain")
            )
        ),
        user("Please process the embedded resource above."),
    ]


@catalog.prompt
def test_prompt_with_image() -> list[PromptMessage]:
    """A prompt with an image."""
    return [user(Image(PNG, "image/png")), user("Please analyze the image above.")]


@catalog.prompt
async def test_input_required_result_prompt(ctx: Context) -> str:
    """A prompt that asks the user for context before it renders."""
    answer = await ctx.elicit(
        "What context should the prompt use?",
        {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]},
        key="user_context",
    )
    return f"Use the following context: {(answer.content or {}).get('context', '')}"


add_extension_fixtures(catalog)
