"""The 2026-07-28 era over HTTP (server.transport.modern), over a real socket: SSE responses,
listen streams, cancellation by disconnect, shutdown.

A real uvicorn serves a small test catalog on 127.0.0.1 (an ephemeral port) in a background
thread, once for the module; the shutdown tests start their own instances. The catalog's
tools run on the server's event loop, so the catalog changes they make are published there
(never from the test thread), and they report what happened to them through thread-safe
events.
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from server import Catalog, Context
from server.app import create_app
from server.catalog.extensions import TASKS_EXTENSION
from server.errors import ServiceUnavailable
from server.settings import Settings
from tests.support.app import serve
from tests.support.core_helpers import add_toggle_tool
from tests.support.live_server import ServerThread
from tests.support.mcp_client import (
    BOTH,
    SSE,
    SUB_ID,
    modern,
    modern_headers,
    sse_messages_blocking,
)
from tests.support.polling import wait_until

# A real uvicorn per stream test: outside the inner loop (pytest -m 'not slow').
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# What the tools saw, across the server thread and the test thread.
hang_started = threading.Event()
hang_cancelled = threading.Event()
hang_finished = threading.Event()


def streaming_catalog() -> Catalog:
    catalog = Catalog("streaming-test", "1.0.0")

    @catalog.tool
    async def count(ctx: Context, steps: int = 3) -> str:
        """Reports progress and logs at every level it can."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await ctx.debug(f"debug {step}")
            await ctx.info(f"info {step}")
            await ctx.warning(f"warning {step}")
            await ctx.error(f"error {step}")
        return f"counted to {steps}"

    @catalog.tool
    async def hang(ctx: Context) -> str:
        """Starts a stream, then waits until cancelled."""
        await ctx.report_progress(1, 2, "started")
        hang_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            hang_cancelled.set()
            raise
        hang_finished.set()
        return "finished"

    add_toggle_tool(catalog)

    @catalog.tool
    async def toggle_prompt() -> str:
        """Adds or removes the prompt `extra_prompt`."""
        if catalog.remove_prompt("extra_prompt"):
            return "removed"

        def extra_prompt() -> str:
            """Here only sometimes."""
            return "extra"

        catalog.prompt(extra_prompt)
        return "added"

    @catalog.tool
    async def touch(uri: str) -> str:
        """Tells subscribers that ``uri`` changed."""
        catalog.notify_resource_updated(uri)
        return f"touched {uri}"

    @catalog.resource("test://docs")
    def docs() -> str:
        """Docs."""
        return "docs"

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"

    return catalog


# -- a uvicorn in a thread ------------------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[ServerThread]:
    running = ServerThread(
        create_app(Settings(_env_file=None, keepalive_s=0.2), streaming_catalog()),
        graceful_timeout=2,
        check_health=True,
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def client(live: ServerThread) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.url, timeout=5) as http:
        yield http


# -- requests and SSE ------------------------------------------------------------------------


def call(name: str, arguments: dict[str, Any] | None = None, id: Any = 1, **meta: Any):
    return modern("tools/call", {"name": name, "arguments": arguments or {}}, id, **meta)


def listen(notifications: dict[str, Any], id: Any = "listen") -> dict[str, Any]:
    return modern("subscriptions/listen", {"notifications": notifications}, id)


@contextlib.asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient, message: dict[str, Any], accept: str = BOTH
) -> AsyncIterator[SSE]:
    body = json.dumps(message).encode()
    async with client.stream(
        "POST", "/mcp", content=body, headers=modern_headers(message, accept)
    ) as response:
        yield SSE(response)


