"""server.modern.era: the 2026-07-28 per-request rules and the modern result envelope.

Everything runs in-process: requests are built as :class:`server.jsonrpc.Request`, headers as
the lower-cased mapping the HTTP shell passes in, and ``send`` is a list.
"""

import base64
import contextlib
from typing import Annotated, Any, Literal

import orjson
import pytest
from pydantic import Field

from server.catalog import Catalog, Change
from server.catalog.content import Text, ToolResult
from server.context import Context, Elicitation
from server.dispatch import Dispatcher
from server.errors import (
    HeaderMismatch,
    InvalidParams,
    MalformedMeta,
    McpError,
    MethodNotFound,
    MissingClientCapability,
    UnsupportedProtocolVersion,
    http_status,
)
from server.jsonrpc import Request
from server.modern.era import ModernCall, ModernEra
from server.modern.input_required import InputRequired, RequestStates
from server.pagination import Pager
from server.sealing import Sealer
from tests.support.mcp_client import META_CAPABILITIES, META_INFO, META_VERSION, modern_meta

pytestmark = pytest.mark.anyio

VERSION = "2026-07-28"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUB_ID_KEY = "io.modelcontextprotocol/subscriptionId"
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
ALL_CAPS: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def make_era(
    catalog: Catalog, *, page_size: int = 100, cache_scope: Literal["public", "private"] = "public"
) -> ModernEra:
    sealer = Sealer(b"m" * 32)
    return ModernEra(
        catalog,
        Dispatcher(catalog, Pager(sealer, page_size)),
        RequestStates(sealer, 600),
        list_ttl_ms=60_000,
        discover_ttl_ms=300_000,
        cache_scope=cache_scope,
    )


