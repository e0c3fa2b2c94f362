"""POST /mcp over HTTP semantics, in process: every row of docs/errors.md.

The app is driven through ``httpx.ASGITransport``, which does not run the ASGI lifespan. The
lifespan is what subscribes the hub to the catalog and flips ``/healthz`` to 200, so the
tests that need it enter ``app.starlette.router.lifespan_context`` themselves (``serve``).
ASGITransport also buffers whole responses, so open streams are tested in
test_modern.py; here a listen stream is only read after the hub closes it.
"""

import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.app import make_catalog, serving
from tests.support.core_helpers import post_scope
from tests.support.mcp_client import (
    META_CAPABILITIES,
    META_INFO,
    META_VERSION,
    SUB_ID,
    initialize,
    legacy_headers,
    messages_of,
    modern,
    modern_headers,
    modern_meta,
)

BASE_URL = "http://127.0.0.1:8000"
VERSION = "2026-07-28"
ECHO_HI = {"name": "echo", "arguments": {"text": "hi"}}


# -- a small catalog ----------------------------------------------------------------------


serve = serving(lambda: make_catalog("endpoint-test", "1.2.3"), lifespan=False)


def resources_only_catalog() -> Catalog:
    catalog = Catalog("no-tools", "1.0.0")

    @catalog.resource("test://only")
    def only() -> str:
        """The only thing served."""
        return "only"

    return catalog


# -- helpers ------------------------------------------------------------------------------


async def post(
    client: httpx.AsyncClient,
    message: Any,
    *,
    headers: dict[str, str] | None = None,
    path: str = "/mcp",
    **extra_headers: str,
) -> httpx.Response:
    if headers is None:
        headers = (
            modern_headers(message, **extra_headers)
            if isinstance(message, dict) and "method" in message
            else {"Content-Type": "application/json", "Accept": "application/json"}
        )
    content = message if isinstance(message, bytes) else json.dumps(message).encode()
    return await client.post(path, content=content, headers=headers)


