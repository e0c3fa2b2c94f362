"""Legacy calls run inline in their request's task, and become streams only when they must.

A call that sends nothing before its result is answered as JSON from the request's own task;
one that sends something after waiting silently becomes a resumable SSE stream then; a client
that leaves during a silent call neither cancels it nor loses its result; and
``notifications/cancelled`` or the session ending still stop an inline call, with no response.
In-process tests use httpx's ASGITransport (the app runs in the test's task, so "inline" can
be seen); disconnects need a real connection, so those run uvicorn in a thread.
"""

import asyncio
import contextlib
import gc
import json
import threading
from collections.abc import AsyncIterator, Iterator, MutableMapping
from typing import Any

import anyio
import httpx
import pytest

from server import Catalog, Context
from server.app import Application, create_app
from server.legacy.eventstream import EventStream
from server.records.draft import Draft
from server.transport.legacy_answer import Answer
from tests.support import legacy_http
from tests.support.core_helpers import post_scope
from tests.support.legacy_http import RETRY_MS, running, settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import (
    LegacySession,
    legacy_session,
    messages_of,
    notification,
    tool_call,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.anyio

PROBE_ID = "cycle-probe"
PROBE_BYTES = PROBE_ID.encode()


class Seen:
    """What the tools saw, across the server's thread and the test's."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.waiting = threading.Event()
        self.gate = threading.Event()
        self.cancelled = threading.Event()
        self.finished = threading.Event()


seen = Seen()


@pytest.fixture(autouse=True)
def fresh() -> None:
    global seen  # noqa: PLW0603
    seen = Seen()


async def wait_for_gate(mine: Seen) -> None:
    mine.waiting.set()
    try:
        while not mine.gate.is_set():  # noqa: ASYNC110 - a thread's event
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        mine.cancelled.set()
        raise


def inline_catalog() -> Catalog:
    catalog = Catalog("legacy-inline-test", "1.0.0")

    @catalog.tool
    async def where() -> str:
        """Notes the task it runs in, waits a moment, answers."""
        seen.task = asyncio.current_task()
        await asyncio.sleep(0.001)
        return "here"

    @catalog.tool
    async def quiet_then_loud(ctx: Context) -> str:
        """Waits silently (long enough to be watched), reports progress, waits for the
        test's gate, reports again, answers."""
        mine = seen
        await asyncio.sleep(0.05)
        await ctx.report_progress(1, 2, "after a silence")
        await wait_for_gate(mine)
        await ctx.report_progress(2, 2, "through the gate")
        return "loud at last"

    @catalog.tool
    async def quiet(ctx: Context) -> str:
        """Sends nothing: waits for the test's gate, then answers (or is cancelled)."""
        mine = seen
        await wait_for_gate(mine)
        mine.finished.set()
        return "quietly done"

    @catalog.tool
    async def stubborn(ctx: Context) -> str:
        """Answers even when cancelled (swallows the cancellation)."""
        mine = seen
        with contextlib.suppress(asyncio.CancelledError):
            await wait_for_gate(mine)
        return "answered anyway"

    @catalog.tool
    async def deadline() -> str:
        """A deadline set in its first step (it captures the task it runs in)."""
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(5)
        except TimeoutError:
            return "deadline kept"
        return "deadline missed"

    return catalog


@pytest.fixture
async def app() -> AsyncIterator[Application]:
    application = create_app(settings(), inline_catalog())
    async with application.lifespan(application.starlette):
        yield application


http = legacy_http.http  # the in-process client, over app
net = legacy_http.net  # the client over a real socket, over live


def runtime_of(app: Application, client: LegacySession) -> Any:
    assert client.session_id is not None
    runtime = app.runtimes.peek(client.session_id)
    assert runtime is not None
    return runtime


def text_of(message: dict[str, Any]) -> str:
    return str(message["result"]["content"][0]["text"])


# == in process ==================================================================================


async def test_a_call_that_sends_nothing_first_runs_in_its_requests_task_and_answers_json(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    response = await client.post(tool_call("where", id="w"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert text_of(response.json()) == "here"
    # ASGITransport runs the app in this task: the call ran in it, not in a task of its own.
    assert seen.task is asyncio.current_task()
    # No stream was opened for it (nothing to resume), and it left the in-flight table.
    runtime = runtime_of(app, client)
    assert not runtime.streams
    assert not runtime.inflight


async def test_a_tool_that_takes_no_context_gets_none_made(
    app: Application, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    era = app.legacy.era
    made: list[str] = []
    make = era.context

    def counting(*args: Any, **kwargs: Any) -> Any:
        context = make(*args, **kwargs)
        made.append(context.method)
        return context

    monkeypatch.setattr(era, "context", counting)
    client = await legacy_session(http)
    assert text_of(await client.call("tools/call", {"name": "where", "arguments": {}})) == "here"
    assert made == []
    # A tool that takes one still gets it, as every other method does.
    calling = asyncio.ensure_future(client.post(tool_call("quiet", id="q"), "application/json"))
    await wait_until(seen.waiting.is_set)
    seen.gate.set()
    with anyio.fail_after(2):
        response = await calling
    assert text_of(response.json()) == "quietly done"
    await client.call("ping")
    assert made == ["tools/call", "ping"]


async def test_a_deadline_set_in_a_calls_first_step_acts_on_the_call(
    http: httpx.AsyncClient,
) -> None:
    client = await legacy_session(http)
    answer = await client.call("tools/call", {"name": "deadline", "arguments": {}})
    assert text_of(answer) == "deadline kept"
    # The request's task is not left cancelled: it answers the next call as usual.
    assert text_of(await client.call("tools/call", {"name": "where", "arguments": {}})) == "here"


async def test_a_client_that_takes_only_sse_gets_a_resumable_stream_for_a_silent_call(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    response = await client.post(tool_call("where", id="w"), "text/event-stream")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    (message,) = messages_of(response.text)
    assert message["id"] == "w"
    assert text_of(message) == "here"
    assert f"retry: {RETRY_MS}" in response.text  # the priming event


async def test_a_silent_inline_call_cancelled_by_the_client_sends_no_response(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    calling = asyncio.ensure_future(client.post(tool_call("quiet", id="q")))
    await wait_until(seen.waiting.is_set)
    cancel = notification("notifications/cancelled", {"requestId": "q", "reason": "enough"})
    assert (await client.post(cancel)).status_code == 202
    with anyio.fail_after(2):
        response = await calling
    assert seen.cancelled.is_set()
    assert not seen.finished.is_set()
    # Accepting SSE: an empty stream, with no response in it.
    assert response.status_code == 200
    assert response.content == b""
    assert not runtime_of(app, client).inflight
    # The request's task was not left cancelled: the session goes on.
    assert text_of(await client.call("tools/call", {"name": "where", "arguments": {}})) == "here"


async def test_a_call_that_swallows_its_cancellation_still_answers(
    http: httpx.AsyncClient,
) -> None:
    client = await legacy_session(http)
    calling = asyncio.ensure_future(client.post(tool_call("stubborn", id="s"), "application/json"))
    await wait_until(seen.waiting.is_set)
    cancel = notification("notifications/cancelled", {"requestId": "s"})
    assert (await client.post(cancel)).status_code == 202
    assert (await client.post(cancel)).status_code == 202  # twice: still one cancellation
    with anyio.fail_after(2):
        response = await calling
    assert seen.cancelled.is_set()
    assert response.status_code == 200
    assert text_of(response.json()) == "answered anyway"
    assert text_of(await client.call("tools/call", {"name": "where", "arguments": {}})) == "here"


async def test_ending_the_session_cancels_an_inline_call(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    calling = asyncio.ensure_future(client.post(tool_call("quiet", id="q"), "application/json"))
    await wait_until(seen.waiting.is_set)
    assert client.session_id is not None
    deleted = await http.delete("/mcp", headers=client.headers())
    assert deleted.status_code == 200
    with anyio.fail_after(2):
        response = await calling
    assert seen.cancelled.is_set()
    assert response.status_code == 204
    assert app.runtimes.peek(client.session_id) is None


async def test_a_json_answer_leaves_no_reference_cycle_behind(
    app: Application, http: httpx.AsyncClient
) -> None:
    # Cycles wait for the collector, which the server runs rarely (server.serving): a request
    # that leaves its record draft in one keeps it, and what it holds, long after it ended.
    client = await legacy_session(http)
    assert client.session_id is not None
    body = json.dumps(tool_call("where", id=PROBE_ID)).encode()
    headers = [(name.lower().encode(), value.encode()) for name, value in client.headers().items()]
    scope = post_scope([(b"host", b"127.0.0.1"), *headers])
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await app(scope, receive, send)
        gc.collect()
        # Only this request's objects: other tests' servers may still run in their threads.
        left = [
            type(thing).__name__
            for thing in gc.garbage
            if (isinstance(thing, Draft) and thing.jsonrpc_id == PROBE_ID)
            or (
                isinstance(thing, Answer) and thing.final is not None and PROBE_BYTES in thing.final
            )
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["id"] == PROBE_ID
    assert left == []


# == over a real connection ======================================================================


@pytest.fixture(scope="module")
def live() -> Iterator[ServerThread]:
    with running(create_app(settings(), inline_catalog())) as server:
        yield server


def call_streams(runtime: Any) -> list[EventStream]:
    return [stream for stream in runtime.streams.values() if stream is not runtime.standalone]


@pytest.mark.slow
async def test_a_call_that_sends_after_a_silence_becomes_a_resumable_stream(
    live: ServerThread, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("quiet_then_loud", token="t", id="ql")) as events:
        priming = await events.next_frame()
        first = await events.next_frame()
    # The connection is gone (not a cancellation): the call waits at its gate.
    assert priming is not None
    assert priming.data == ""
    assert priming.retry == RETRY_MS
    assert first is not None
    assert first.message is not None
    assert first.message["params"]["message"] == "after a silence"
    assert first.id is not None
    await wait_until(seen.waiting.is_set)
    seen.gate.set()
    runtime = runtime_of(live.app, client)
    await wait_until(lambda: "ql" not in runtime.inflight)
    assert not seen.cancelled.is_set()
    async with client.get(last_event_id=first.id) as resumed:
        messages = await resumed.rest()
    assert [message.get("params", {}).get("message") for message in messages] == [
        "through the gate",
        None,
    ]
    assert messages[-1]["id"] == "ql"
    assert text_of(messages[-1]) == "loud at last"
    assert priming.id is not None
    async with client.get(last_event_id=priming.id) as replayed:
        everything = await replayed.rest()
    assert len(everything) == 3


@pytest.mark.slow
async def test_a_client_that_leaves_a_silent_call_neither_cancels_it_nor_loses_its_result(
    live: ServerThread, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    runtime = runtime_of(live.app, client)
    calling = asyncio.ensure_future(client.post(tool_call("quiet", id="q")))
    await wait_until(seen.waiting.is_set)
    await anyio.sleep(0.1)  # past the moment the server starts watching the client
    calling.cancel()  # httpx closes the connection
    with contextlib.suppress(asyncio.CancelledError):
        await calling
    # The server notices the client left: what the call sends from now on is kept.
    await wait_until(lambda: call_streams(runtime))
    assert not seen.cancelled.is_set()
    seen.gate.set()
    await wait_until(seen.finished.is_set)
    await wait_until(lambda: "q" not in runtime.inflight)
    (stream,) = call_streams(runtime)
    assert stream.finished
    async with client.get(last_event_id=stream.priming_id) as resumed:
        messages = await resumed.rest()
    assert [message["id"] for message in messages] == ["q"]
    assert text_of(messages[0]) == "quietly done"
    assert not seen.cancelled.is_set()


@pytest.mark.slow
async def test_a_streaming_inline_call_cancelled_by_the_client_ends_its_stream_without_a_response(
    live: ServerThread, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("quiet_then_loud", token="t", id="c")) as events:
        first = await events.next()
        assert first is not None
        assert first["method"] == "notifications/progress"
        await wait_until(seen.waiting.is_set)
        cancel = notification("notifications/cancelled", {"requestId": "c"})
        assert (await client.post(cancel)).status_code == 202
        rest = await events.rest()
    assert rest == []
    assert seen.cancelled.is_set()
    runtime = runtime_of(live.app, client)
    await wait_until(lambda: not runtime.inflight)
