"""server.transport.legacy_sse: the 2024-11-05 HTTP+SSE transport on a real uvicorn.

The official Python SDK's ``sse_client`` (``mcp`` 2.3.0) drives a live server on 127.0.0.1:
the ``endpoint`` event, initialize, lists, a call with progress and logs, a resource
subscription's update, elicitation, close; raw httpx checks what the SDK does not show (the
wire, refusals, records, the fallback on the MCP path, the mount prefix, the off switch).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from server.app import Application, create_app
from server.settings import Settings
from tests.support.http_sse import endpoint_of
from tests.support.live_server import ServerThread
from tests.support.mcp_client import initialize
from tests.support.polling import wait_until

PROBE_NAME = "mcp-http-server-probe"


def settings_for(tmp: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "catalog": "probe",
        "records": ["file"],
        "records_file": str(tmp / "records.jsonl"),
        "records_flush_ms": 10,
        "keepalive_s": 0.2,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sse-records")


@pytest.fixture(scope="module")
def live(records_dir: Path) -> Iterator[ServerThread]:
    running = ServerThread(create_app(settings_for(records_dir))).start()
    yield running
    running.stop()


@contextlib.asynccontextmanager
async def connect(url: str, **options: Any) -> AsyncIterator[Client]:
    options.setdefault("read_timeout_seconds", 10)
    async with Client(sse_client(url, timeout=10), mode="legacy", **options) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the SDK's sse_client --------------------------------------------------------------------


@pytest.mark.anyio
async def test_sdk_client_initializes_lists_and_calls(live: ServerThread) -> None:
    async with connect(f"{live.url}/sse") as client:
        assert client.protocol_version in ("2025-11-25", "2024-11-05", "2025-06-18", "2025-03-26")
        assert client.server_info is not None
        assert client.server_info.name == PROBE_NAME
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "add", "count_slowly", "ask_name"} <= tools
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.structured_content == {"a": 2.0, "b": 3.0, "sum": 5.0}
        failed = await client.call_tool("fail", {"message": "on purpose"})
        assert failed.is_error is True
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        assert "greet" in prompts
        read = await client.read_resource("probe://readme")
        assert read.contents


@pytest.mark.anyio
async def test_sdk_client_gets_progress_and_logs(live: ServerThread) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async with connect(f"{live.url}/sse", logging_callback=on_log) as client:
        result = await client.call_tool(
            "count_slowly", {"steps": 3, "delay_ms": 10}, progress_callback=on_progress
        )
        assert text_of(result) == "Counted to 3."
        await wait_until(lambda: len(logs) == 3 and len(reported) == 3)
    assert reported == [(float(n), 3.0, f"step {n} of 3") for n in range(1, 4)]
    assert [params.data for params in logs] == [f"counted {n}" for n in range(1, 4)]


@pytest.mark.anyio
async def test_sdk_client_gets_resource_updates(live: ServerThread) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with connect(f"{live.url}/sse", message_handler=on_message) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource("probe://readme")
        await client.call_tool("touch_resource", {"uri": "probe://readme"})
        await wait_until(lambda: updates == ["probe://readme"])


@pytest.mark.anyio
async def test_sdk_client_answers_elicitation(live: ServerThread) -> None:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async with connect(f"{live.url}/sse", elicitation_callback=on_elicit) as client:
        result = await client.call_tool("ask_name", {})
        assert text_of(result) == "Hello, Ada Lovelace!"


@pytest.mark.anyio
async def test_closing_the_stream_ends_the_session(live: ServerThread) -> None:
    app = live.app
    async with connect(f"{live.url}/sse") as client:
        await client.list_tools()
        [session_id] = [sid for sid, runtime in app_held(app).items() if runtime]
    await wait_until(lambda: session_id not in app_held(app))
    await wait_until(lambda: app.runtimes.peek(session_id) is None)


def app_held(app: Application) -> dict[str, Any]:
    assert app.sse is not None
    return dict(app.sse.held)


# -- the wire, seen raw ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def raw_stream(
    http: httpx.AsyncClient, url: str, **headers: str
) -> AsyncIterator[tuple[httpx.Response, AsyncIterator[str]]]:
    """A GET stream and an iterator over its lines."""
    async with http.stream("GET", url, headers={"accept": "text/event-stream", **headers}) as got:
        yield got, got.aiter_lines()


@contextlib.asynccontextmanager
async def initialized(
    http: httpx.AsyncClient, headers: dict[str, str]
) -> AsyncIterator[tuple[str, AsyncIterator[str]]]:
    """A session's stream, initialized with ``headers`` on every request: where to post, and
    the stream's lines after the initialize's answer."""
    async with raw_stream(http, "/sse", **headers) as (_, lines):
        endpoint = await endpoint_of(lines)
        assert (await http.post(endpoint, json=INITIALIZE, headers=headers)).status_code == 202
        await next_message(lines)
        yield endpoint, lines


async def next_message(lines: AsyncIterator[str]) -> dict[str, Any]:
    with anyio.fail_after(5):
        async for line in lines:
            if line.startswith("data: {"):
                message: dict[str, Any] = json.loads(line[len("data: ") :])
                return message
    raise AssertionError("the stream ended")


INITIALIZE = initialize("2024-11-05", client_info={"name": "raw-sse", "version": "1.0"}, id=1)


@pytest.mark.anyio
async def test_endpoint_event_then_202_and_the_answer_on_the_stream(
    live: ServerThread, records_dir: Path
) -> None:
    async with (
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
        raw_stream(http, "/sse") as (got, lines),
    ):
        assert got.status_code == 200
        assert got.headers["content-type"].startswith("text/event-stream")
        endpoint = await endpoint_of(lines)
        assert endpoint.startswith("/messages?session_id=")
        posted = await http.post(endpoint, json=INITIALIZE)
        assert posted.status_code == 202
        answer = await next_message(lines)
        assert answer["id"] == 1
        assert answer["result"]["protocolVersion"] == "2024-11-05"
        assert "tools" in answer["result"]["capabilities"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(endpoint, json=note)).status_code == 202
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "echo", "arguments": {"text": "hi"}}
        assert (await http.post(endpoint, json=call)).status_code == 202
        answer = await next_message(lines)
        assert answer["id"] == 2
        assert answer["result"]["content"][0]["text"] == "hi"
        unknown = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
        unknown["params"] = {"name": "no_such_tool", "arguments": {}}
        assert (await http.post(endpoint, json=unknown)).status_code == 202
        answer = await next_message(lines)
        assert answer["id"] == 3
        assert "error" in answer or answer["result"]["isError"] is True
        session_id = endpoint.rpartition("=")[2]
    await wait_until(lambda: any(r.get("method") == "tools/call" for r in records(records_dir)))
    mine = [r for r in records(records_dir) if r.get("session_id") == session_id]
    await wait_until(
        lambda: len([r for r in records(records_dir) if r.get("session_id") == session_id]) >= 6
    )
    mine = [r for r in records(records_dir) if r.get("session_id") == session_id]
    assert all(r["transport"] == "sse" for r in mine), mine
    [call_record] = [r for r in mine if r.get("method") == "tools/call" and r["jsonrpc_id"] == 2]
    assert call_record["status"] == 202
    assert call_record["outcome"] == "ok"
    assert call_record["target"] == "echo"
    [opened] = [r for r in mine if r["kind"] == "request" and r["verb"] == "GET"]
    assert opened["path"] == "/sse"
    [initialize] = [r for r in mine if r.get("method") == "initialize"]
    assert initialize["client"]["name"] == "raw-sse"
    assert initialize["advertised"]
    [stream] = [r for r in mine if r["kind"] == "stream"]
    assert stream["end"] == "client_closed"
    assert stream["events"] >= 3


@pytest.mark.anyio
async def test_keepalive_comments_fill_a_quiet_stream(live: ServerThread) -> None:
    async with (
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
        raw_stream(http, "/sse") as (_, lines),
    ):
        await endpoint_of(lines)
        with anyio.fail_after(3):
            assert await anext(lines) == ": "  # MCP_KEEPALIVE_S=0.2 here


@pytest.mark.anyio
async def test_a_client_falling_back_on_the_mcp_path_gets_the_stream(live: ServerThread) -> None:
    async with (
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
        raw_stream(http, "/mcp") as (got, lines),
    ):
        assert got.status_code == 200
        endpoint = await endpoint_of(lines)
        assert endpoint.startswith("/messages?session_id=")
        assert (await http.post(endpoint, json=INITIALIZE)).status_code == 202
        assert (await next_message(lines))["id"] == 1
        # A GET that does not name the type (curl, a probe) is not a fallback: 400 as before.
        bare = await http.get("/mcp", headers={"accept": "*/*"})
        assert bare.status_code == 400


@pytest.mark.anyio
async def test_refusals(live: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=10) as http:
        missing = await http.post("/messages", json=INITIALIZE)
        assert missing.status_code == 400
        assert "session_id" in missing.json()["error"]["message"]
        unknown = await http.post("/messages?session_id=nope", json=INITIALIZE)
        assert unknown.status_code == 404
        bad = await http.post("/messages?session_id=a%20b", json=INITIALIZE)
        assert bad.status_code == 400
        assert (await http.get("/messages")).status_code == 405
        assert (await http.post("/sse", json=INITIALIZE)).status_code == 405
        only_json = await http.get("/sse", headers={"accept": "application/json"})
        assert only_json.status_code == 406
        rebinding = await http.get("/sse", headers={"host": "evil.example"})
        assert rebinding.status_code in (403, 421)
        async with raw_stream(http, "/sse") as (_, lines):
            endpoint = await endpoint_of(lines)
            not_json = await http.post(
                endpoint, content=b"{", headers={"content-type": "text/plain"}
            )
            assert not_json.status_code == 415
            garbled = await http.post(
                endpoint, content=b"{", headers={"content-type": "application/json"}
            )
            assert garbled.status_code == 400


@pytest.mark.anyio
async def test_at_most_max_pending_requests_run(tmp_path: Path) -> None:
    running = ServerThread(create_app(settings_for(tmp_path, sse_transport_max_pending=1))).start()
    try:
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=10) as http,
            raw_stream(http, "/sse") as (_, lines),
        ):
            endpoint = await endpoint_of(lines)
            await http.post(endpoint, json=INITIALIZE)
            await next_message(lines)
            slow = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            slow["params"] = {"name": "count_slowly", "arguments": {"steps": 2, "delay_ms": 500}}
            assert (await http.post(endpoint, json=slow)).status_code == 202
            second = {**slow, "id": 3}
            refused = await http.post(endpoint, json=second)
            assert refused.status_code == 429
            while (await next_message(lines)).get("id") != 2:
                pass
            assert (await http.post(endpoint, json=second)).status_code == 202
    finally:
        running.stop()


@pytest.mark.anyio
async def test_paths_are_configurable_and_under_the_mount_prefix(tmp_path: Path) -> None:
    settings = settings_for(
        tmp_path, sse_transport_path="/events", sse_transport_messages_path="/post"
    )
    running = ServerThread(create_app(settings), root_path="/api").start()
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as http:
            assert (await http.get("/sse")).status_code == 404
            # uvicorn --root-path: the proxy in front strips /api, the app names it.
            async with raw_stream(http, "/events") as (got, lines):
                assert got.status_code == 200
                endpoint = await endpoint_of(lines)
                assert endpoint.startswith("/api/post?session_id=")
                stripped = endpoint.removeprefix("/api")
                assert (await http.post(stripped, json=INITIALIZE)).status_code == 202
                assert (await next_message(lines))["id"] == 1
    finally:
        running.stop()


@pytest.mark.anyio
async def test_the_off_switch(tmp_path: Path) -> None:
    running = ServerThread(create_app(settings_for(tmp_path, sse_transport=False))).start()
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as http:
            assert (
                await http.get("/sse", headers={"accept": "text/event-stream"})
            ).status_code == 404
            assert (await http.post("/messages?session_id=x", json=INITIALIZE)).status_code == 404
            fallback = await http.get("/mcp", headers={"accept": "text/event-stream"})
            assert fallback.status_code == 400
    finally:
        running.stop()


@pytest.mark.anyio
async def test_auth_is_checked_as_on_the_mcp_path(tmp_path: Path) -> None:
    digest = "sha256:" + hashlib.sha256(b"sesame").hexdigest()
    settings = settings_for(tmp_path, auth="tokens", auth_tokens=[digest])
    running = ServerThread(create_app(settings)).start()
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=10) as http:
            refused = await http.get("/sse", headers={"accept": "text/event-stream"})
            assert refused.status_code == 401
            on_mcp = await http.post("/mcp", json=INITIALIZE)
            assert on_mcp.status_code == 401
            assert refused.headers["www-authenticate"] == on_mcp.headers["www-authenticate"]
            bearer = {"authorization": "Bearer sesame"}
            async with raw_stream(http, "/sse", **bearer) as (got, lines):
                assert got.status_code == 200
                endpoint = await endpoint_of(lines)
                assert (await http.post(endpoint, json=INITIALIZE)).status_code == 401
                posted = await http.post(endpoint, json=INITIALIZE, headers=bearer)
                assert posted.status_code == 202
                assert (await next_message(lines))["id"] == 1
    finally:
        running.stop()


@pytest.mark.anyio
async def test_a_prompt_or_resource_needing_scopes_is_the_step_up_403_here_too(
    tmp_path: Path,
) -> None:
    """An item's scopes are checked for the POST itself, as on the MCP path: a prompt's get
    and a resource's read, not only a tool's call."""
    from server import Catalog

    catalog = Catalog("scoped-sse", "1.0.0")
    catalog.prompt(lambda: "x", name="write_prompt", scopes=["mcp:write"])
    catalog.resource("secret://fixed", scopes=["mcp:write"])(lambda: "secret")
    digest = "sha256:" + hashlib.sha256(b"sesame").hexdigest()
    tokens = [f"{digest};name=bob;scopes=mcp:read"]
    running = ServerThread(
        create_app(settings_for(tmp_path, auth="tokens", auth_tokens=tokens), catalog)
    ).start()
    bearer = {"authorization": "Bearer sesame"}
    try:
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=10) as http,
            initialized(http, bearer) as (endpoint, _),
        ):
            for method, params in (
                ("prompts/get", {"name": "write_prompt"}),
                ("resources/read", {"uri": "secret://fixed"}),
            ):
                message = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
                refused = await http.post(endpoint, json=message, headers=bearer)
                assert refused.status_code == 403, refused.text
                assert refused.headers["www-authenticate"] == (
                    'Bearer error="insufficient_scope", scope="mcp:write"'
                )
    finally:
        running.stop()


@pytest.mark.anyio
async def test_shutdown_sends_the_running_calls_answers_then_closes(tmp_path: Path) -> None:
    running = ServerThread(create_app(settings_for(tmp_path)), graceful_timeout=10).start()
    try:
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=10) as http,
            raw_stream(http, "/sse") as (_, lines),
        ):
            endpoint = await endpoint_of(lines)
            await http.post(endpoint, json=INITIALIZE)
            await next_message(lines)
            slow = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            slow["params"] = {"name": "count_slowly", "arguments": {"steps": 3, "delay_ms": 300}}
            assert (await http.post(endpoint, json=slow)).status_code == 202
            await anyio.sleep(0.1)
            running.server.should_exit = True  # what SIGTERM does
            await wait_until(lambda: running.app.sse is not None and running.app.sse.draining)
            # (New connections are no longer accepted; a POST on an open one would get 503.)
            seen = []
            with anyio.fail_after(5):
                async for line in lines:
                    if line.startswith("data: {"):
                        seen.append(json.loads(line[len("data: ") :]))
            # The stream ended by itself, after the call's answer.
            assert seen[-1]["id"] == 2
            assert seen[-1]["result"]["content"][0]["text"] == "Counted to 3."
    finally:
        running.thread.join(10)


@pytest.mark.anyio
async def test_a_batch_is_answered_message_by_message_on_the_stream(live: ServerThread) -> None:
    async with (
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
        raw_stream(http, "/sse") as (_, lines),
    ):
        endpoint = await endpoint_of(lines)
        await http.post(endpoint, json=INITIALIZE)
        await next_message(lines)
        batch = [
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        ]
        assert (await http.post(endpoint, json=batch)).status_code == 202
        answers = {(await next_message(lines))["id"] for _ in range(2)}
        assert answers == {2, 3}
        too_many = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(100)]
        assert (await http.post(endpoint, json=too_many)).status_code == 400  # MCP_MAX_BATCH


@pytest.mark.anyio
async def test_a_tenants_quota_counts_calls_made_over_http_sse_too(tmp_path: Path) -> None:
    """MCP_QUOTAS holds on the 2024-11-05 transport as on the MCP path: the call past the
    limit is refused on its POST (429, Retry-After), never run; the refusal's record names
    the tool it refused."""
    from server import Catalog

    catalog = Catalog("quota-sse", "1.0.0")
    catalog.tool(name="search")(lambda: "found")
    digest = "sha256:" + hashlib.sha256(b"sesame").hexdigest()
    quota = '[{"tenant": "acme", "tool": "search", "limit": 2, "per": "1m"}]'
    settings = settings_for(
        tmp_path, auth="tokens", auth_tokens=[f"{digest};name=a;tenant=acme"], quotas=quota
    )
    running = ServerThread(create_app(settings, catalog)).start()
    bearer = {"authorization": "Bearer sesame"}
    try:
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=10) as http,
            initialized(http, bearer) as (endpoint, lines),
        ):
            params = {"name": "search", "arguments": {}}
            for number in (2, 3, 4):
                call = {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params}
                posted = await http.post(endpoint, json=call, headers=bearer)
                if number == 4:
                    break
                assert posted.status_code == 202
                assert (await next_message(lines))["id"] == number
            refused = posted
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["retry-after"]) >= 1
    finally:
        running.stop()
    refusal = [r for r in records(tmp_path) if r.get("status") == 429]
    assert [r["target"] for r in refusal] == ["search"]


@pytest.mark.anyio
async def test_a_stream_asked_of_a_draining_server_ends_after_its_endpoint_event(
    tmp_path: Path,
) -> None:
    """A proxy may still send a new GET /sse to a stopping replica over a kept-alive
    connection: it gets its endpoint event and a clean close to reconnect from (a 503 on
    connect made the rolling restart's raw and SDK clients fail)."""
    running = ServerThread(create_app(settings_for(tmp_path))).start()
    sse = running.app.sse
    assert sse is not None
    try:
        sse.draining = True  # what the drain sets (SIGTERM)
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=10) as http,
            raw_stream(http, "/sse") as (response, lines),
        ):
            assert response.status_code == 200
            endpoint = await endpoint_of(lines)
            assert "session_id=" in endpoint
            with anyio.fail_after(5):
                rest = [line async for line in lines if line.startswith("data:")]
            assert rest == []  # ended, with nothing after the endpoint event
    finally:
        sse.draining = False
        running.stop()
    gets = [r for r in records(tmp_path) if r.get("verb") == "GET"]
    assert [r.get("end") for r in gets if "end" in r] == ["shutdown"]