async def post(client: httpx.AsyncClient, message: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(message).encode()
    response = await client.post("/mcp", content=body, headers=modern_headers(message, BOTH))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


# -- request streams: progress and logs --------------------------------------------------------


@pytest.mark.anyio
async def test_progress_and_logs_stream_before_the_result(client: httpx.AsyncClient) -> None:
    message = call("count", {"steps": 3}, id="c1", progressToken="tok")
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = "debug"
    async with open_stream(client, message) as events:
        response = events.response
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        assert "no-store" in response.headers["cache-control"]
        messages = await events.rest()
    *notes, final = messages
    assert final == {
        "jsonrpc": "2.0",
        "id": "c1",
        "result": {
            "content": [{"type": "text", "text": "counted to 3"}],
            "resultType": "complete",
            "_meta": {
                "io.modelcontextprotocol/serverInfo": {"name": "streaming-test", "version": "1.0.0"}
            },
        },
    }
    # Per step: the progress notification, then one log message per level, in order.
    expected = []
    for step in (1, 2, 3):
        expected.append(
            (
                "notifications/progress",
                {"progressToken": "tok", "progress": step, "total": 3, "message": f"step {step}"},
            )
        )
        for level in ("debug", "info", "warning", "error"):
            expected.append(("notifications/message", {"level": level, "data": f"{level} {step}"}))
    assert [(note["method"], note["params"]) for note in notes] == expected
    assert all("id" not in note for note in notes)


@pytest.mark.anyio
async def test_logs_only_at_or_above_the_requested_level(client: httpx.AsyncClient) -> None:
    message = call("count", {"steps": 2}, id=2)
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = "warning"
    async with open_stream(client, message) as events:
        *notes, final = await events.rest()
    assert final["id"] == 2
    assert "result" in final
    # No progress token: no progress; logs at warning and error only.
    assert [(n["method"], n["params"]["level"], n["params"]["data"]) for n in notes] == [
        ("notifications/message", "warning", "warning 1"),
        ("notifications/message", "error", "error 1"),
        ("notifications/message", "warning", "warning 2"),
        ("notifications/message", "error", "error 2"),
    ]


@pytest.mark.anyio
async def test_same_tool_without_token_or_level_answers_json(client: httpx.AsyncClient) -> None:
    body = await post(client, call("count", {"steps": 2}, id=3))
    assert body["id"] == 3
    assert body["result"]["content"] == [{"type": "text", "text": "counted to 2"}]


@pytest.mark.anyio
async def test_client_taking_only_json_gets_json_without_notifications(
    client: httpx.AsyncClient,
) -> None:
    message = call("count", {"steps": 2}, id=4, progressToken=9)
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = "debug"
    async with open_stream(client, message, accept="application/json") as events:
        assert events.response.headers["content-type"] == "application/json"
        body = json.loads(await events.response.aread())
    assert body["id"] == 4
    assert body["result"]["content"][0]["text"] == "counted to 2"


# -- cancellation by disconnect ----------------------------------------------------------------


@pytest.mark.anyio
async def test_disconnect_cancels_the_streaming_handler(client: httpx.AsyncClient) -> None:
    hang_started.clear()
    hang_cancelled.clear()
    hang_finished.clear()
    async with open_stream(client, call("hang", id="h", progressToken="p")) as events:
        first = await events.next()
        assert first is not None
        assert first["method"] == "notifications/progress"
        assert hang_started.is_set()
        assert not hang_cancelled.is_set()
        # An open request stream gets keep-alive comments too (keepalive_s=0.2).
        with anyio.move_on_after(0.7):
            await events.next(limit=1)
        assert events.comments >= 1
        assert events.messages == [first]
    # Leaving the block closes the connection mid-stream: that is the cancellation.
    await wait_until(hang_cancelled.is_set)
    assert not hang_finished.is_set()


@pytest.mark.anyio
async def test_disconnect_removes_the_listen_stream_from_the_hub(
    client: httpx.AsyncClient, live: ServerThread
) -> None:
    await wait_until(lambda: len(live.app.hub) == 0)
    async with open_stream(
        client, listen({"toolsListChanged": True}), "text/event-stream"
    ) as events:
        ack = await events.next()
        assert ack is not None
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert len(live.app.hub) == 1
    await wait_until(lambda: len(live.app.hub) == 0)


def server_tasks(live: ServerThread) -> int:
    """How many tasks the server's loop runs (the one counting them included)."""

    async def count() -> int:
        return len(asyncio.all_tasks())

    loop = live.server.servers[0].get_loop()
    return asyncio.run_coroutine_threadsafe(count(), loop).result(5)


@pytest.mark.anyio
async def test_an_idle_listen_stream_is_its_request_task_alone(
    client: httpx.AsyncClient, live: ServerThread
) -> None:
    """No watcher, keep-alive or queue task beside it: thousands of idle streams are held
    open, and a task costs about 600 bytes (tests/bench/streams_bench.py)."""
    await wait_until(lambda: len(live.app.hub) == 0)
    idle = server_tasks(live)
    async with open_stream(
        client, listen({"toolsListChanged": True}), "text/event-stream"
    ) as events:
        await events.next()
        # Past the disconnect watch's start and a keep-alive (keepalive_s=0.2) or two.
        await anyio.sleep(0.5)
        assert server_tasks(live) == idle + 1
    await wait_until(lambda: len(live.app.hub) == 0)
    await wait_until(lambda: server_tasks(live) == idle)


# -- subscriptions/listen -----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("listen_id", ["listen-1", 7, 0])
async def test_ack_is_the_first_frame_and_carries_the_listen_id(
    client: httpx.AsyncClient, listen_id: Any
) -> None:
    filter_ = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourceSubscriptions": ["test://docs"],
    }
    async with open_stream(client, listen(filter_, listen_id), "text/event-stream") as events:
        response = events.response
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        ack = await events.next()
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUB_ID: listen_id},
            "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["test://docs"]},
        },
    }
    assert type(ack["params"]["_meta"][SUB_ID]) is type(listen_id)