def error_of(response: httpx.Response, status: int, code: int, id: Any = None) -> dict[str, Any]:
    """Assert a JSON-RPC error response; returns its ``error`` member."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert "result" not in body
    assert body["id"] == id
    assert type(body["id"]) is type(id)
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return body["error"]


def result_of(response: httpx.Response, id: Any = 1) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert "error" not in body, body
    assert body["id"] == id
    assert body["result"]["resultType"] in ("complete", "input_required")
    return body["result"]


# -- success paths the error tests lean on ------------------------------------------------


@pytest.mark.anyio
async def test_discover_answers_json_with_the_modern_envelope() -> None:
    async with serve() as (client, _):
        result = result_of(await post(client, modern("server/discover", id="d-1")), id="d-1")
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [VERSION]
    assert set(result["capabilities"]) >= {"tools", "resources", "prompts"}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "endpoint-test"
    assert result["ttlMs"] >= 0
    assert result["cacheScope"] in ("public", "private")


@pytest.mark.anyio
async def test_tool_call_answers_json() -> None:
    async with serve() as (client, _):
        message = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        result = result_of(await post(client, message))
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert not result.get("isError")


@pytest.mark.anyio
async def test_trailing_slash_is_answered_without_redirect() -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), path="/mcp/")
        assert not response.is_redirect
        result = result_of(response)
    assert [tool["name"] for tool in result["tools"]][:2] == ["echo", "refuse"]


@pytest.mark.anyio
async def test_session_id_is_ignored_and_never_minted() -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), Mcp_Session_Id="abc")
    result_of(response)
    assert "mcp-session-id" not in response.headers


# -- 400: the body is not a request --------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body", [b"{not json", b"", b'{"jsonrpc": "2.0", "id": 1,', b"\xff\xfe{}"], ids=repr
)
async def test_body_that_is_not_json_is_400_parse_error_with_null_id(body: bytes) -> None:
    async with serve() as (client, _):
        error_of(await post(client, body), 400, -32700, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "id"),
    [
        ('"just a string"', None),
        ("42", None),
        ("[]", None),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', None),
        ('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None),
        ('{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', None),
        ('{"jsonrpc": "1.0", "id": "v1", "method": "tools/list"}', "v1"),
        ('{"id": 5, "method": "tools/list"}', 5),
        ('{"jsonrpc": "2.0", "id": 6, "method": 7}', 6),
        ('{"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": [1]}', 8),
        ('{"jsonrpc": "2.0", "id": "r", "method": "tools/list", "params": "x"}', "r"),
    ],
)
async def test_not_a_jsonrpc_request_is_400_invalid_request(body: str, id: Any) -> None:
    async with serve() as (client, _):
        error_of(await post(client, body.encode()), 400, -32600, id)


@pytest.mark.anyio
async def test_a_bare_request_is_told_both_ways_in() -> None:
    # What `curl -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'` sends.
    bare = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with serve() as (client, _):
        response = await post(client, bare, headers={"Content-Type": "application/json"})
    message = error_of(response, 400, -32600, 1)["message"]
    assert META_VERSION in message
    assert "MCP-Protocol-Version: 2026-07-28" in message
    assert "Mcp-Method" in message
    assert "initialize" in message
    assert "Mcp-Session-Id" in message


@pytest.mark.anyio
async def test_batch_is_400_invalid_request() -> None:
    batch = [modern("tools/list", id=1), modern("prompts/list", id=2)]
    async with serve() as (client, _):
        response = await post(client, batch, headers=modern_headers(batch[0]))
    # Batches exist only in a 2025-03-26 session; a sessionless batch is refused.
    error_of(response, 400, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "no"}},
    ],
)
async def test_response_message_is_400_invalid_request(message: dict[str, Any]) -> None:
    async with serve() as (client, _):
        response = await post(client, message)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


# -- 400: modern per-request rules ---------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "meta",
    [
        {META_CAPABILITIES: {}},
        {META_VERSION: VERSION},
        {
            META_VERSION: VERSION,
            META_CAPABILITIES: None,
        },
        {**modern_meta(), "io.modelcontextprotocol/logLevel": "loud"},
        {**modern_meta(), "progressToken": 1.5},
        {**modern_meta(), META_INFO: "me"},
    ],
    ids=["no-version", "no-capabilities", "null-capabilities", "log-level", "token", "info"],
)
async def test_malformed_meta_is_400_invalid_params(meta: dict[str, Any]) -> None:
    message = {"jsonrpc": "2.0", "id": "m", "method": "tools/list", "params": {"_meta": meta}}
    async with serve() as (client, _):
        error_of(await post(client, message), 400, -32602, "m")


@pytest.mark.anyio
async def test_missing_meta_with_modern_header_is_400_invalid_params() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    async with serve() as (client, _):
        error = error_of(await post(client, message), 400, -32602, 3)
    assert "_meta" in error["message"]


@pytest.mark.anyio
async def test_client_info_is_optional() -> None:
    async with serve() as (client, _):
        result_of(await post(client, modern("tools/list")))


def _without(headers: dict[str, str], name: str) -> dict[str, str]:
    return {key: value for key, value in headers.items() if key.lower() != name.lower()}


CALL_ECHO = modern("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=11)
CALL_PICK = modern("tools/call", {"name": "pick", "arguments": {"region": "eu"}}, id=12)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "change"),
    [
        (CALL_ECHO, {"MCP-Protocol-Version": None}),
        (CALL_ECHO, {"MCP-Protocol-Version": "2026-07-27"}),
        (CALL_ECHO, {"Mcp-Method": None}),
        (CALL_ECHO, {"Mcp-Method": "tools/list"}),
        (CALL_ECHO, {"Mcp-Method": "Tools/Call"}),
        (CALL_ECHO, {"Mcp-Name": None}),
        (CALL_ECHO, {"Mcp-Name": "add"}),
        (CALL_ECHO, {"Mcp-Name": "ECHO"}),
        (CALL_ECHO, {"Mcp-Name": "=?base64?not base64!?="}),
        (CALL_PICK, {"Mcp-Param-Region": None}),
        (CALL_PICK, {"Mcp-Param-Region": "us"}),
        (modern("resources/read", {"uri": "test://doc"}, id=13), {"Mcp-Name": "test://other"}),
        (
            modern("prompts/get", {"name": "greet", "arguments": {"name": "a"}}, 14),
            {"Mcp-Name": None},
        ),
    ],
)
async def test_header_missing_or_not_matching_is_400_header_mismatch(
    message: dict[str, Any], change: dict[str, str | None]
) -> None:
    headers = modern_headers(message)
    for name, value in change.items():
        headers = _without(headers, name)
        if value is not None:
            headers[name] = value
    async with serve() as (client, _):
        error_of(await post(client, message, headers=headers), 400, -32020, message["id"])


@pytest.mark.anyio
async def test_matching_headers_pass_including_base64_and_param_headers() -> None:
    async with serve() as (client, _):
        # Header names are case-insensitive; a base64 sentinel value is decoded first.
        encoded = modern_headers(CALL_ECHO, **{"Mcp-Name": "=?base64?ZWNobw==?="})
        result_of(await post(client, CALL_ECHO, headers=encoded), id=11)
        lower = {key.lower(): value for key, value in modern_headers(CALL_PICK).items()}
        lower["mcp-param-region"] = "eu"
        result = result_of(await post(client, CALL_PICK, headers=lower), id=12)
    assert result["content"][0]["text"] == "picked eu"


@pytest.mark.anyio
async def test_unsupported_version_is_400_with_supported_and_requested() -> None:
    message = modern("tools/list", {"_meta": {META_VERSION: "2099-01-01"}}, "v")
    async with serve() as (client, _):
        response = await post(client, message, **{"MCP-Protocol-Version": "2099-01-01"})  # type: ignore[arg-type]
    error = error_of(response, 400, -32022, "v")
    assert error["data"] == {"supported": [VERSION], "requested": "2099-01-01"}


@pytest.mark.anyio
async def test_legacy_header_on_modern_body_is_header_mismatch() -> None:
    async with serve() as (client, _):
        response = await post(
            client,
            modern("tools/list"),
            **{"MCP-Protocol-Version": "2025-11-25"},  # type: ignore[arg-type]
        )
    error_of(response, 400, -32020, 1)


@pytest.mark.anyio
async def test_undeclared_client_capability_is_400_with_required_capabilities() -> None:
    message = modern("tools/call", {"name": "ask"}, id="cap")
    async with serve() as (client, _):
        error = error_of(await post(client, message), 400, -32021, "cap")
        assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}
        # Declared, the same call is an input-required round instead.
        declared = modern(
            "tools/call",
            {
                "name": "ask",
                "_meta": {META_CAPABILITIES: {"elicitation": {}}},
            },
            id="cap",
        )
        result = result_of(await post(client, declared), id="cap")
    assert result["resultType"] == "input_required"
    assert result["inputRequests"]["name"]["method"] == "elicitation/create"
    assert isinstance(result["requestState"], str)


# -- 404: unknown and removed methods --------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}),
        ("ping", {}),
        ("logging/setLevel", {"level": "info"}),
        ("resources/subscribe", {"uri": "test://doc"}),
        ("resources/unsubscribe", {"uri": "test://doc"}),
        ("no/such/method", {}),
        ("completion/complete", {}),  # not advertised: the catalog has no completions
    ],
)
async def test_unknown_or_removed_method_is_404_method_not_found(
    method: str, params: dict[str, Any]
) -> None:
    message = modern(method, params, id=f"id-{method}")
    async with serve() as (client, _):
        error = error_of(await post(client, message), 404, -32601, f"id-{method}")
    assert method in error["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["tools/list", "tools/call", "prompts/list", "prompts/get"])
async def test_methods_of_undeclared_primitives_are_404(method: str) -> None:
    params = {"name": "x"} if method.endswith(("call", "get")) else {}
    async with serve(resources_only_catalog()) as (client, _):
        error_of(await post(client, modern(method, params, id=9)), 404, -32601, 9)
        # What is declared is served.
        result_of(await post(client, modern("resources/list", id=10)), id=10)


# -- 200 errors: bad params, unknown names -------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["tools/list", "prompts/list", "resources/list"])
async def test_invalid_cursor_is_200_invalid_params(method: str) -> None:
    async with serve() as (client, _):
        response = await post(client, modern(method, {"cursor": "forged"}, id=21))
    error_of(response, 200, -32602, 21)


@pytest.mark.anyio
async def test_cursor_of_another_list_is_invalid() -> None:
    async with serve(page_size=1) as (client, _):
        first = result_of(await post(client, modern("tools/list", id=1)))
        cursor = first["nextCursor"]
        result_of(await post(client, modern("tools/list", {"cursor": cursor}, id=2)), id=2)
        response = await post(client, modern("prompts/list", {"cursor": cursor}, id=3))
    error_of(response, 200, -32602, 3)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "message",
    [
        modern("tools/call", {"name": "nope"}, id=31),
        modern("tools/call", {"arguments": {}}, id=31),
        modern("tools/call", {"name": "echo", "arguments": [1]}, id=31),
        modern("prompts/get", {"name": "nope"}, id=31),
        modern("prompts/get", {"name": "greet", "arguments": {"name": 5}}, id=31),
    ],
)
async def test_bad_params_and_unknown_names_are_200_invalid_params(
    message: dict[str, Any],
) -> None:
    async with serve() as (client, _):
        error_of(await post(client, message), 200, -32602, 31)


@pytest.mark.anyio
async def test_unknown_resource_is_200_invalid_params_with_uri() -> None:
    async with serve() as (client, _):
        response = await post(client, modern("resources/read", {"uri": "test://missing"}, 41))
    error = error_of(response, 200, -32602, 41)
    assert error["data"] == {"uri": "test://missing"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments", "text"),
    [
        ("refuse", {}, "refused on purpose"),
        ("echo", {"text": 5}, "text"),
        ("echo", {}, "text"),
        ("explode", {}, "explode"),
    ],
)
async def test_failing_tools_are_isError_results(
    name: str, arguments: dict[str, Any], text: str
) -> None:
    async with serve() as (client, _):
        message = modern("tools/call", {"name": name, "arguments": arguments})
        response = await post(client, message)
    result = result_of(response)
    assert result["isError"] is True
    assert result["resultType"] == "complete"
    assert text in result["content"][0]["text"]
    assert "tool-secret-detail" not in response.text


@pytest.mark.anyio
async def test_non_tool_handler_crash_is_200_internal_error_without_details(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    async with serve() as (client, _):
        response = await post(client, modern("resources/read", {"uri": "test://broken"}, "b"))
    error = error_of(response, 200, -32603, "b")
    assert error["message"] == "Internal error"
    assert "data" not in error
    for leak in ("Traceback", "resource-secret-detail", "RuntimeError", "broken()"):
        assert leak not in response.text
    # The details go to the server log, and only there.
    logged = [record for record in caplog.records if record.exc_info]
    assert any(
        record.exc_info and "resource-secret-detail" in str(record.exc_info[1]) for record in logged
    )


# -- 403: Host and Origin ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil"]
)
async def test_host_not_allowed_is_403(host: str) -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), Host=host)
    error_of(response, 403, -32600, None)


@pytest.mark.anyio
async def test_a_refused_host_is_logged_once_bounded_and_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from server.logs import JsonFormatter, TextFormatter

    # As long as a header value may be (MCP_MAX_HEADER_VALUE_BYTES), with a terminal escape.
    host = "evil.example\x1b[2K2026-12-01 WARNING forged" + "x" * 8000
    caplog.set_level(logging.INFO)
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), Host=host)
    error_of(response, 403, -32600, None)
    assert len(response.content) < 1000  # the answer does not echo 8 KB back either
    (line,) = [record for record in caplog.records if "MCP_ALLOWED_HOSTS" in record.getMessage()]
    assert line.levelname == "WARNING"
    assert "evil.example" in line.getMessage()
    text = TextFormatter().format(line)
    assert len(text) < 1000
    assert "\x1b" not in text
    assert "evil.example\\x1b[2K2026" in text
    assert "\x1b" not in JsonFormatter().format(line)


@pytest.mark.anyio
@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "localhost:3000", "[::1]:8000"])
async def test_allowed_hosts_are_served(host: str) -> None:
    async with serve() as (client, _):
        result_of(await post(client, modern("tools/list"), Host=host))


@pytest.mark.anyio
async def test_a_host_remembered_as_allowed_lets_no_other_through() -> None:
    async with serve() as (client, _):
        for _ in range(3):
            result_of(await post(client, modern("tools/list"), Host="localhost:3000"))
            response = await post(client, modern("tools/list"), Host="localhost.evil:3000")
            error_of(response, 403, -32600, None)


@pytest.mark.anyio
async def test_host_allow_list_is_configurable() -> None:
    async with serve(allowed_hosts=["mcp.example.com:443"]) as (client, _):
        response = await post(client, modern("tools/list"), Host="mcp.example.com:443")
        result_of(response)
        error_of(await post(client, modern("tools/list")), 403, -32600, None)
    async with serve(allowed_hosts=["*"]) as (client, _):
        result_of(await post(client, modern("tools/list"), Host="anything.example"))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "https://evil.example:8000",
        "http://localhost.evil.example",
        "null",
        "file://localhost",
        "localhost",
    ],
)
async def test_origin_not_allowed_is_403(origin: str) -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), Origin=origin)
    error_of(response, 403, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "origin",
    ["http://localhost:5173", "http://127.0.0.1:8000", "https://localhost", "http://[::1]:3000"],
)
async def test_localhost_origins_are_accepted(origin: str) -> None:
    async with serve() as (client, _):
        result_of(await post(client, modern("tools/list"), Origin=origin))


@pytest.mark.anyio
async def test_configured_origin_is_accepted() -> None:
    async with serve(allowed_origins=["https://app.example.com"]) as (client, _):
        origin = "https://app.example.com"
        result_of(await post(client, modern("tools/list"), Origin=origin))
        other = "https://app.example.com.evil"
        error_of(await post(client, modern("tools/list"), Origin=other), 403, -32600, None)


# -- 406: Accept -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "accept",
    ["text/html", "application/xml, image/*", "application/json;q=0, text/event-stream;q=0"],
)
async def test_accept_without_json_or_sse_is_406(accept: str) -> None:
    async with serve() as (client, _):
        error_of(await post(client, modern("tools/list"), Accept=accept), 406, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "accept", ["*/*", "application/json", "application/*", "text/html, application/json;q=0.5"]
)
async def test_accept_allowing_json_answers_json(accept: str) -> None:
    async with serve() as (client, _):
        result_of(await post(client, modern("tools/list"), Accept=accept))


@pytest.mark.anyio
async def test_missing_accept_is_served_as_json() -> None:
    async with serve() as (client, _):
        message = modern("tools/list")
        built = client.build_request(
            "POST", "/mcp", content=json.dumps(message).encode(), headers=modern_headers(message)
        )
        del built.headers["accept"]
        assert "accept" not in built.headers
        result_of(await client.send(built))


@pytest.mark.anyio
async def test_cached_pages_are_answered_without_a_handler(monkeypatch: Any) -> None:
    # A list page or discover is the cached bytes, asked for once: no handler coroutine (and,
    # answerable as JSON, no response writer). Only SSE, it is the same page as one event; a
    # refusal (a cursor never issued) is answered from that one question too.
    async with serve() as (client, app):
        handled: list[str] = []
        asked: list[str] = []
        general, cached = app.modern.handle, app.modern.cached_result

        async def counting(call: Any, send: Any, *origin: Any) -> Any:
            handled.append(call.request.method)
            return await general(call, send, *origin)

        def counting_cached(call: Any) -> Any:
            asked.append(call.request.method)
            return cached(call)

        monkeypatch.setattr(app.modern, "handle", counting)
        monkeypatch.setattr(app.modern, "cached_result", counting_cached)
        for id, method in enumerate(["tools/list", "server/discover", "resources/list"]):
            result_of(await post(client, modern(method, id=id)), id=id)
        assert asked == ["tools/list", "server/discover", "resources/list"]
        sse = await post(client, modern("tools/list", id="s"), Accept="text/event-stream")
        assert sse.headers["content-type"].startswith("text/event-stream")
        event = messages_of(sse.text)[0]
        assert event["id"] == "s"
        assert event["result"]["tools"]
        error_of(await post(client, modern("tools/list", {"cursor": "x"}, id=9)), 200, -32602, 9)
        assert asked[3:] == ["tools/list", "tools/list"]
        result_of(await post(client, modern("tools/call", ECHO_HI, 7)), id=7)
        assert asked[5:] == []  # not a cached method (CACHED_METHODS): never asked

        assert handled == ["tools/call"]


@pytest.mark.anyio
async def test_two_authorization_headers_are_refused_without_auth_too() -> None:
    # Without authentication nothing reads the header, but a request that sends it twice is
    # still malformed: 400, as with authentication on.
    async with serve() as (client, _):
        message = modern("tools/list", id=4)
        headers = [(name, value) for name, value in modern_headers(message).items()]
        headers += [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
        response = await client.post("/mcp", content=json.dumps(message), headers=headers)
        error_of(response, 400, -32600)
        one = [*headers[:-1]]
        result_of(await client.post("/mcp", content=json.dumps(message), headers=one), id=4)


@pytest.mark.anyio
async def test_accept_only_event_stream_gets_the_result_as_sse() -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list", id="s"), Accept="text/event-stream")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = messages_of(response.text)
    assert len(messages) == 1
    message = messages[0]
    assert message["id"] == "s"
    assert message["result"]["tools"][0]["name"] == "echo"


# -- 413 / 415 / 405 / 202 -------------------------------------------------------------------


def padded_echo(size: int) -> bytes:
    """A valid tools/call body of exactly ``size`` bytes."""
    message = modern("tools/call", {"name": "echo", "arguments": {"text": ""}}, id=51)
    bare = len(json.dumps(message).encode())
    message["params"]["arguments"]["text"] = "x" * (size - bare)
    body = json.dumps(message).encode()
    assert len(body) == size
    return body


ECHO_HEADERS = modern_headers(modern("tools/call", {"name": "echo"}))


@pytest.mark.anyio
async def test_body_at_the_limit_is_accepted_and_one_byte_more_is_413() -> None:
    async with serve(max_body_bytes=1024) as (client, _):
        ok = await client.post("/mcp", content=padded_echo(1024), headers=ECHO_HEADERS)
        result_of(ok, id=51)
        too_big = await client.post("/mcp", content=padded_echo(1025), headers=ECHO_HEADERS)
    error_of(too_big, 413, -32600, None)


@pytest.mark.anyio
async def test_declared_oversized_body_is_refused_before_it_is_read() -> None:
    app = create_app(Settings(_env_file=None, max_body_bytes=1024), make_catalog())
    scope = post_scope(
        [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", b"1000000"),
        ]
    )
    reads: list[int] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        reads.append(1)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert reads == []
    assert sent[0]["status"] == 413
    body = json.loads(sent[1]["body"])
    assert body["error"]["code"] == -32600
    assert body["id"] is None


@pytest.mark.anyio
async def test_streamed_body_over_the_limit_is_413() -> None:
    body = padded_echo(4096)
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 512):
            sent.append(start)
            yield body[start : start + 512]

    async with serve(max_body_bytes=1024) as (client, _):
        response = await client.post("/mcp", content=chunks(), headers=ECHO_HEADERS)
    assert "content-length" not in response.request.headers
    error_of(response, 413, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"],
)
async def test_wrong_content_type_is_415(content_type: str | None) -> None:
    message = modern("tools/list")
    headers = _without(modern_headers(message), "Content-Type")
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with serve() as (client, _):
        error_of(await post(client, message, headers=headers), 415, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/json;"]
)
async def test_json_content_type_variants_are_accepted(content_type: str) -> None:
    async with serve() as (client, _):
        response = await post(client, modern("tools/list"), **{"Content-Type": content_type})  # type: ignore[arg-type]
    result_of(response)


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["PUT", "PATCH"])
@pytest.mark.parametrize("path", ["/mcp", "/mcp/"])
async def test_other_http_methods_are_405_with_allow(method: str, path: str) -> None:
    async with serve() as (client, _):
        response = await client.request(method, path, headers={"Accept": "text/event-stream"})
    error = error_of(response, 405, -32600, None)
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST", "DELETE"}
    assert method in error["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_without_a_session_are_400_with_a_jsonrpc_body(method: str) -> None:
    """GET and DELETE belong to initialize-era sessions; without one they are refused (with
    the HTTP+SSE transport on, such a GET opens its stream: tests/transport/test_legacy_sse)."""
    async with serve(sse_transport=False) as (client, _):
        response = await client.request(method, "/mcp", headers={"Accept": "text/event-stream"})
        error = error_of(response, 400, -32600, None)
        assert "Mcp-Session-Id" in error["message"]
        headers = legacy_headers("nope", None, "text/event-stream", Content_Type=None)
        unknown = await client.request(method, "/mcp", headers=headers)
        error_of(unknown, 404, -32600, None)


@pytest.mark.anyio
async def test_get_is_guarded_like_post() -> None:
    async with serve() as (client, _):
        evil = await client.get("/mcp", headers={"Accept": "text/event-stream", "Host": "evil.x"})
        error_of(evil, 403, -32600, None)
        origin = await client.get(
            "/mcp", headers={"Accept": "text/event-stream", "Origin": "http://evil.example"}
        )
        error_of(origin, 403, -32600, None)
        json_only = await client.get("/mcp", headers={"Accept": "application/json"})
        error_of(json_only, 406, -32600, None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "method", ["notifications/initialized", "notifications/cancelled", "notifications/whatever"]
)
async def test_notifications_are_202_with_empty_body(method: str) -> None:
    message = {"jsonrpc": "2.0", "method": method, "params": {"_meta": modern_meta()}}
    async with serve() as (client, _):
        response = await post(client, message)
    assert response.status_code == 202
    assert response.content == b""


# -- requests without modern metadata belong to the initialize era ----------------------------

LEGACY_HEADERS = legacy_headers(version=None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "headers", "status", "hint"),
    [
        (
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            LEGACY_HEADERS,
            400,
            "Mcp-Session-Id",
        ),
        (
            {"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": "echo"}},
            legacy_headers(),
            400,
            "initialize",
        ),
        (
            {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}},
            legacy_headers("s1", "2025-06-18"),
            404,
            "initialize",
        ),
    ],
)
async def test_legacy_looking_request_gets_a_clear_jsonrpc_error(
    message: dict[str, Any], headers: dict[str, str], status: int, hint: str
) -> None:
    async with serve() as (client, _):
        response = await post(client, message, headers=headers)
    assert response.status_code < 500
    error = error_of(response, status, -32600, message["id"])
    assert hint in error["message"]


@pytest.mark.anyio
async def test_initialize_without_modern_metadata_opens_a_session() -> None:
    message = initialize("2025-11-25", client_info={"name": "old", "version": "1"}, id=1)
    async with serve() as (client, _):
        response = await post(client, message, headers=LEGACY_HEADERS)
        assert response.status_code == 200
        session = response.headers["mcp-session-id"]
        assert response.json()["result"]["protocolVersion"] == "2025-11-25"
        listed = await post(
            client,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=legacy_headers(session, "2025-11-25"),
        )
    assert listed.status_code == 200
    assert listed.json()["result"]["tools"][0]["name"] == "echo"


# -- error ids -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("id", [0, -3, 2**53, "", "req-é"])
async def test_errors_echo_the_request_id_with_its_type(id: Any) -> None:
    async with serve() as (client, _):
        unknown = await post(client, modern("nope", id=id))
        error_of(unknown, 404, -32601, id)
        mismatch = await post(client, modern("tools/list", id=id), **{"Mcp-Method": "x"})  # type: ignore[arg-type]
        error_of(mismatch, 400, -32020, id)
        bad_cursor = await post(client, modern("tools/list", {"cursor": "x"}, id=id))
        error_of(bad_cursor, 200, -32602, id)


# -- subscriptions/listen refusals, and a stream read after the hub closes it -------------------


LISTEN_ALL = {
    "toolsListChanged": True,
    "promptsListChanged": True,
    "resourcesListChanged": True,
    "resourceSubscriptions": ["test://only"],
}


@pytest.mark.anyio
async def test_listen_without_sse_accept_is_406_with_id() -> None:
    message = modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, "L")
    async with serve() as (client, app):
        response = await post(client, message, Accept="application/json")
        assert len(app.hub) == 0
    error_of(response, 406, -32600, "L")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "notifications",
    [None, [], {"toolsListChanged": "yes"}, {"resourceSubscriptions": ["no-scheme"]}],
)
async def test_listen_with_a_bad_filter_is_invalid_params(notifications: Any) -> None:
    params = {} if notifications is None else {"notifications": notifications}
    message = modern("subscriptions/listen", params, "L")
    async with serve() as (client, app):
        response = await post(client, message, Accept="text/event-stream")
        assert len(app.hub) == 0
    error_of(response, 200, -32602, "L")


@pytest.mark.anyio
async def test_listen_grants_only_what_is_served_and_needs_the_lifespan() -> None:
    """Catalog changes reach the stream through the hub subscription made in the lifespan."""
    catalog = make_catalog()
    catalog.remove_prompt("greet")  # no prompts: promptsListChanged cannot be granted
    filter_ = {**LISTEN_ALL, "resourceSubscriptions": ["test://doc"]}
    message = modern("subscriptions/listen", {"notifications": filter_}, id=77)
    async with serve(catalog, lifespan=True) as (client, app):
        responses: list[httpx.Response] = []

        async def listen() -> None:
            responses.append(await post(client, message, Accept="text/event-stream"))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listen)
                while len(app.hub) == 0:  # noqa: ASYNC110 (the hub has no event to wait on)
                    await anyio.sleep(0.01)
                catalog.remove_tool("explode")  # tools/list_changed
                catalog.notify_resource_updated("test://other")  # not subscribed
                catalog.notify_resource_updated("test://doc")
                app.hub.close_all("shutdown")
        assert len(app.hub) == 0
    (response,) = responses
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"
    ack, *notes, closing = messages_of(response.text)
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"] == {SUB_ID: 77}
    assert ack["params"]["notifications"] == {
        "toolsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["test://doc"],
    }
    assert [(note["method"], note["params"]) for note in notes] == [
        ("notifications/tools/list_changed", {"_meta": {SUB_ID: 77}}),
        ("notifications/resources/updated", {"_meta": {SUB_ID: 77}, "uri": "test://doc"}),
    ]
    assert closing["id"] == 77
    assert closing["result"]["resultType"] == "complete"
    assert closing["result"]["_meta"][SUB_ID] == 77


@pytest.mark.anyio
async def test_catalog_change_from_a_sync_tool_reaches_streams_on_the_loop_thread() -> None:
    catalog = make_catalog()

    @catalog.tool
    def touch_sync(uri: str) -> str:
        """A sync tool (run in a worker thread) that announces a resource update."""
        catalog.notify_resource_updated(uri)
        return "touched"

    filter_ = {"resourceSubscriptions": ["test://doc"]}
    message = modern("subscriptions/listen", {"notifications": filter_}, id="t")
    loop_thread = threading.get_ident()
    put_from: list[int] = []
    async with serve(catalog, lifespan=True) as (client, app):
        attach = app.hub.attach

        def recording_attach(frame: Any) -> Any:
            # The stream's filter runs where the change is offered to it.
            def offered(change: Any) -> Any:
                put_from.append(threading.get_ident())
                return frame(change)

            return attach(offered)

        app.hub.attach = recording_attach  # type: ignore[method-assign]
        responses: list[httpx.Response] = []

        async def listen() -> None:
            responses.append(await post(client, message, Accept="text/event-stream"))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(listen)
                while len(app.hub) == 0:  # noqa: ASYNC110 (the hub has no event to wait on)
                    await anyio.sleep(0.01)
                touch = modern(
                    "tools/call", {"name": "touch_sync", "arguments": {"uri": "test://doc"}}
                )
                result_of(await post(client, touch))
                await anyio.sleep(0.05)
                app.hub.close_all("shutdown")
    updates = [m for m in messages_of(responses[0].text) if m.get("method", "").endswith("updated")]
    assert len(updates) == 1
    # asyncio queues are not thread-safe: every frame must be queued on the loop's thread.
    assert put_from
    assert set(put_from) == {loop_thread}


# -- health ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_healthz_is_503_until_the_lifespan_has_started_and_after_it_ends() -> None:
    app = create_app(Settings(_env_file=None), make_catalog())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        starting = await client.get("/healthz")
        assert starting.status_code == 503
        assert starting.json() == {"status": "starting"}
        assert (await client.get("/readyz")).status_code == 503
        async with app.starlette.router.lifespan_context(app.starlette):
            ready = await client.get("/healthz")
            assert ready.status_code == 200
            assert ready.json() == {"status": "ok", "draining": False}
            assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/healthz")).status_code == 503
        assert (await client.get("/readyz")).status_code == 503
