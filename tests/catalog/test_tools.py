"""server.catalog.tools: tool definitions, header params, and how calls run and are shaped."""

import threading
from typing import Annotated

import orjson
import pytest
from pydantic import BaseModel, Field

from server.catalog.content import Icon, Image, ResourceLink, Text, ToolResult
from server.catalog.tools import Tool, error_result, to_content
from server.context import Context, Roots
from server.errors import InvalidParams, ParseError, ToolError
from server.jsonrpc import decode
from server.modern.input_required import InputRequired
from tests.support.core_helpers import RecordingExchange, make_context

pytestmark = pytest.mark.anyio


class Sum(BaseModel):
    total: int


# -- definitions ---------------------------------------------------------------------------


def test_definition_from_a_typed_function():
    async def add(a: int, b: Annotated[int, Field(description="Second")] = 0) -> Sum:
        """Add two numbers.

        Returns their sum.
        """
        return Sum(total=a + b)

    tool = Tool.from_function(
        add,
        title="Adder",
        annotations={"readOnlyHint": True},
        icons=[Icon("https://x/icon.png", "image/png")],
        meta={"k": "v"},
    )
    assert tool.definition == {
        "name": "add",
        "title": "Adder",
        "description": "Add two numbers.\n\nReturns their sum.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer", "default": 0, "description": "Second"},
            },
            "required": ["a"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"total": {"type": "integer"}},
            "required": ["total"],
        },
        "annotations": {"readOnlyHint": True},
        "icons": [{"src": "https://x/icon.png", "mimeType": "image/png"}],
        "_meta": {"k": "v"},
    }


def test_description_defaults_to_the_name_and_optional_fields_are_absent():
    def bare() -> str:
        return ""

    assert Tool.from_function(bare).definition == {
        "name": "bare",
        "description": "bare",
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    }


def test_explicit_name_description_and_schemas_are_kept_verbatim():
    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 2}}}
    out = {"type": "object", "properties": {"n": {"type": "number"}}}

    def search(q: str) -> dict[str, float]:
        return {"n": 1.0}

    tool = Tool.from_function(
        search, name="find", description="Find", input_schema=schema, output_schema=out
    )
    assert tool.definition["name"] == "find"
    assert tool.definition["description"] == "Find"
    assert tool.definition["inputSchema"] == schema
    assert tool.definition["outputSchema"] == out


@pytest.mark.parametrize("name", ["", "has space", "slash/name", "ü", "x" * 129])
def test_invalid_tool_names_are_refused(name):
    with pytest.raises(ValueError, match="tool name"):
        Tool.from_function(lambda: None, name=name)


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 128])
def test_valid_tool_names(name):
    assert Tool.from_function(lambda: None, name=name).name == name


def test_input_schema_root_must_be_an_object():
    with pytest.raises(ValueError, match="type 'object'"):
        Tool.from_function(lambda: None, name="t", input_schema={"type": "array"})


def test_structured_output_switch():
    def count() -> int:
        return 1

    def text() -> str:
        return "x"

    assert "outputSchema" not in Tool.from_function(count, structured_output=False).definition
    assert Tool.from_function(count, structured_output=False).output is None
    with pytest.raises(TypeError, match="structured_output"):
        Tool.from_function(text, structured_output=True)


# -- x-mcp-header --------------------------------------------------------------------------


def test_header_params_are_read_from_top_level_properties():
    def tool_fn(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
        count: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Count"})] = 1,
        plain: str = "",
    ) -> str:
        return region

    tool = Tool.from_function(tool_fn)
    assert tool.header_params == {"region": "region", "count": "count"}
    assert tool.definition["inputSchema"]["properties"]["region"]["x-mcp-header"] == "Region"


def test_header_params_from_explicit_schema():
    def fn(flag: bool = False) -> str:
        return ""

    tool = Tool.from_function(
        fn,
        input_schema={
            "type": "object",
            "properties": {"flag": {"type": "boolean", "x-mcp-header": "Dry-Run"}},
        },
    )
    assert tool.header_params == {"dry-run": "flag"}


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"a": {"type": "number", "x-mcp-header": "A"}}, "string, integer or boolean"),
        ({"a": {"type": "object", "x-mcp-header": "A"}}, "string, integer or boolean"),
        ({"a": {"x-mcp-header": "A"}}, "string, integer or boolean"),
        ({"a": {"type": "string", "x-mcp-header": "Bad Name"}}, "header-safe"),
        ({"a": {"type": "string", "x-mcp-header": ""}}, "header-safe"),
        ({"a": {"type": "string", "x-mcp-header": 5}}, "header-safe"),
        (
            {
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "REGION"},
            },
            "declared twice",
        ),
    ],
)
def test_bad_header_params_are_refused_at_declaration(properties, message):
    def fn() -> None:
        return None

    with pytest.raises(ValueError, match=message):
        Tool.from_function(fn, name="t", input_schema={"type": "object", "properties": properties})


# -- calling -------------------------------------------------------------------------------


async def test_call_validates_and_shapes_text():
    async def echo(text: str) -> str:
        return text

    result = await Tool.from_function(echo).call({"text": "hi"}, make_context())
    assert result == {"content": [{"type": "text", "text": "hi"}]}