@pytest.mark.anyio
async def test_streams_get_only_the_types_they_asked_for(client: httpx.AsyncClient) -> None:
    async with (
        open_stream(
            client, listen({"promptsListChanged": True}, "p"), "text/event-stream"
        ) as prompts,
        open_stream(client, listen({"toolsListChanged": True}, 5), "text/event-stream") as tools,
    ):
        assert (await prompts.message())["method"] == "notifications/subscriptions/acknowledged"
        assert (await tools.message())["method"] == "notifications/subscriptions/acknowledged"
        # Request-scoped notifications never go to listen streams.
        stream_call = call("count", {"steps": 1}, id=1, progressToken="x")
        async with open_stream(client, stream_call) as counted:
            assert len(await counted.rest()) == 2
        assert (await post(client, call("touch", {"uri": "test://docs"})))["result"]
        assert (await post(client, call("toggle_tool")))["result"]
        assert (await post(client, call("toggle_prompt")))["result"]
        # Frames are ordered, so the first frame after the ack shows what came through.
        assert await prompts.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
            "params": {"_meta": {SUB_ID: "p"}},
        }
        assert await tools.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUB_ID: 5}},
        }
        # Restore the catalog; each stream sees exactly its own kind again.
        await post(client, call("toggle_prompt"))
        await post(client, call("toggle_tool"))
        assert (await prompts.message())["method"] == "notifications/prompts/list_changed"
        assert (await tools.message())["method"] == "notifications/tools/list_changed"


@pytest.mark.anyio
async def test_tool_list_change_arrives_within_a_second(client: httpx.AsyncClient) -> None:
    async with open_stream(
        client, listen({"toolsListChanged": True}), "text/event-stream"
    ) as events:
        await events.next()
        listed = await post(client, modern("tools/list"))
        before = {tool["name"] for tool in listed["result"]["tools"]}
        started = time.monotonic()
        toggled = await post(client, call("toggle_tool"))
        note = await events.next(limit=1)
        assert time.monotonic() - started < 1
        assert note is not None
        assert note["method"] == "notifications/tools/list_changed"
        assert note["params"] == {"_meta": {SUB_ID: "listen"}}
        after = {
            tool["name"] for tool in (await post(client, modern("tools/list")))["result"]["tools"]
        }
        assert before ^ after == {"extra"}
        assert toggled["result"]["content"][0]["text"] in ("added", "removed")
        await post(client, call("toggle_tool"))
        assert (await events.message(limit=1))["method"] == "notifications/tools/list_changed"


@pytest.mark.anyio
async def test_resource_updates_only_for_subscribed_uris_and_below(
    client: httpx.AsyncClient,
) -> None:
    filter_ = {"resourceSubscriptions": ["test://docs", "test://dir/"]}
    async with open_stream(client, listen(filter_, 1), "text/event-stream") as events:
        await events.next()
        for uri in (
            "test://other",
            "test://docsextra",
            "test://docs/page/1",
            "test://dir",
            "test://dir/a",
            "test://docs",
        ):
            await post(client, call("touch", {"uri": uri}))
        await post(client, call("toggle_tool"))  # a list change nobody here asked for
        await post(client, call("toggle_tool"))
        updates = [await events.next(limit=1) for _ in range(3)]
        assert updates == [
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"_meta": {SUB_ID: 1}, "uri": uri},
            }
            for uri in ("test://docs/page/1", "test://dir/a", "test://docs")
        ]
        # Nothing else is waiting: the next thing on the wire is only a keep-alive.
        with anyio.move_on_after(0.5) as idle:
            await events.next(limit=1)
        assert idle.cancelled_caught


@pytest.mark.anyio
async def test_idle_listen_stream_gets_keepalive_comments(client: httpx.AsyncClient) -> None:
    async with open_stream(
        client, listen({"toolsListChanged": True}), "text/event-stream"
    ) as events:
        await events.next()
        with anyio.move_on_after(0.7):
            await events.next(limit=1)
        assert events.comments >= 2
        assert events.messages[1:] == []


# -- shutdown -----------------------------------------------------------------------------------


