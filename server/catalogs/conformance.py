"""The ``conformance`` catalog: the fixtures the official MCP conformance suite calls by name.

Names, texts and shapes follow what ``@modelcontextprotocol/conformance`` checks (see
``shared/conformance.md``); tool order matters (the suite calls the first listed tool with no
arguments, so ``test_simple_text`` comes first). Every fixture goes through the same public
declaration API a server author uses: nothing here reaches into the server's internals.

The module is one flat list of ~40 fixtures whose names and texts the suite fixes; it runs
past 400 lines because splitting it would only scatter what is read side by side with the
suite's scenario list.

May import: catalog, content, context, errors, pydantic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from server.catalog import Catalog
from server.content import (
    Audio,
    BlobContents,
    Completion,
    EmbeddedResource,
    Image,
    PromptMessage,
    Text,
    TextContents,
    ToolResult,
    user,
)
from server.context import Context, Elicitation, InputRequest, Roots, Sampling
from server.errors import MissingClientCapability

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

NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}
CONFIRM_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


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


@catalog.tool
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation whose fields all carry default values (SEP-1034)."""
    answer = await ctx.elicit(
        "Please review and update the form fields with defaults",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {"type": "boolean", "description": "Verified", "default": True},
            },
        },
    )
    return f"Elicitation completed: action={answer.action}, content={answer.content}"


@catalog.tool
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation with every enum form (SEP-1330)."""
    colors = ["red", "green", "blue"]
    titled = [{"const": c, "title": c.title()} for c in colors]
    answer = await ctx.elicit(
        "Please choose from the enum options",
        {
            "type": "object",
            "properties": {
                "untitledSingle": {"type": "string", "enum": colors},
                "titledSingle": {"type": "string", "oneOf": titled},
                "legacyEnum": {
                    "type": "string",
                    "enum": colors,
                    "enumNames": ["Red", "Green", "Blue"],
                },
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": colors}},
                "titledMulti": {"type": "array", "items": {"anyOf": titled}},
            },
        },
    )
    return f"Elicitation completed: action={answer.action}, content={answer.content}"


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


@catalog.tool
async def test_input_required_result_elicitation(ctx: Context) -> str:
    """Asks for the user's name with an input-required result (key user_name)."""
    answer = await ctx.elicit("What is your name?", NAME_SCHEMA, key="user_name")
    return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"


@catalog.tool
async def test_input_required_result_sampling(ctx: Context) -> str:
    """Asks the client's model a question with an input-required result."""
    reply = await ctx.sample("What is the capital of France?", 100, key="capital_question")
    content = reply.get("content")
    return f"The model said: {content.get('text') if isinstance(content, dict) else content}"


@catalog.tool
async def test_input_required_result_list_roots(ctx: Context) -> str:
    """Asks for the client's roots with an input-required result."""
    roots = await ctx.list_roots(key="client_roots")
    return f"Client exposed {len(roots)} root(s)."


@catalog.tool
async def test_input_required_result_request_state(ctx: Context) -> str:
    """Keeps state across rounds in the sealed requestState; says state-ok when it survived."""
    first_round = "issued" not in ctx.state
    ctx.state.setdefault("issued", "round-1")
    answer = await ctx.elicit("Please confirm", CONFIRM_SCHEMA, key="confirm")
    if first_round or ctx.state.get("issued") != "round-1":
        return "state-missing: the request state did not come back"
    return f"state-ok: confirmation received ({answer.action})"


@catalog.tool
async def test_input_required_result_multiple_inputs(ctx: Context) -> str:
    """Asks three things at once: a name, a model greeting and the roots."""
    name, greeting, roots = await ctx.ask(
        Elicitation("What is your name?", NAME_SCHEMA, key="user_name"),
        Sampling("Generate a greeting", 50, key="greeting"),
        Roots(key="client_roots"),
    )
    content = greeting.get("content", {})
    return (
        f"name={(name.content or {}).get('name')}, greeting={content.get('text')}, "
        f"roots={len(roots)}"
    )


@catalog.tool
async def test_input_required_result_multi_round(ctx: Context) -> str:
    """Two rounds of questions: a name, then a favourite color."""
    name = await ctx.elicit("Step 1: What is your name?", NAME_SCHEMA, key="step1")
    color = await ctx.elicit(
        "Step 2: What is your favorite color?",
        {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
        key="step2",
    )
    return f"{(name.content or {}).get('name')} likes {(color.content or {}).get('color')}."


@catalog.tool
async def test_input_required_result_tampered_state(ctx: Context) -> str:
    """Asks for a confirmation; a modified requestState must be refused."""
    answer = await ctx.elicit("Please confirm", CONFIRM_SCHEMA, key="confirm")
    return f"Confirmed: {answer.action}"


@catalog.tool
async def test_input_required_result_capabilities(ctx: Context) -> str:
    """Asks only for what the client declared: sampling, elicitation or roots."""
    wanted: list[InputRequest] = []
    if ctx.client_supports("sampling"):
        wanted.append(Sampling("Say hello", 50, key="sample"))
    if ctx.client_supports("elicitation"):
        wanted.append(Elicitation("What is your name?", NAME_SCHEMA, key="user_name"))
    if ctx.client_supports("roots"):
        wanted.append(Roots(key="client_roots"))
    if not wanted:
        return "The client declared no capability to ask through."
    answers = await ctx.ask(*wanted)
    return f"Received {len(answers)} answer(s)."


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
def complete_template_id(value: str, context: Mapping[str, str]) -> list[str]:
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
def complete_arg1(value: str, context: Mapping[str, str]) -> Completion:
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