async def test_invalid_arguments_are_an_error_result_not_a_protocol_error():
    async def echo(text: str) -> str:
        raise AssertionError("must not run")

    result = await Tool.from_function(echo).call({"text": 5, "extra": 1}, make_context())
    assert result["isError"] is True
    message = result["content"][0]["text"]
    assert message.startswith("Invalid arguments: ")
    assert "text" in message
    assert "extra" in message


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"a": "NaN", "b": 1}, "a: Input should be a valid number"),
        ({"a": "inf", "b": 1}, "a: Input should be a valid number"),
        ({"a": "1e400", "b": 1}, "a: Input should be a valid number"),
        ({"a": 1.5, "b": "3"}, "b: Input should be a valid integer"),
    ],
)
async def test_numbers_as_strings_are_an_error_result(arguments, problem):
    async def scale(a: float, b: int) -> str:
        raise AssertionError("must not run")

    result = await Tool.from_function(scale).call(arguments, make_context())
    assert result == {
        "content": [{"type": "text", "text": f"Invalid arguments: {problem}"}],
        "isError": True,
    }


async def test_a_json_integer_is_a_float_argument():
    async def scale(a: float, b: int) -> str:
        return f"{a!r} {b!r}"

    result = await Tool.from_function(scale).call({"a": 2, "b": 3.0}, make_context())
    assert result == {"content": [{"type": "text", "text": "2.0 3"}]}


def test_1e400_as_a_json_number_never_reaches_a_tool():
    # orjson refuses a number that overflows a double: the body is a parse error (-32700).
    params = b'{"name":"t","arguments":{"a":1e400}}'
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + params + b"}"
    with pytest.raises(ParseError):
        decode(body)


async def test_tool_error_message_reaches_the_model():
    async def fail() -> str:
        raise ToolError("disk is full")

    async def fail_silently() -> str:
        raise ToolError()

    assert await Tool.from_function(fail).call({}, make_context()) == error_result("disk is full")
    silent = await Tool.from_function(fail_silently).call({}, make_context())
    assert silent == error_result("Tool fail_silently failed")


async def test_crash_is_an_error_result_without_internals(caplog):
    async def crash() -> str:
        raise RuntimeError("secret database password")

    result = await Tool.from_function(crash).call({}, make_context())
    assert result["isError"] is True
    assert "secret" not in result["content"][0]["text"]
    assert "internal error" in result["content"][0]["text"]
    assert "secret database password" in caplog.text  # the server log keeps the details


async def test_protocol_errors_and_suspension_pass_through():
    async def bad() -> str:
        raise InvalidParams("nope")

    async def suspend() -> str:
        raise InputRequired({"roots": Roots("roots")})

    with pytest.raises(InvalidParams):
        await Tool.from_function(bad).call({}, make_context())
    with pytest.raises(InputRequired):
        await Tool.from_function(suspend).call({}, make_context())


async def test_context_is_injected():
    seen = []

    async def uses(ctx: Context, n: int) -> str:
        seen.append(ctx)
        await ctx.report_progress(1, 2)
        return str(n)

    exchange = RecordingExchange()
    context = make_context(exchange, progress_token="tok")
    assert await Tool.from_function(uses).call({"n": 3}, context) == {
        "content": [{"type": "text", "text": "3"}]
    }
    assert seen == [context]
    assert exchange.sent == [
        ("notifications/progress", {"progressToken": "tok", "progress": 1, "total": 2})
    ]


async def test_sync_handlers_run_in_a_worker_thread():
    loop_thread = threading.get_ident()
    threads = []

    def blocking() -> str:
        threads.append(threading.get_ident())
        return "done"

    result = await Tool.from_function(blocking).call({}, make_context())
    assert result == {"content": [{"type": "text", "text": "done"}]}
    assert threads
    assert threads[0] != loop_thread


async def test_structured_result_has_matching_text_and_structured_content():
    async def add(a: int, b: int) -> Sum:
        return Sum(total=a + b)

    async def count() -> list[int]:
        return [1, 2]

    result = await Tool.from_function(add).call({"a": 1, "b": 2}, make_context())
    assert result["structuredContent"] == {"total": 3}
    assert orjson.loads(result["content"][0]["text"]) == {"total": 3}
    wrapped = await Tool.from_function(count).call({}, make_context())
    assert wrapped["structuredContent"] == {"result": [1, 2]}
    assert wrapped["content"] == [{"type": "text", "text": "[1,2]"}]


async def test_a_scalar_result_s_text_is_the_value_as_the_sdk_sends_it():
    """Issue 34: the text block was {"result":5}; the official SDK's server sends 5 (its
    structuredContent is {"result": 5}, as ours)."""

    async def five() -> int:
        return 5

    result = await Tool.from_function(five).call({}, make_context())
    assert result == {
        "content": [{"type": "text", "text": "5"}],
        "structuredContent": {"result": 5},
    }


async def test_tool_result_is_sent_as_is():
    async def full() -> ToolResult:
        return ToolResult([Text("a")], structured={"x": 1}, is_error=True, meta={"m": 1})

    result = await Tool.from_function(full).call({}, make_context())
    assert result == {
        "content": [{"type": "text", "text": "a"}],
        "structuredContent": {"x": 1},
        "isError": True,
        "_meta": {"m": 1},
    }


def test_to_content_shapes_anything():
    link = ResourceLink("x://a", "a")
    image = Image(b"\x00", "image/png")
    assert to_content(None) == []
    assert to_content("s") == [Text("s")]
    assert to_content(image) == [image]
    assert to_content(["a", [link, None], image]) == [Text("a"), link, image]
    assert to_content({"k": 1}) == [Text('{"k":1}')]
    assert to_content(3) == [Text("3")]
