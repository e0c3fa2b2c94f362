"""Request records through the whole app: one per request, rejected ones included, and streams.

Most tests drive the ASGI app in process (``httpx.ASGITransport``) with its lifespan entered, so
the Recorder's writer thread runs and its file sink writes to ``tmp_path``; leaving the lifespan
closes the Recorder, which writes everything still queued, and the file is read after that. The
listen-stream endings (client closed, graceful shutdown) need a real connection and a real
shutdown, so those tests run uvicorn in a thread.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import ValidationError

from server import Catalog, Context, ToolError
from server.app import create_app
from server.settings import Settings
from tests.support import mcp_client as mcp
from tests.support.app import Served, serve
from tests.support.live_server import ServerThread
from tests.support.polling import wait_until

# Real uvicorn servers writing real record files: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BASE_URL = "http://127.0.0.1:8000"
MODERN = "2026-07-28"
CLIENT_INFO = {"name": "record-test-client", "version": "3.1.4"}
CAPABILITIES = {"roots": {"listChanged": True}, "elicitation": {}}
META = mcp.modern_meta(CAPABILITIES, CLIENT_INFO)
BEARER = "Bearer sk-live-BEARER-SECRET-0123456789"
COOKIE = "session=COOKIE-SECRET-9876543210"
SECRETS = ("BEARER-SECRET", "COOKIE-SECRET", "hunter2", "KEY-SECRET-42")
JSON_AND_SSE = mcp.BOTH


def records_catalog() -> Catalog:
    catalog = Catalog("records-test", "0.0.1")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def login(user: str, password: str, api_key: str) -> str:
        """Takes secrets as arguments, the way real tools sometimes do."""
        return f"welcome {user}"

    @catalog.tool
    async def count(ctx: Context, steps: int = 3, pause: float = 0.0) -> str:
        """Reports progress at every step."""
        for step in range(1, steps + 1):
            await asyncio.sleep(pause)
            await ctx.report_progress(step, steps, f"step {step}")
        return f"counted to {steps}"

    @catalog.tool
    async def poll(ctx: Context) -> str:
        """Ends its connection after the first progress; the client resumes for the result."""
        await ctx.report_progress(1, 2, "half")
        ctx.close_stream()
        await asyncio.sleep(0.05)
        return "polled"

    @catalog.tool
    async def refuse() -> str:
        """Fails the way a tool should: a result with isError."""
        raise ToolError("refused on purpose")

    @catalog.resource("test://doc")
    def doc() -> str:
        """A document."""
        return "doc"

    return catalog


# -- the app, in process ------------------------------------------------------------------------


def settings_for(path: Path, **overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "_env_file": None,
        "records": ["file"],
        "records_file": str(path),
        "keepalive_s": 15.0,
    }
    options.update(overrides)
    return Settings(**options)


def serve_recording(path: Path, **overrides: Any) -> Served:
    """The app with its lifespan running, writing its records to ``path``, called by a client
    that carries secrets the records must not keep; on exit the Recorder has written everything."""
    options = {"records": ["file"], "records_file": str(path), "keepalive_s": 15.0, **overrides}
    headers = {"Authorization": BEARER, "Cookie": COOKIE}
    return serve(records_catalog(), headers=headers, **options)


def read_records(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} reached the records file"
    return [json.loads(line) for line in text.splitlines()]


def requests_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [record for record in records if record["kind"] == "request"]


def by_agent(records: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    return [record for record in records if record["user_agent"] == agent]


def modern(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return mcp.modern(method, params, id, capabilities=CAPABILITIES, client_info=CLIENT_INFO)


def modern_headers(message: dict[str, Any], agent: str, **extra: str) -> dict[str, str]:
    return mcp.modern_headers(message, User_Agent=agent, **extra)


async def post_modern(
    client: httpx.AsyncClient, message: dict[str, Any], agent: str, **extra: str
) -> httpx.Response:
    return await client.post(
        "/mcp", content=json.dumps(message), headers=modern_headers(message, agent, **extra)
    )


def check_request_record(record: dict[str, Any]) -> None:
    """What every request record holds, whatever happened to the request."""
    assert record["v"] == 1
    assert record["kind"] == "request"
    assert record["path"] in ("/mcp", "/mcp/")
    assert record["client_address"] == "127.0.0.1"
    assert record["subject"] is None
    assert record["duration_ms"] >= 0
    assert len(record["request_id"]) == 16


# -- rejected requests --------------------------------------------------------------------------


async def test_every_rejected_request_leaves_exactly_one_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    plain = {"Content-Type": "application/json", "Accept": JSON_AND_SSE}
    legacy_list = mcp.legacy("tools/list", id=7)
    no_session = mcp.legacy_headers()
    no_meta = {"jsonrpc": "2.0", "id": "nm", "method": "tools/list", "params": {}}
    unknown = modern("nope/nothing", id=404)
    huge = modern("tools/call", {"name": "echo", "arguments": {"text": "x" * 2000}}, id=9)
    # (agent, verb, headers, body, status, JSON-RPC code, era, method, jsonrpc id)
    cases: list[tuple[str, str, dict[str, str], bytes, int, int, Any, Any, Any]] = [
        (
            "bad-host",
            "POST",
            {**modern_headers(unknown, "x"), "Host": "evil.example"},
            json.dumps(modern("tools/list")).encode(),
            403,
            -32600,
            None,
            None,
            None,
        ),
        ("put", "PUT", plain, b"{}", 405, -32600, None, None, None),
        (
            "not-acceptable",
            "POST",
            {**plain, "Accept": "text/html"},
            json.dumps(modern("tools/list")).encode(),
            406,
            -32600,
            None,
            None,
            None,
        ),
        (
            "too-large",
            "POST",
            modern_headers(huge, "x"),
            json.dumps(huge).encode(),
            413,
            -32600,
            None,
            None,
            None,
        ),
        (
            "media-type",
            "POST",
            {**plain, "Content-Type": "text/plain"},
            json.dumps(modern("tools/list")).encode(),
            415,
            -32600,
            None,
            None,
            None,
        ),
        ("bad-json", "POST", plain, b'{"jsonrpc": "2.0", "id": 1,', 400, -32700, None, None, None),
        (
            "missing-meta",
            "POST",
            {**plain, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
            json.dumps(no_meta).encode(),
            400,
            -32602,
            "modern",
            "tools/list",
            "nm",
        ),
        (
            "unknown-method",
            "POST",
            modern_headers(unknown, "x"),
            json.dumps(unknown).encode(),
            404,
            -32601,
            "modern",
            "nope/nothing",
            404,
        ),
        (
            "no-session",
            "POST",
            no_session,
            json.dumps(legacy_list).encode(),
            400,
            -32600,
            "legacy",
            "tools/list",
            7,
        ),
        (
            "unknown-session",
            "POST",
            mcp.legacy_headers("no-such-session"),
            json.dumps(legacy_list).encode(),
            404,
            -32600,
            "legacy",
            "tools/list",
            7,
        ),
        (
            # (an explicit text/event-stream would open the HTTP+SSE transport's stream)
            "get-no-session",
            "GET",
            {"Accept": "*/*"},
            b"",
            400,
            -32600,
            "legacy",
            None,
            None,
        ),
    ]
    async with serve_recording(path, max_body_bytes=1024) as (client, _):
        for agent, verb, headers, body, status, *_ in cases:
            response = await client.request(
                verb, "/mcp", content=body or None, headers={**headers, "User-Agent": agent}
            )
            assert response.status_code == status, (agent, response.text)
    records = read_records(path)
    assert len(records) == len(cases)
    assert all(record["kind"] == "request" for record in records)
    for agent, verb, _, body, status, code, era, method, jsonrpc_id in cases:
        (record,) = by_agent(records, agent)
        check_request_record(record)
        assert record["verb"] == verb
        assert record["status"] == status, agent
        assert record["error"]["code"] == code, agent
        assert record["error"]["message"]
        assert record["era"] == era, agent
        assert record["method"] == method, agent
        assert record["jsonrpc_id"] == jsonrpc_id, agent
        assert record["streaming"] is False
        assert record["bytes_out"] > 0  # the JSON-RPC error body
        # A body that was read is counted; one refused before reading is not.
        assert record["bytes_in"] in (0, len(body))
    assert by_agent(records, "bad-json")[0]["bytes_in"] == len(cases[5][3])
    assert by_agent(records, "bad-host")[0]["bytes_in"] == 0


async def test_a_second_get_stream_is_409_and_recorded_once(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, app):
        session = await open_session(client, "2025-11-25", "init")
        get_headers = mcp.legacy_headers(session, accept="text/event-stream", Content_Type=None)
        first = asyncio.create_task(
            client.get("/mcp", headers={**get_headers, "User-Agent": "get-1"})
        )

        def following() -> bool:
            runtime = app.runtimes.peek(session)
            return runtime is not None and runtime.standalone_followers == 1

        await wait_until(following)
        second = await client.get("/mcp", headers={**get_headers, "User-Agent": "get-2"})
        assert second.status_code == 409
        deleted = await client.delete(
            "/mcp", headers={**get_headers, "Accept": "application/json", "User-Agent": "delete"}
        )
        assert deleted.status_code == 200
        assert (await first).status_code == 200
    records = read_records(path)
    (conflict,) = by_agent(records, "get-2")
    assert conflict["status"] == 409
    assert conflict["error"]["code"] == -32600
    assert conflict["era"] == "legacy"
    assert conflict["verb"] == "GET"
    assert conflict["session_id"] == session
    assert conflict["client"] == {
        "name": CLIENT_INFO["name"],
        "version": CLIENT_INFO["version"],
        "capabilities": CAPABILITIES,
    }
    # The stream that was open: its request record, then its stream record.
    request, stream = by_agent(records, "get-1")
    assert (request["kind"], request["streaming"], request["status"]) == ("request", True, 200)
    assert stream["kind"] == "stream"
    assert stream["request_id"] == request["request_id"]
    assert stream["events"] == 0  # a priming event only
    assert stream["end"] == "session_ended"  # the DELETE ended it
    (delete,) = by_agent(records, "delete")
    assert (delete["verb"], delete["status"], delete["error"]) == ("DELETE", 200, None)


# -- successful requests: modern ----------------------------------------------------------------


async def test_a_modern_call_is_recorded_with_everything_it_said(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    arguments = {"user": "ann", "password": "hunter2", "api_key": "KEY-SECRET-42"}
    message = modern("tools/call", {"name": "login", "arguments": arguments}, id="call-1")
    body = json.dumps(message).encode()
    async with serve_recording(path) as (client, _):
        response = await client.post(
            "/mcp", content=body, headers=modern_headers(message, "modern-agent/1.0")
        )
        assert response.status_code == 200
        assert response.json()["result"]["content"][0]["text"] == "welcome ann"
    (record,) = read_records(path)
    check_request_record(record)
    assert record["verb"] == "POST"
    assert record["status"] == 200
    assert record["era"] == "modern"
    assert record["protocol_version"] == {"header": MODERN, "body": MODERN}
    assert record["method"] == "tools/call"
    assert record["jsonrpc_id"] == "call-1"
    assert record["notification"] is False
    assert record["client"] == {**CLIENT_INFO, "capabilities": CAPABILITIES}
    assert record["session_id"] is None
    assert record["user_agent"] == "modern-agent/1.0"
    assert record["error"] is None
    assert record["bytes_in"] == len(body)
    assert record["bytes_out"] == len(response.content)
    assert record["streaming"] is False
    assert record["params"]["name"] == "login"
    assert record["params"]["arguments"] == {
        "user": "ann",
        "password": "[redacted]",
        "api_key": "[redacted]",
    }
    # _meta is not kept in params: its version and client have their own fields.
    assert "_meta" not in record["params"]
    assert record["protocol_version"]["body"] == META[mcp.META_VERSION]
    assert "advertised" not in record
    assert "batch_size" not in record


async def test_tool_errors_are_results_and_protocol_errors_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    refused = modern("tools/call", {"name": "refuse", "arguments": {}}, id=1)
    missing = modern("tools/call", {"name": "missing", "arguments": {}}, id=2)
    async with serve_recording(path) as (client, _):
        first = await post_modern(client, refused, "refuse")
        assert first.json()["result"]["isError"] is True
        second = await post_modern(client, missing, "missing")
        assert second.json()["error"]["code"] == -32602
    (tool_error,) = by_agent(read_records(path), "refuse")
    (protocol_error,) = by_agent(read_records(path), "missing")
    assert (tool_error["status"], tool_error["error"]) == (200, None)
    assert protocol_error["status"] == 200
    assert protocol_error["error"]["code"] == -32602
    assert "missing" in protocol_error["error"]["message"]


async def test_cached_pages_are_recorded_like_any_answer(tmp_path: Path) -> None:
    # Lists and discover are answered from the cache without a handler; their records are the
    # same as any other's, and a forged cursor is refused and recorded as such.
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, _):
        listed = await post_modern(client, modern("tools/list", id=1), "list")
        forged = await post_modern(client, modern("tools/list", {"cursor": "x"}, id=2), "forged")
        discovered = await post_modern(client, modern("server/discover", id=3), "discover")
    assert listed.json()["result"]["tools"]
    assert forged.json()["error"]["code"] == -32602
    assert discovered.json()["result"]["supportedVersions"]
    records = read_records(path)
    (listing,) = by_agent(records, "list")
    (refusal,) = by_agent(records, "forged")
    (discovery,) = by_agent(records, "discover")
    for record, answer in ((listing, listed), (refusal, forged), (discovery, discovered)):
        check_request_record(record)
        assert record["status"] == 200
        assert record["era"] == "modern"
        assert record["bytes_out"] == len(answer.content)
        assert record["bytes_in"] > 0
    assert (listing["error"], discovery["error"]) == (None, None)
    assert refusal["error"]["code"] == -32602
    assert refusal["params"] == {"cursor": "x"}


async def test_discover_records_what_was_advertised(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, app):
        response = await post_modern(client, modern("server/discover", id=1), "discover")
        assert response.status_code == 200
        listed = await post_modern(client, modern("tools/list", id=2), "list")
        assert listed.status_code == 200
        expected = app.modern.advertised()
    discover, listing = read_records(path)
    assert discover["method"] == "server/discover"
    assert discover["advertised"] == expected
    assert {"server/discover", "tools/list", "tools/call", "resources/read"} <= set(expected)
    assert "prompts/list" not in expected  # the catalog has no prompts
    assert "advertised" not in listing


async def test_records_params_can_be_turned_off_and_capped(tmp_path: Path) -> None:
    message = modern("tools/call", {"name": "echo", "arguments": {"text": "y" * 500}})
    dropped, capped = tmp_path / "dropped.jsonl", tmp_path / "capped.jsonl"
    async with serve_recording(dropped, records_params=False) as (client, _):
        assert (await post_modern(client, message, "a")).status_code == 200
    async with serve_recording(capped, records_params_max_bytes=100) as (client, _):
        assert (await post_modern(client, message, "a")).status_code == 200
    assert read_records(dropped)[0]["params"] is None
    truncated = read_records(capped)[0]["params"]
    kept = {key: value for key, value in message["params"].items() if key != "_meta"}
    compact = json.dumps(kept, separators=(",", ":"))
    assert truncated == {"_truncated": True, "bytes": len(compact)}


async def test_a_modern_notification_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    note = {"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"_meta": META}}
    async with serve_recording(path) as (client, _):
        headers = modern_headers(note, "note")
        response = await client.post("/mcp", content=json.dumps(note), headers=headers)
        assert response.status_code == 202
    (record,) = read_records(path)
    assert record["era"] == "modern"
    assert record["notification"] is True
    assert record["jsonrpc_id"] is None
    assert record["status"] == 202
    assert record["bytes_out"] == 0


async def test_a_streaming_call_gives_a_request_and_a_stream_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    message = modern(
        "tools/call",
        {"name": "count", "arguments": {"steps": 4, "pause": 0.03}, "_meta": {"progressToken": 5}},
        id="s",
    )
    async with serve_recording(path, keepalive_s=0.01) as (client, _):
        response = await post_modern(client, message, "streamer")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
    messages = mcp.messages_of(response.text)
    assert len(messages) == 5  # four progress notifications and the result
    assert messages[-1]["id"] == "s"
    assert response.text.count(": \r\n") >= 1  # keep-alive comments were sent, too
    request, stream = read_records(path)
    check_request_record(request)
    assert request["streaming"] is True
    assert request["status"] == 200
    assert request["method"] == "tools/call"
    # Written when the stream opened: only its first frame had been sent.
    assert 0 < request["bytes_out"] < len(response.content)
    assert stream["kind"] == "stream"
    assert stream["request_id"] == request["request_id"]
    assert stream["events"] == len(messages)
    assert stream["bytes_out"] == len(response.content)
    assert stream["end"] == "complete"
    assert stream["era"] == "modern"
    assert stream["method"] == "tools/call"
    assert stream["client"] == CLIENT_INFO
    assert stream["user_agent"] == "streamer"
    assert stream["opened"] == request["time"]
    assert stream["open_ms"] >= 90  # four pauses of 30 ms


async def test_forwarded_address_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    trusted, untrusted = tmp_path / "trusted.jsonl", tmp_path / "untrusted.jsonl"
    forwarded = {"X-Forwarded-For": "198.51.100.1, 203.0.113.7"}
    message = modern("tools/list")
    async with serve_recording(trusted, trusted_proxies=["127.0.0.0/8"]) as (client, _):
        assert (await post_modern(client, message, "a", **forwarded)).status_code == 200
    async with serve_recording(untrusted) as (client, _):
        assert (await post_modern(client, message, "a", **forwarded)).status_code == 200
    assert read_records(trusted)[0]["client_address"] == "203.0.113.7"
    assert read_records(untrusted)[0]["client_address"] == "127.0.0.1"


# -- successful requests: legacy ----------------------------------------------------------------


async def open_session(client: httpx.AsyncClient, version: str, agent: str) -> str:
    """``initialize`` with this file's client info and capabilities, from ``agent``."""
    response = await client.post(
        "/mcp",
        content=json.dumps(mcp.initialize(version, CAPABILITIES, CLIENT_INFO)),
        headers=mcp.legacy_headers(version=None, User_Agent=agent),
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


async def legacy_session_traffic(
    client: httpx.AsyncClient, version: str
) -> tuple[str, httpx.Response]:
    """initialize, initialized, a call with secrets, a streaming call, a failing call."""
    session = await open_session(client, version, "legacy-agent")
    headers = mcp.legacy_headers(
        session, version, MCP_Protocol_Version=version, User_Agent="legacy-agent"
    )

    async def send(message: dict[str, Any]) -> httpx.Response:
        return await client.post("/mcp", content=json.dumps(message), headers=headers)

    initialized = await send(mcp.notification("notifications/initialized"))
    assert initialized.status_code == 202
    arguments = {"user": "bo", "password": "hunter2", "api_key": "KEY-SECRET-42"}
    answered = await send(mcp.tool_call("login", arguments, id=1))
    assert answered.json()["result"]["content"][0]["text"] == "welcome bo"
    streamed = await send(mcp.tool_call("count", {"steps": 2}, token=1, id="p"))
    assert streamed.headers["content-type"].startswith("text/event-stream")
    failed = await send(mcp.tool_call("missing", id=3))
    assert failed.status_code == 200
    assert failed.json()["error"]["code"] == -32602
    return session, streamed


async def test_a_legacy_session_carries_its_client_on_every_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    version = "2025-11-25"
    async with serve_recording(path) as (client, app):
        session, streamed = await legacy_session_traffic(client, version)
        advertised = app.legacy.era.advertised(version)
    records = read_records(path)
    assert {record["session_id"] for record in records} == {session}
    for record in records:
        expected: dict[str, Any] = {"name": CLIENT_INFO["name"], "version": CLIENT_INFO["version"]}
        if record["kind"] == "request":
            check_request_record(record)
            expected["capabilities"] = CAPABILITIES
        assert record["client"] == expected
        assert record["era"] == "legacy"
        assert record["user_agent"] == "legacy-agent"
    init, note, call, stream_request, stream, error = records
    assert init["method"] == "initialize"
    assert init["protocol_version"] == {"header": None, "body": version}
    assert init["advertised"] == advertised
    assert {"initialize", "ping", "tools/call"} <= set(init["advertised"])
    assert init["params"]["clientInfo"] == CLIENT_INFO
    assert note["notification"] is True
    assert note["jsonrpc_id"] is None
    assert note["status"] == 202
    assert call["method"] == "tools/call"
    assert call["jsonrpc_id"] == 1
    assert call["notification"] is False
    assert call["protocol_version"] == {"header": version, "body": version}
    assert call["params"]["arguments"] == {
        "user": "bo",
        "password": "[redacted]",
        "api_key": "[redacted]",
    }
    assert call["error"] is None
    assert "advertised" not in call
    assert stream_request["streaming"] is True
    assert stream["kind"] == "stream"
    assert stream["request_id"] == stream_request["request_id"]
    # Two progress notifications and the result; the priming event is not a message.
    assert streamed.text.count("data: \r\n") == 1
    assert stream["events"] == len(mcp.messages_of(streamed.text)) == 3
    assert stream["end"] == "complete"
    assert error["error"]["code"] == -32602
    assert error["status"] == 200


async def test_initialize_with_meta_still_records_the_client(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    message = mcp.initialize("2025-06-18", CAPABILITIES, CLIENT_INFO)
    message["params"]["_meta"] = {"progressToken": "init"}
    async with serve_recording(path) as (client, _):
        response = await client.post(
            "/mcp", content=json.dumps(message), headers=mcp.legacy_headers(version=None)
        )
        assert response.status_code == 200
        assert response.json()["result"]["protocolVersion"] == "2025-06-18"
    (record,) = read_records(path)
    assert record["method"] == "initialize"
    assert record["protocol_version"] == {"header": None, "body": "2025-06-18"}
    assert record["client"] == {**CLIENT_INFO, "capabilities": CAPABILITIES}


async def test_sse_polling_ends_server_closed_and_the_resume_completes(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    version = "2025-11-25"
    async with serve_recording(path) as (client, _):
        session = await open_session(client, version, "poller")
        headers = mcp.legacy_headers(session, version, Content_Type=None, User_Agent="poller")
        first = await client.post(
            "/mcp",
            content=json.dumps(mcp.tool_call("poll", {}, token="t", id=5)),
            headers={**headers, "Content-Type": "application/json"},
        )
        assert first.headers["content-type"].startswith("text/event-stream")
        assert [m["method"] for m in mcp.messages_of(first.text)] == ["notifications/progress"]
        last_id = [frame.id for frame in mcp.frames_of(first.text) if frame.id][-1]
        resumed = await client.get(
            "/mcp", headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": last_id}
        )
        assert [m.get("id") for m in mcp.messages_of(resumed.text)] == [5]
    _, call, call_stream, resume, resume_stream = read_records(path)
    assert (call["method"], call["streaming"]) == ("tools/call", True)
    assert call_stream["request_id"] == call["request_id"]
    assert call_stream["end"] == "server_closed"
    assert call_stream["events"] == 1
    assert (resume["verb"], resume["streaming"], resume["session_id"]) == ("GET", True, session)
    assert resume_stream["request_id"] == resume["request_id"]
    assert resume_stream["end"] == "complete"
    assert resume_stream["events"] == 1


async def test_a_legacy_session_keeps_the_negotiated_version(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, _):
        # Asks for a version the server does not speak: gets the newest it does.
        session = await open_session(client, "2099-01-01", "old")
        # No MCP-Protocol-Version header: the session's negotiated version is the one recorded.
        headers = mcp.legacy_headers(session, None, "application/json", User_Agent="old")
        response = await client.post(
            "/mcp",
            content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            headers=headers,
        )
        assert response.status_code == 200
    init, listing = read_records(path)
    assert init["protocol_version"] == {"header": None, "body": "2099-01-01"}
    assert listing["protocol_version"] == {"header": None, "body": "2025-11-25"}


async def test_a_batch_is_recorded_as_one_request(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, _):
        session = await open_session(client, "2025-03-26", "batcher")
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
        response = await client.post(
            "/mcp",
            content=json.dumps(batch),
            headers=mcp.legacy_headers(
                session, "2025-03-26", MCP_Protocol_Version="2025-03-26", User_Agent="batcher"
            ),
        )
        assert response.status_code == 200
        assert len(response.json()) == 2
    _, record = read_records(path)
    assert record["method"] == "(batch)"
    assert record["batch_size"] == 3
    assert record["era"] == "legacy"
    assert record["session_id"] == session
    assert record["params"] is None
    assert record["jsonrpc_id"] is None


# -- the Authorization header -------------------------------------------------------------------


async def test_authorization_and_cookies_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve_recording(path) as (client, _):
        await post_modern(client, modern("tools/list"), "a")
        await client.put("/mcp", headers={"User-Agent": "b"})
        await client.post("/mcp", content=b"nope", headers={"User-Agent": "c"})
    text = path.read_text()
    assert len(text.splitlines()) == 3
    for secret in (BEARER, "sk-live", COOKIE, "COOKIE-SECRET", "Bearer"):
        assert secret not in text


# -- sink health and /readyz --------------------------------------------------------------------


async def test_readyz_reports_a_failing_sink_and_its_recovery(tmp_path: Path) -> None:
    blocker = tmp_path / "records"
    blocker.write_text("a file where the directory should be")
    path = blocker / "mcp-requests.jsonl"
    async with serve_recording(path) as (client, app):
        # The sink is opened at start: an unwritable path shows before any traffic.
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503
        body = not_ready.json()
        assert body["status"] == "not ready"
        assert body["serving"] is True
        assert body["records"]["healthy"] is False
        assert body["records"]["failing"] == ["file"]
        assert str(blocker) in body["records"]["errors"]["file"]  # and why
        # Requests are served although their records cannot be written now; those are kept.
        assert (await post_modern(client, modern("tools/list"), "a")).status_code == 200
        await wait_until(lambda: app.recorder.backlog == 1)
        records = (await client.get("/readyz")).json()["records"]
        assert (records["backlog"], records["failed"], records["written"]) == (1, 0, 0)
        # The operator fixes the path: the sink recovers without waiting for traffic, and
        # writes what it kept.
        blocker.unlink()
        await wait_until(lambda: app.recorder.healthy)
        again = await client.get("/readyz")
        assert again.status_code == 200
        assert again.json()["records"]["failing"] == []
        assert again.json()["records"]["errors"] == {}
        assert (again.json()["records"]["backlog"], again.json()["records"]["written"]) == (0, 1)
        assert (await post_modern(client, modern("tools/list"), "b")).status_code == 200
    assert [record["user_agent"] for record in read_records(path)] == ["a", "b"]


async def test_a_records_file_removed_moved_or_blocked_under_a_running_server(
    tmp_path: Path,
) -> None:
    path = tmp_path / "records" / "mcp-requests.jsonl"
    moved = tmp_path / "records" / "mcp-requests.jsonl.moved"
    gone = tmp_path / "gone"

    def agents(target: Path) -> list[str] | None:
        """None while the file ends inside a line: the writer thread may be writing."""
        data = target.read_bytes() if target.exists() else b""
        if not data:
            return []
        if not data.endswith(b"\n"):
            return None
        return [record["user_agent"] for record in read_records(target)]

    async def post_and_wait(agent: str, target: Path, expected: list[str]) -> None:
        assert (await post_modern(client, modern("tools/list"), agent)).status_code == 200
        await wait_until(lambda: agents(target) == expected)

    async with serve_recording(path) as (client, app):
        await post_and_wait("a", path, ["a"])
        path.unlink()  # deleted: the next records go to a new file
        await post_and_wait("b", path, ["b"])
        path.rename(moved)  # moved away (logrotate without copytruncate)
        await post_and_wait("c", path, ["c"])
        assert agents(moved) == ["b"]
        # The whole folder gone (moved in one step: the writer may create the file anytime).
        path.parent.rename(gone)
        await post_and_wait("d", path, ["d"])
        assert (agents(gone / path.name), agents(gone / moved.name)) == (["c"], ["b"])
        # A directory in the file's place: failing, with the reason, and nothing lost.
        while True:
            path.unlink(missing_ok=True)
            with contextlib.suppress(FileExistsError):  # the writer made the file again
                path.mkdir()
                break
        assert (await post_modern(client, modern("tools/list"), "e")).status_code == 200
        await wait_until(lambda: app.recorder.backlog == 1)
        blocked = await client.get("/readyz")
        assert blocked.status_code == 503
        assert blocked.json()["records"]["failing"] == ["file"]
        assert "Is a directory" in blocked.json()["records"]["errors"]["file"]
        path.rmdir()
        await wait_until(lambda: app.recorder.healthy)
        assert (await client.get("/readyz")).status_code == 200
        assert agents(path) == ["e"]
        await post_and_wait("f", path, ["e", "f"])
        await wait_until(lambda: app.recorder.written == 6)  # counted once the write returned
        assert (app.recorder.failed, app.recorder.dropped) == (0, 0)


def test_the_flush_interval_is_a_setting_within_bounds(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    assert create_app(settings_for(path), records_catalog()).recorder.flush_s == 0.2
    app = create_app(settings_for(path, records_flush_ms=50), records_catalog())
    assert app.recorder.flush_s == 0.05
    for refused in (0, 9, 10_001):
        with pytest.raises(ValidationError):
            settings_for(path, records_flush_ms=refused)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_a_hostile_client_cannot_stop_the_record_writer(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    hostile = modern("tools/list", id="hostile")
    hostile["params"]["_meta"][mcp.META_CAPABILITIES] = nested(300)
    async with serve_recording(path) as (client, app):
        assert (await post_modern(client, hostile, "hostile")).status_code == 200
        assert (await post_modern(client, modern("tools/list"), "after")).status_code == 200
        # Both records reach the file while the server runs (the writer wakes every 200 ms);
        # the writer counts a batch just after writing it, so wait for the count too.
        await wait_until(
            lambda: path.exists() and '"after"' in path.read_text() and app.recorder.written == 2,
            limit=5.0,
        )
        assert app.recorder.healthy
    hostile_record, after = read_records(path)
    assert [hostile_record["user_agent"], after["user_agent"]] == ["hostile", "after"]
    # Capabilities get the privacy rules of params: depth-bounded, so they can be written.
    capabilities = hostile_record["client"]["capabilities"]
    assert capabilities != nested(300)
    assert "[too deep]" in json.dumps(capabilities) or "_truncated" in capabilities
    assert after["client"]["capabilities"] == CAPABILITIES


# -- listen streams over a real socket ----------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[ServerThread, Path]]:
    path = tmp_path / "records.jsonl"
    running = ServerThread(
        create_app(settings_for(path, shutdown_grace_s=1), records_catalog()), graceful_timeout=2
    )
    running.start()
    try:
        yield running, path
    finally:
        if running.thread.is_alive():
            running.stop()


def listen_message(id: Any) -> dict[str, Any]:
    return modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id=id)


@contextlib.asynccontextmanager
async def open_listen(
    url: str, id: Any, agent: str
) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
    message = listen_message(id)
    async with (
        httpx.AsyncClient(base_url=url, timeout=5) as http,
        http.stream(
            "POST",
            "/mcp",
            content=json.dumps(message),
            headers=modern_headers(message, agent, Accept="text/event-stream"),
        ) as response,
    ):
        assert response.status_code == 200
        yield mcp.sse_messages(response)


async def test_a_listen_stream_closed_by_the_client_ends_client_closed(
    live: tuple[ServerThread, Path],
) -> None:
    running, path = live
    async with open_listen(running.url, "L1", "listener") as data:
        with anyio.fail_after(3):
            ack = await anext(data)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
    # The stream record is written once the server has noticed the client leaving.
    await wait_until(lambda: path.exists() and '"kind":"stream"' in path.read_text())
    running.stop()
    request, stream = read_records(path)
    check_request_record(request)
    assert request["method"] == "subscriptions/listen"
    assert request["streaming"] is True
    assert request["status"] == 200
    assert request["jsonrpc_id"] == "L1"
    assert stream["request_id"] == request["request_id"]
    assert stream["end"] == "client_closed"
    assert stream["events"] == 1  # the acknowledgement


async def test_a_request_stream_closed_by_the_client_ends_client_closed(
    live: tuple[ServerThread, Path],
) -> None:
    running, path = live
    message = modern(
        "tools/call",
        {"name": "count", "arguments": {"steps": 50, "pause": 0.1}, "_meta": {"progressToken": 1}},
        id="c",
    )
    async with (
        httpx.AsyncClient(base_url=running.url, timeout=5) as http,
        http.stream(
            "POST", "/mcp", content=json.dumps(message), headers=modern_headers(message, "quitter")
        ) as response,
    ):
        data = mcp.sse_messages(response)
        with anyio.fail_after(3):
            first = await anext(data)
        assert first["method"] == "notifications/progress"
    await wait_until(lambda: path.exists() and '"kind":"stream"' in path.read_text())
    running.stop()
    request, stream = read_records(path)
    assert request["streaming"] is True
    assert request["method"] == "tools/call"
    assert stream["end"] == "client_closed"
    assert 1 <= stream["events"] < 50
    assert stream["open_ms"] < 3000  # the handler was cancelled, not run to its end


async def test_a_graceful_shutdown_ends_a_listen_stream_with_shutdown(
    live: tuple[ServerThread, Path],
) -> None:
    running, path = live
    async with open_listen(running.url, "L2", "listener") as data:
        with anyio.fail_after(3):
            ack = await anext(data)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            running.server.should_exit = True
            closing = await anext(data)
        assert closing["id"] == "L2"
        assert closing["result"]["resultType"] == "complete"
    await anyio.to_thread.run_sync(running.thread.join, 5)
    assert not running.thread.is_alive()
    request, stream = read_records(path)
    assert request["method"] == "subscriptions/listen"
    assert stream["request_id"] == request["request_id"]
    assert stream["end"] == "shutdown"
    assert stream["events"] == 2  # the acknowledgement and the closing result


async def test_a_graceful_shutdown_ends_a_legacy_get_stream_with_shutdown(
    live: tuple[ServerThread, Path],
) -> None:
    running, path = live
    async with httpx.AsyncClient(base_url=running.url, timeout=5) as http:
        session = await open_session(http, "2025-11-25", "legacy")
        headers = mcp.legacy_headers(
            session, accept="text/event-stream", Content_Type=None, User_Agent="legacy"
        )
        async with http.stream("GET", "/mcp", headers=headers) as response:
            assert response.status_code == 200
            events = mcp.SSE(response)
            with anyio.fail_after(3):
                priming = await events.next_frame()
                assert priming is not None
                assert priming.id
                assert not priming.data
                running.server.should_exit = True
                while await events.next_frame() is not None:
                    pass
    await anyio.to_thread.run_sync(running.thread.join, 5)
    records = read_records(path)
    (stream,) = [record for record in records if record["kind"] == "stream"]
    assert stream["verb"] == "GET"
    assert stream["end"] == "shutdown"