def make_request(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: str | int = 1,
    capabilities: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[Request, dict[str, str]]:
    """A valid modern request and the headers a conforming client sends with it."""
    full_meta = modern_meta(capabilities, {"name": "test-client", "version": "1"})
    full_meta.update(meta or {})
    body = {**(params or {}), "_meta": full_meta}
    headers = {"mcp-protocol-version": VERSION, "mcp-method": method}
    field = NAME_FIELD.get(method)
    if field is not None and isinstance(body.get(field), str):
        headers["mcp-name"] = body[field]
    return Request(request_id, method, body), headers


def raw_headers(headers: dict[str, str]) -> dict[bytes, bytes]:
    """Headers as the shell hands them over: raw bytes by lower-case name."""
    return {name.encode(): value.encode() for name, value in headers.items()}


def wired(call: tuple[Request, dict[str, str]]) -> tuple[Request, dict[bytes, bytes]]:
    return call[0], raw_headers(call[1])


def as_json(result: Any) -> Any:
    """Results may be dicts or precomputed orjson fragments; compare them as JSON."""
    return orjson.loads(orjson.dumps(result))


class Sent:
    """The ``send`` callback: records every notification frame a request emits."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    async def __call__(self, payload: bytes) -> None:
        self.frames.append(orjson.loads(payload))


async def answer(era: ModernEra, call: ModernCall, sent: Sent) -> Any:
    """As the HTTP half answers a validated request: a cached page, else the handler."""
    cached = era.cached_result(call)
    return cached if cached is not None else await era.handle(call, sent)


async def run(era: ModernEra, method: str, params=None, **kwargs) -> tuple[Any, Sent]:
    request, headers = make_request(method, params, **kwargs)
    sent = Sent()
    result = await answer(era, era.validate(request, raw_headers(headers)), sent)
    return as_json(result), sent


def demo_catalog() -> Catalog:
    catalog = Catalog("demo", "9.9.9", instructions="Use the demo wisely.")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def with_meta() -> ToolResult:
        return ToolResult([Text("m")], meta={"custom": 1})

    @catalog.tool
    async def fails() -> str:
        raise ValueError("boom")

    @catalog.tool
    async def chatty(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        await ctx.debug("debug line")
        await ctx.warning("warning line")
        await ctx.report_progress(2, 2)
        return "done"

    @catalog.tool
    async def ask_name(ctx: Context) -> str:
        answer = await ctx.elicit("Name?", NAME_SCHEMA, key="name")
        return f"Hello {(answer.content or {}).get('name')}"

    @catalog.tool
    async def two_steps(ctx: Context, greeting: str = "Hi") -> str:
        ctx.state.setdefault("runs", 0)
        ctx.state["runs"] += 1
        first = await ctx.elicit("First?", NAME_SCHEMA, key="first")
        second = await ctx.elicit("Second?", NAME_SCHEMA, key="second")
        return (
            f"{greeting} {(first.content or {})['name']} and {(second.content or {})['name']}"
            f" after {ctx.state['runs']} runs"
        )

    @catalog.tool
    async def with_headers(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})] = "",
        count: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Count"})] = 0,
        dry: Annotated[bool, Field(json_schema_extra={"x-mcp-header": "Dry-Run"})] = False,
    ) -> str:
        return f"{region}/{count}/{dry}"

    @catalog.prompt
    def greet(name: str) -> str:
        return f"Greet {name}"

    @catalog.prompt
    async def ask_topic(ctx: Context) -> str:
        answer = await ctx.elicit("Topic?", NAME_SCHEMA, key="topic")
        return f"Talk about {(answer.content or {})['name']}"

    @catalog.resource("x://readme", mime_type="text/plain")
    def readme() -> str:
        return "read me"

    @catalog.resource("x://fast", ttl_ms=5)
    def fast() -> str:
        return "fast"

    @catalog.resource("x://café")
    def cafe() -> str:
        return "coffee"

    @catalog.resource_template("x://items/{item_id}", ttl_ms=7)
    def item(item_id: int) -> str:
        return f"item {item_id}"

    @catalog.completion(prompt="greet", argument="name")
    def names(value, context):
        return ["ann", "bob"]

    return catalog


@pytest.fixture
def catalog() -> Catalog:
    return demo_catalog()


@pytest.fixture
def era(catalog) -> ModernEra:
    return make_era(catalog)


def expect(error_type, call):
    with pytest.raises(error_type) as caught:
        call()
    return caught.value


def wire(error: McpError) -> tuple[int, int]:
    return error.to_wire("modern")["code"], http_status(error, "modern")


# == validate: _meta ========================================================================


def test_valid_request_becomes_a_modern_call(era):
    request, headers = make_request(
        "tools/list",
        capabilities={"roots": {}},
        meta={"io.modelcontextprotocol/logLevel": "info", "progressToken": "p"},
    )
    call = era.validate(request, raw_headers(headers))
    assert call.request is request
    assert call.version == VERSION
    assert call.client_capabilities == {"roots": {}}
    assert call.client_info == {"name": "test-client", "version": "1"}
    assert call.log_level == "info"
    assert call.progress_token == "p"


def test_client_info_is_optional(era):
    request, headers = make_request("server/discover")
    del request.params["_meta"][META_INFO]
    assert era.validate(request, raw_headers(headers)).client_info is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p.pop("_meta"),
        lambda p: p.__setitem__("_meta", "text"),
        lambda p: p["_meta"].pop(META_VERSION),
        lambda p: p["_meta"].__setitem__(META_VERSION, ""),
        lambda p: p["_meta"].__setitem__(META_VERSION, 20260728),
        lambda p: p["_meta"].pop(META_CAPABILITIES),
        lambda p: p["_meta"].__setitem__(META_CAPABILITIES, None),
        lambda p: p["_meta"].__setitem__(META_CAPABILITIES, []),
        lambda p: p["_meta"].__setitem__(META_INFO, "me"),
        lambda p: p["_meta"].__setitem__("io.modelcontextprotocol/logLevel", "verbose"),
        lambda p: p["_meta"].__setitem__("progressToken", True),
        lambda p: p["_meta"].__setitem__("progressToken", 1.5),
    ],
)
def test_malformed_meta_is_invalid_params_with_400(era, mutate):
    request, headers = make_request("tools/list")
    mutate(request.params)
    error = expect(MalformedMeta, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32602, 400)


def test_meta_is_checked_before_headers(era):
    request, _ = make_request("tools/list")
    request.params.pop("_meta")
    expect(MalformedMeta, lambda: era.validate(request, raw_headers({})))


@pytest.mark.parametrize("level", [["info"], {"level": "info"}])
def test_unhashable_log_level_is_malformed_meta(era, level):
    request, headers = make_request("tools/list", meta={"io.modelcontextprotocol/logLevel": level})
    expect(MalformedMeta, lambda: era.validate(request, raw_headers(headers)))


@pytest.mark.parametrize("name", [["echo"], {"name": "echo"}])
def test_an_unhashable_name_with_a_name_header_is_a_mismatch_not_a_crash(era, name):
    # A header equal to its body value is found by lookup; a name that cannot be a key must
    # still get the header check's answer.
    request, headers = make_request("tools/call", {"name": name, "arguments": {}})
    headers["mcp-name"] = "echo"
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32020, 400)


# == validate: MCP-Protocol-Version ==========================================================


def test_missing_version_header_is_header_mismatch(era):
    request, headers = make_request("tools/list")
    del headers["mcp-protocol-version"]
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32020, 400)
    assert "MCP-Protocol-Version" in error.message


def test_version_header_must_match_body(era):
    request, headers = make_request("tools/list")
    headers["mcp-protocol-version"] = "2025-11-25"
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32020, 400)


@pytest.mark.parametrize("version", ["2025-11-25", "2099-01-01", "latest"])
def test_unsupported_version(era, version):
    request, headers = make_request("tools/list", meta={META_VERSION: version})
    headers["mcp-protocol-version"] = version
    error = expect(UnsupportedProtocolVersion, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32022, 400)
    assert error.data == {"supported": ["2026-07-28"], "requested": version}


def test_unsupported_version_wins_over_later_header_checks(era):
    request, headers = make_request("nope/method", meta={META_VERSION: "2099-01-01"})
    headers["mcp-protocol-version"] = "2099-01-01"
    del headers["mcp-method"]
    expect(UnsupportedProtocolVersion, lambda: era.validate(request, raw_headers(headers)))


# == validate: Mcp-Method / Mcp-Name =========================================================


def test_missing_method_header(era):
    request, headers = make_request("tools/list")
    del headers["mcp-method"]
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert "Mcp-Method" in error.message


@pytest.mark.parametrize("value", ["prompts/list", "Tools/List", "tools/list/"])
def test_method_header_must_match_exactly(era, value):
    request, headers = make_request("tools/list")
    headers["mcp-method"] = value
    expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "echo", "arguments": {"text": "a"}}),
        ("prompts/get", {"name": "greet", "arguments": {"name": "a"}}),
        ("resources/read", {"uri": "x://readme"}),
    ],
)
def test_name_header_is_required_and_must_match(era, method, params):
    request, headers = make_request(method, params)
    era.validate(request, raw_headers(headers))
    missing = dict(headers)
    del missing["mcp-name"]
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(missing)))
    assert "Mcp-Name" in error.message
    wrong = {**headers, "mcp-name": "other"}
    expect(HeaderMismatch, lambda: era.validate(request, raw_headers(wrong)))


def test_name_header_without_body_field_is_a_mismatch(era):
    request, headers = make_request("tools/call", {"arguments": {}})
    headers["mcp-name"] = "echo"
    expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))


def test_a_remembered_header_match_lets_no_other_body_value_through(era):
    request, headers = make_request("tools/call", {"name": "echo", "arguments": {"text": "a"}})
    era.validate(request, raw_headers(headers))  # "echo" matched: remembered
    era.validate(request, raw_headers(headers))  # and again, from memory
    other, _ = make_request("tools/call", {"name": "shout", "arguments": {"text": "a"}})
    error = expect(HeaderMismatch, lambda: era.validate(other, raw_headers(headers)))
    assert "Mcp-Name" in error.message


def test_name_header_is_not_required_on_other_methods(era):
    request, headers = make_request("tools/list")
    assert "mcp-name" not in headers
    era.validate(request, raw_headers(headers))


def test_whitespace_around_header_values_is_trimmed(era):
    request, headers = make_request("tools/call", {"name": "echo", "arguments": {"text": "a"}})
    headers = {key: f" \t{value} \t" for key, value in headers.items()}
    era.validate(request, raw_headers(headers))


def test_base64_sentinel_is_decoded_before_comparing(era):
    request, headers = make_request("resources/read", {"uri": "x://café"})
    headers["mcp-name"] = b64("x://café")
    era.validate(request, raw_headers(headers))
    headers["mcp-method"] = b64("resources/read")  # any value may be sent encoded
    era.validate(request, raw_headers(headers))


@pytest.mark.parametrize(
    "value",
    [
        "=?base64?not base64!?=",
        "=?base64?eDovL2NhZsO?=",  # truncated: bad padding
        "=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?=",  # not UTF-8
    ],
)
def test_bad_base64_is_header_mismatch(era, value):
    request, headers = make_request("resources/read", {"uri": "x://café"})
    headers["mcp-name"] = value
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32020, 400)


@pytest.mark.parametrize("value", ["x://café", "x://caf\x7f", "x://a\nb", "x://\x00"])
def test_non_ascii_or_control_characters_in_headers_are_rejected(era, value):
    request, headers = make_request("resources/read", {"uri": value})
    headers["mcp-name"] = value
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert "visible ASCII" in error.message


# == validate: Mcp-Param-* ===================================================================


def header_call(arguments: dict[str, Any], extra: dict[str, str]) -> tuple[Request, dict]:
    request, headers = make_request("tools/call", {"name": "with_headers", "arguments": arguments})
    headers.update(extra)
    return request, headers


def test_param_headers_that_match_pass(era):
    request, headers = header_call(
        {"region": "eu-west", "count": 7, "dry": True},
        {"mcp-param-region": "eu-west", "mcp-param-count": "007", "mcp-param-dry-run": "true"},
    )
    era.validate(request, raw_headers(headers))


def test_param_headers_absent_on_both_sides_pass(era):
    era.validate(*wired(header_call({}, {})))


def test_non_ascii_param_value_travels_base64(era):
    request, headers = header_call({"region": "Zürich"}, {"mcp-param-region": b64("Zürich")})
    era.validate(request, raw_headers(headers))


@pytest.mark.parametrize(
    ("arguments", "extra"),
    [
        ({"region": "eu"}, {}),  # in the body, header missing
        ({}, {"mcp-param-region": "eu"}),  # header without the body value
        ({"region": "eu"}, {"mcp-param-region": "us"}),
        ({"count": 7}, {"mcp-param-count": "7.0"}),
        ({"dry": True}, {"mcp-param-dry-run": "True"}),
        ({"dry": False}, {"mcp-param-dry-run": "0"}),
        ({"region": "Zürich"}, {"mcp-param-region": "Zürich"}),
    ],
)
def test_param_header_problems_are_header_mismatch(era, arguments, extra):
    request, headers = header_call(arguments, extra)
    error = expect(HeaderMismatch, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32020, 400)


def test_param_headers_of_tools_without_x_mcp_header_are_ignored(era):
    request, headers = make_request("tools/call", {"name": "echo", "arguments": {"text": "a"}})
    headers["mcp-param-region"] = "anything"
    era.validate(request, raw_headers(headers))


# == validate: methods =======================================================================


@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "notifications/initialized",
        "tasks/list",
        "nope",
    ],
)
def test_unknown_and_removed_methods_are_method_not_found_404(era, method):
    request, headers = make_request(method)
    error = expect(MethodNotFound, lambda: era.validate(request, raw_headers(headers)))
    assert wire(error) == (-32601, 404)


def test_methods_of_undeclared_primitives_are_not_found():
    catalog = Catalog()
    catalog.tool(lambda: "x", name="t")
    era = make_era(catalog)
    for method in ["prompts/list", "resources/list", "resources/templates/list"]:
        request, headers = make_request(method)
        expect(MethodNotFound, lambda: era.validate(request, raw_headers(headers)))  # noqa: B023
    request, headers = make_request("completion/complete")
    expect(MethodNotFound, lambda: era.validate(request, raw_headers(headers)))


def test_discover_and_listen_are_served_even_by_an_empty_catalog():
    era = make_era(Catalog())
    for method in ["server/discover", "subscriptions/listen"]:
        era.validate(*wired(make_request(method)))


# == handle: envelope ========================================================================


async def test_discover(era, catalog):
    result, sent = await run(era, "server/discover")
    assert result == {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": catalog.snapshot.capabilities,
        "instructions": "Use the demo wisely.",
        "ttlMs": 300_000,
        "cacheScope": "public",
        "_meta": {SERVER_INFO_KEY: {"name": "demo", "version": "9.9.9"}},
    }
    assert sent.frames == []


async def test_discover_of_an_empty_catalog_promises_nothing():
    result, _ = await run(make_era(Catalog()), "server/discover")
    assert result["capabilities"] == {}
    assert "instructions" not in result


async def test_discover_follows_catalog_changes(era, catalog):
    before, _ = await run(era, "server/discover")
    for name in list(catalog.prompts):
        catalog.remove_prompt(name)
    after, _ = await run(era, "server/discover")
    assert "prompts" in before["capabilities"]
    assert "prompts" not in after["capabilities"]
    assert "completions" not in after["capabilities"]


@pytest.mark.parametrize(
    ("method", "key"),
    [
        ("tools/list", "tools"),
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ],
)
async def test_lists_carry_result_type_cache_fields_and_server_info(era, catalog, method, key):
    result, _ = await run(era, method)
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == 60_000
    assert result["cacheScope"] == "public"
    assert result["_meta"] == {SERVER_INFO_KEY: catalog.server_info}
    assert result[key]


async def test_private_cache_scope_is_used_everywhere(catalog):
    era = make_era(catalog, cache_scope="private")
    for method in ["server/discover", "tools/list"]:
        result, _ = await run(era, method)
        assert result["cacheScope"] == "private"
    result, _ = await run(era, "resources/read", {"uri": "x://readme"})
    assert result["cacheScope"] == "private"


async def test_list_reflects_catalog_changes(era, catalog):
    first, _ = await run(era, "tools/list")
    catalog.tool(lambda: "new", name="brand_new")
    second, _ = await run(era, "tools/list")
    assert "brand_new" not in [tool["name"] for tool in first["tools"]]
    assert second["tools"][-1]["name"] == "brand_new"


async def test_pagination_through_cursors():
    catalog = Catalog()
    for index in range(5):
        catalog.tool(lambda: "x", name=f"tool{index}")
    era = make_era(catalog, page_size=2)
    names, cursor, pages = [], None, []
    while True:
        result, _ = await run(era, "tools/list", {"cursor": cursor} if cursor else {})
        pages.append(result)
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert names == [f"tool{index}" for index in range(5)]
    assert len(pages) == 3
    # Every page is a complete, cacheable result with the same scope.
    assert {page["cacheScope"] for page in pages} == {"public"}
    assert all(page["ttlMs"] == 60_000 and page["resultType"] == "complete" for page in pages)


@pytest.mark.parametrize("cursor", ["garbage", "a.b", 42, {"page": 2}, ["x"]])
async def test_invalid_cursor_is_invalid_params(era, cursor):
    request, headers = make_request("tools/list", {"cursor": cursor})
    call = era.validate(request, raw_headers(headers))
    with pytest.raises(InvalidParams, match="Invalid cursor") as caught:
        era.cached_result(call)
    assert wire(caught.value) == (-32602, 200)


async def test_cursor_of_another_list_is_invalid():
    catalog = Catalog()
    for index in range(3):
        catalog.tool(lambda: "x", name=f"t{index}")
        catalog.prompt(lambda: "p", name=f"p{index}")
    era = make_era(catalog, page_size=1)
    tools, _ = await run(era, "tools/list")
    with pytest.raises(InvalidParams):
        await run(era, "prompts/list", {"cursor": tools["nextCursor"]})


async def test_tool_call_envelope_has_no_cache_fields(era, catalog):
    result, _ = await run(era, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert result == {
        "content": [{"type": "text", "text": "hi"}],
        "resultType": "complete",
        "_meta": {SERVER_INFO_KEY: catalog.server_info},
    }


async def test_tool_error_result_still_has_result_type(era):
    result, _ = await run(era, "tools/call", {"name": "fails", "arguments": {}})
    assert result["isError"] is True
    assert result["resultType"] == "complete"
    assert "ttlMs" not in result


async def test_handler_meta_is_merged_with_server_info(era, catalog):
    result, _ = await run(era, "tools/call", {"name": "with_meta", "arguments": {}})
    assert result["_meta"] == {"custom": 1, SERVER_INFO_KEY: catalog.server_info}


async def test_prompt_get_and_completion_envelopes(era):
    prompt, _ = await run(era, "prompts/get", {"name": "greet", "arguments": {"name": "Al"}})
    assert prompt["resultType"] == "complete"
    assert SERVER_INFO_KEY in prompt["_meta"]
    assert "ttlMs" not in prompt
    assert "cacheScope" not in prompt
    completion, _ = await run(
        era,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": ""}},
    )
    assert completion["completion"] == {"values": ["ann", "bob"]}
    assert completion["resultType"] == "complete"
    assert "ttlMs" not in completion


@pytest.mark.parametrize(
    ("uri", "ttl"),
    [("x://readme", 0), ("x://fast", 5), ("x://items/3", 7)],
)
async def test_resource_read_is_cacheable_with_its_own_ttl(era, uri, ttl):
    """A read is not cached (ttlMs 0) unless its resource declares a TTL: contents change when
    tools write, and a client honouring the list TTL would show stale contents."""
    result, _ = await run(era, "resources/read", {"uri": uri})
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == ttl
    assert result["cacheScope"] == "public"
    assert result["contents"][0]["uri"] == uri


async def test_a_read_is_private_when_its_handler_sees_the_caller_unless_declared() -> None:
    catalog = Catalog("t", "1")

    @catalog.resource("x://mine")
    def mine(ctx: Context) -> str:
        return str(ctx.caller)

    @catalog.resource("x://shared", ttl_ms=1000, cache_scope="public")
    def shared(ctx: Context) -> str:
        return "same for all"

    @catalog.resource("x://plain")
    def plain() -> str:
        return "plain"

    public, private = make_era(catalog), make_era(catalog, cache_scope="private")
    hints = {}
    for name, era in (("public", public), ("private", private)):
        for uri in ("x://mine", "x://shared", "x://plain"):
            result, _ = await run(era, "resources/read", {"uri": uri})
            hints[name, uri] = (result["ttlMs"], result["cacheScope"])
    assert hints == {
        ("public", "x://mine"): (0, "private"),
        ("public", "x://shared"): (1000, "public"),
        ("public", "x://plain"): (0, "public"),
        ("private", "x://mine"): (0, "private"),
        ("private", "x://shared"): (1000, "public"),
        ("private", "x://plain"): (0, "private"),
    }


def test_a_resource_refuses_cache_hints_no_client_could_read() -> None:
    catalog = Catalog("t", "1")
    with pytest.raises(ValueError, match="ttl_ms must be an int >= 0"):
        catalog.resource("x://a", ttl_ms=-1)(lambda: "a")
    with pytest.raises(ValueError, match="cache_scope must be 'public' or 'private'"):
        catalog.resource_template("x://{a}", cache_scope="shared")(lambda a: a)  # type: ignore[arg-type]


async def test_missing_resource_is_invalid_params_with_uri(era):
    request, headers = make_request("resources/read", {"uri": "x://missing"})
    with pytest.raises(InvalidParams) as caught:
        await era.handle(era.validate(request, raw_headers(headers)), Sent())
    assert caught.value.to_wire("modern") == {
        "code": -32602,
        "message": "Resource not found: x://missing",
        "data": {"uri": "x://missing"},
    }


# == handle: progress and logs ===============================================================


async def test_no_notifications_without_token_or_level(era):
    result, sent = await run(era, "tools/call", {"name": "chatty", "arguments": {}})
    assert result["content"][0]["text"] == "done"
    assert sent.frames == []


async def test_progress_and_logs_on_the_request_stream(era):
    result, sent = await run(
        era,
        "tools/call",
        {"name": "chatty", "arguments": {}},
        meta={"progressToken": 42, "io.modelcontextprotocol/logLevel": "info"},
    )
    assert sent.frames == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": 42, "progress": 1, "total": 2},
        },
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "warning", "data": "warning line"},
        },
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": 42, "progress": 2, "total": 2},
        },
    ]
    assert result["resultType"] == "complete"


async def test_context_is_finished_when_the_request_is_answered(catalog):
    kept: list[Context] = []

    @catalog.tool
    async def keeps(ctx: Context) -> str:
        kept.append(ctx)
        return "ok"

    era = make_era(catalog)
    _, sent = await run(
        era, "tools/call", {"name": "keeps", "arguments": {}}, meta={"progressToken": "t"}
    )
    await kept[0].report_progress(1)
    await kept[0].error("too late")
    assert sent.frames == []


# == handle: input required (MRTR) ===========================================================


async def test_input_required_round_trip(era, catalog):
    params = {"name": "ask_name", "arguments": {}}
    first, sent = await run(era, "tools/call", params, capabilities=ALL_CAPS)
    assert first["resultType"] == "input_required"
    assert first["inputRequests"] == {
        "name": {
            "method": "elicitation/create",
            "params": {"message": "Name?", "requestedSchema": NAME_SCHEMA},
        }
    }
    assert isinstance(first["requestState"], str)
    assert first["_meta"] == {SERVER_INFO_KEY: catalog.server_info}
    assert "ttlMs" not in first
    assert "cacheScope" not in first
    assert sent.frames == []

    retry = {
        **params,
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": first["requestState"],
    }
    second, _ = await run(era, "tools/call", retry, capabilities=ALL_CAPS)
    assert second["resultType"] == "complete"
    assert second["content"] == [{"type": "text", "text": "Hello Ada"}]


async def test_a_confirmed_request_state_cannot_be_replayed_onto_a_new_object():
    """Issue 34: after "delete note 8?" was confirmed, a new note took id 8 and the replayed
    state with its answer deleted it unasked. A state is single-use: the replay is refused."""
    catalog = Catalog("notes", "1")
    notes = {8: "shopping"}
    deleted: list[str] = []

    @catalog.tool
    async def delete_note(note_id: int, ctx: Context) -> str:
        answer = await ctx.elicit(f"Delete note {note_id}?", {"type": "object"})
        if answer.action != "accept":
            return "kept"
        deleted.append(notes.pop(note_id))
        return "deleted"

    era = make_era(catalog)
    params = {"name": "delete_note", "arguments": {"note_id": 8}}
    first, _ = await run(era, "tools/call", params, capabilities=ALL_CAPS)
    accept = {"action": "accept", "content": {}}
    confirmed = {
        **params,
        "inputResponses": dict.fromkeys(first["inputRequests"], accept),
        "requestState": first["requestState"],
    }
    done, _ = await run(era, "tools/call", confirmed, capabilities=ALL_CAPS)
    assert done["content"] == [{"type": "text", "text": "deleted"}]
    notes[8] = "tax return"  # a new note takes the id
    with pytest.raises(InvalidParams, match="used already"):
        await run(era, "tools/call", confirmed, capabilities=ALL_CAPS)
    assert (deleted, notes) == (["shopping"], {8: "tax return"})


async def test_multi_round_keeps_earlier_answers_and_handler_state(era):
    params = {"name": "two_steps", "arguments": {"greeting": "Hey"}}
    first, _ = await run(era, "tools/call", params, capabilities=ALL_CAPS)
    assert list(first["inputRequests"]) == ["first"]

    second, _ = await run(
        era,
        "tools/call",
        {
            **params,
            "inputResponses": {"first": {"action": "accept", "content": {"name": "A"}}},
            "requestState": first["requestState"],
        },
        capabilities=ALL_CAPS,
    )
    assert second["resultType"] == "input_required"
    assert list(second["inputRequests"]) == ["second"]

    # The third round sends only the new answer: the first comes back in the state.
    third, _ = await run(
        era,
        "tools/call",
        {
            **params,
            "inputResponses": {"second": {"action": "accept", "content": {"name": "B"}}},
            "requestState": second["requestState"],
        },
        capabilities=ALL_CAPS,
    )
    assert third["resultType"] == "complete"
    assert third["content"][0]["text"] == "Hey A and B after 3 runs"


async def test_a_tool_without_a_context_runs_without_one_and_keeps_every_rule(monkeypatch):
    # Most tools take no Context: none is made for them. A round that carries requestState is
    # still opened (a tampered one is refused), and such a tool suspending by itself still
    # gets an input-required result.
    catalog = Catalog("plain", "1")

    @catalog.tool
    async def plain(text: str) -> str:
        """Takes no context."""
        return text.upper()

    @catalog.tool
    async def suspends() -> str:
        """Suspends without a context."""
        raise InputRequired({"name": Elicitation("Your name?", {"type": "object"})})

    era = make_era(catalog)
    made: list[Context] = []
    real_context = era._context

    def counted_context(call: Any, send: Any) -> Context:
        made.append(real_context(call, send))
        return made[-1]

    monkeypatch.setattr(era, "_context", counted_context)
    result, _ = await run(era, "tools/call", {"name": "plain", "arguments": {"text": "hi"}})
    assert result["content"][0]["text"] == "HI"
    assert result["resultType"] == "complete"
    assert made == []
    asked, _ = await run(era, "tools/call", {"name": "suspends", "arguments": {}})
    assert asked["resultType"] == "input_required"
    assert "name" in asked["inputRequests"]
    assert len(made) == 1  # made only to seal the round's state
    request, headers = make_request(
        "tools/call", {"name": "plain", "arguments": {"text": "x"}, "requestState": "forged"}
    )
    with pytest.raises(InvalidParams, match="requestState"):
        await era.handle(era.validate(request, raw_headers(headers)), Sent())


async def test_tampered_request_state_is_invalid_params(era):
    params = {"name": "ask_name", "arguments": {}}
    first, _ = await run(era, "tools/call", params, capabilities=ALL_CAPS)
    state = first["requestState"]
    tampered = ("A" if state[0] != "A" else "B") + state[1:]
    request, headers = make_request(
        "tools/call",
        {**params, "requestState": tampered, "inputResponses": {}},
        capabilities=ALL_CAPS,
    )
    with pytest.raises(InvalidParams, match="requestState") as caught:
        await era.handle(era.validate(request, raw_headers(headers)), Sent())
    assert wire(caught.value) == (-32602, 200)


async def test_request_state_cannot_move_to_another_call(era):
    first, _ = await run(
        era, "tools/call", {"name": "two_steps", "arguments": {}}, capabilities=ALL_CAPS
    )
    for moved in [
        {"name": "two_steps", "arguments": {"greeting": "other"}},
        {"name": "ask_name", "arguments": {}},
    ]:
        with pytest.raises(InvalidParams, match="another request"):
            await run(
                era,
                "tools/call",
                {**moved, "requestState": first["requestState"]},
                capabilities=ALL_CAPS,
            )


async def test_asking_without_the_capability_is_missing_client_capability(era):
    request, headers = make_request(
        "tools/call", {"name": "ask_name", "arguments": {}}, capabilities={"sampling": {}}
    )
    with pytest.raises(MissingClientCapability) as caught:
        await era.handle(era.validate(request, raw_headers(headers)), Sent())
    assert wire(caught.value) == (-32021, 400)
    assert caught.value.data == {"requiredCapabilities": {"elicitation": {}}}


async def test_malformed_input_response_is_invalid_params(era):
    with pytest.raises(InvalidParams, match="Malformed input response"):
        await run(
            era,
            "tools/call",
            {"name": "ask_name", "arguments": {}, "inputResponses": {"name": {"action": "?"}}},
            capabilities=ALL_CAPS,
        )


async def test_prompt_can_require_input(era):
    params = {"name": "ask_topic", "arguments": {}}
    first, _ = await run(era, "prompts/get", params, capabilities=ALL_CAPS)
    assert first["resultType"] == "input_required"
    second, _ = await run(
        era,
        "prompts/get",
        {
            **params,
            "inputResponses": {"topic": {"action": "accept", "content": {"name": "MCP"}}},
            "requestState": first["requestState"],
        },
        capabilities=ALL_CAPS,
    )
    assert second["messages"][0]["content"]["text"] == "Talk about MCP"
    assert second["resultType"] == "complete"


# == subscriptions/listen ====================================================================


@pytest.mark.parametrize("listen_id", ["listen-1", 1])
def test_listen_acknowledges_only_what_is_served(listen_id):
    catalog = Catalog()
    catalog.tool(lambda: "x", name="t")
    era = make_era(catalog)
    request, headers = make_request(
        "subscriptions/listen",
        {
            "notifications": {
                "toolsListChanged": True,
                "promptsListChanged": True,
                "resourcesListChanged": True,
                "resourceSubscriptions": ["x://a"],
            }
        },
        request_id=listen_id,
    )
    granted, ack = era.listen(era.validate(request, raw_headers(headers)))
    assert orjson.loads(ack) == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUB_ID_KEY: listen_id}, "notifications": {"toolsListChanged": True}},
    }
    frame = era.listen_frame(granted, listen_id)
    framed = frame(Change("tools"))
    assert framed is not None
    assert orjson.loads(framed) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUB_ID_KEY: listen_id}},
    }
    assert frame(Change("prompts")) is None
    assert frame(Change("resources")) is None
    assert frame(Change("resource_updated", "x://a")) is None


def test_listen_resource_updates_carry_uri_and_subscription_id(era):
    request, headers = make_request(
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": ["x://items"]}},
        request_id="L",
    )
    granted, ack = era.listen(era.validate(request, raw_headers(headers)))
    assert orjson.loads(ack)["params"]["notifications"] == {"resourceSubscriptions": ["x://items"]}
    frame = era.listen_frame(granted, "L")
    assert orjson.loads(frame(Change("resource_updated", "x://items/3")))["params"] == {
        "_meta": {SUB_ID_KEY: "L"},
        "uri": "x://items/3",
    }
    assert frame(Change("resource_updated", "x://other")) is None
    assert frame(Change("tools")) is None


@pytest.mark.parametrize(
    "params", [{}, {"notifications": None}, {"notifications": {"toolsListChanged": "yes"}}]
)
def test_listen_with_a_bad_filter_is_invalid_params(era, params):
    request, headers = make_request("subscriptions/listen", params)
    call = era.validate(request, raw_headers(headers))
    with pytest.raises(InvalidParams):
        era.listen(call)


def test_graceful_closing_frame(era, catalog):
    assert orjson.loads(era.listen_closing("listen-7")) == {
        "jsonrpc": "2.0",
        "id": "listen-7",
        "result": {
            "resultType": "complete",
            "_meta": {SUB_ID_KEY: "listen-7", SERVER_INFO_KEY: catalog.server_info},
        },
    }
    assert orjson.loads(era.listen_closing(3))["id"] == 3


# == caching =================================================================================


async def test_cached_results_are_reused_until_the_catalog_changes(era, catalog):
    request, headers = make_request("tools/list")
    call = era.validate(request, raw_headers(headers))
    first = era.cached_result(call)
    assert first is not None
    assert era.cached_result(call) is first
    catalog.tool(lambda: "x", name="another")
    assert era.cached_result(call) is not first


async def test_discover_cache_does_not_grow_with_client_supplied_cursors(era):
    for index in range(50):
        await run(era, "server/discover", {"cursor": f"junk-{index}"})
    assert len(era._encoded) <= 2


async def test_list_cache_is_bounded_by_the_number_of_pages():
    catalog = Catalog()
    for index in range(3):
        catalog.tool(lambda: "x", name=f"t{index}")
    era = make_era(catalog, page_size=2)
    first, _ = await run(era, "tools/list")
    body, tag = first["nextCursor"].split(".")
    for count in range(1, 21):
        respelled = body[:1] + "!" * (4 * count) + body[1:] + "." + tag
        with contextlib.suppress(InvalidParams):  # refusing a respelled cursor is fine too
            await run(era, "tools/list", {"cursor": respelled})
    assert len(era._encoded) <= 2  # one entry per real page


async def test_probe_catalog_smoke():
    from server.builtin.probe import catalog as probe

    era = make_era(probe)
    discover, _ = await run(era, "server/discover")
    assert {"tools", "prompts", "resources"} <= set(discover["capabilities"])
    tools, _ = await run(era, "tools/list")
    assert tools["tools"]
    echo, _ = await run(era, "tools/call", {"name": "echo", "arguments": {"text": "probe"}})
    assert echo["content"] == [{"type": "text", "text": "probe"}]