@pytest.fixture
def fresh_server() -> Iterator[ServerThread]:
    running = ServerThread(
        create_app(Settings(_env_file=None, shutdown_grace_s=1), streaming_catalog()),
        graceful_timeout=3,
        check_health=True,
    )
    running.start()
    try:
        yield running
    finally:
        if running.thread.is_alive():
            running.stop()


async def _listen_through_shutdown(running: ServerThread, trigger: Any) -> list[dict[str, Any]]:
    message = listen({"toolsListChanged": True}, "bye")
    async with (
        httpx.AsyncClient(base_url=running.url, timeout=5) as http,
        open_stream(http, message, "text/event-stream") as events,
    ):
        ack = await events.next()
        assert ack is not None
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        trigger()
        with contextlib.suppress(httpx.RemoteProtocolError):  # cut off without a closing frame
            await events.rest(limit=3)
        return events.messages


CLOSING = {
    "jsonrpc": "2.0",
    "id": "bye",
    "result": {
        "resultType": "complete",
        "_meta": {
            SUB_ID: "bye",
            "io.modelcontextprotocol/serverInfo": {"name": "streaming-test", "version": "1.0.0"},
        },
    },
}


@pytest.mark.anyio
async def test_shutdown_sends_the_closing_result_before_the_stream_ends(
    fresh_server: ServerThread,
) -> None:
    def exit_() -> None:
        fresh_server.server.should_exit = True

    started = time.monotonic()
    messages = await _listen_through_shutdown(fresh_server, exit_)
    assert messages[-1] == CLOSING
    assert len(messages) == 2
    fresh_server.thread.join(5)
    assert not fresh_server.thread.is_alive()
    # Ended by the app, not by uvicorn's graceful timeout cancelling the stream.
    assert time.monotonic() - started < 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_sigterm_to_python_m_server_closes_listen_streams_gracefully(tmp_path: Path) -> None:
    """The real process: SIGTERM gives an open listen stream its closing result, then exit."""
    port = _free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env = {
        **env,
        "MCP_PORT": str(port),
        "MCP_CATALOG": "probe",
        "MCP_LOG_LEVEL": "warning",
        "MCP_SHUTDOWN_GRACE_S": "1",
        "PYTHONPATH": str(ROOT),
    }
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "server"], cwd=tmp_path, env=env, stdout=log, stderr=log
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        message = listen({"toolsListChanged": True}, 42)
        with httpx.stream(
            "POST", f"{url}/mcp", content=json.dumps(message), headers=modern_headers(message, BOTH)
        ) as response:
            data = sse_messages_blocking(response)
            ack = next(data)
            assert ack["params"]["_meta"] == {SUB_ID: 42}
            process.send_signal(signal.SIGTERM)
            rest = list(data)
        assert len(rest) == 1
        assert rest[0]["id"] == 42
        assert rest[0]["result"]["resultType"] == "complete"
        assert rest[0]["result"]["_meta"][SUB_ID] == 42
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        log.close()


@pytest.mark.anyio
async def test_a_task_refused_by_a_stopping_server_says_when_to_retry() -> None:
    # The chaos run's SIGTERM drain: a task call on a kept-alive connection reached the
    # stopping replica and got a bare 503, which told the client nothing (a 503 raised
    # inside a call went out without the Retry-After a refusal before it carries).
    catalog = Catalog("drain-tasks", "1.0.0")

    @catalog.tool(task_support="optional")
    async def work(seconds: float = 0.1) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @catalog.tool
    async def busy(wait: float = 0.0) -> str:
        await asyncio.sleep(wait)  # past the disconnect watch's delay: a response writer waits
        raise ServiceUnavailable("Shared state is unavailable", retry_after=1.0)

    tasks: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
    async with serve(catalog) as (client, app):
        call = modern("tools/call", {"name": "work", "arguments": {}}, 1, capabilities=tasks)
        accepted = await client.post("/mcp", json=call, headers=modern_headers(call))
        assert accepted.json()["result"]["resultType"] == "task"
        app.tasks.closing = True  # what the drain sets first
        refused = await client.post("/mcp", json=call, headers=modern_headers(call))
        # The chaos run's Redis stall: a call that waited on Redis past the disconnect watch's
        # delay answered its 503 through the response writer, without the header either.
        for wait in (0.0, 0.1):
            asking = modern("tools/call", {"name": "busy", "arguments": {"wait": wait}}, 2)
            unavailable = await client.post("/mcp", json=asking, headers=modern_headers(asking))
            assert unavailable.status_code == 503
            assert unavailable.headers["retry-after"] == "1"
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == -32000
    assert "shutting down" in refused.json()["error"]["message"]
