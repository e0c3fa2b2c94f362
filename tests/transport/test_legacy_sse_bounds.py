"""server.transport.legacy_sse: what an HTTP+SSE client can make the server hold, and giving it
back (issue 34), each at the size that showed it.

A stream dropped while calls run ends its session everywhere and returns its slot (65 drops:
past the per-client cap of 64); answers are neither copied to Redis nor kept once sent (20
and 40 answers of 3.5 MB); a request id of a running request is refused (40 POSTs with one
id); a client reading slower than its tools write gets every message, or a closed stream
with the outcome recorded, never an open stream that lost answers (10 calls, 900 messages).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from server.app import Application, create_app
from server.legacy.runtime import SessionRuntime
from server.report.aggregate import aggregate
from tests.support.http_sse import endpoint_of, endpoint_of_blocking, sse_get_scope
from tests.support.live_server import ServerThread
from tests.support.mcp_client import messages_of
from tests.support.polling import wait_until as eventually
from tests.support.redis_server import fresh_prefix
from tests.transport.test_legacy_sse import (
    INITIALIZE,
    next_message,
    raw_stream,
    records,
    settings_for,
)

BIG = 3_500_000  # the size of the answers that showed the findings

# Real uvicorns (and a redis-server) at the sizes of issue 34: outside the inner loop.
pytestmark = pytest.mark.slow


def call(request_id: int | str, name: str, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def slow_call(request_id: int | str, seconds: float = 10) -> dict[str, Any]:
    return call(request_id, "count_slowly", steps=50, delay_ms=int(seconds * 1000 / 50))


def session_of(endpoint: str) -> str:
    return endpoint.rpartition("=")[2]


def kept_bytes(runtime: SessionRuntime) -> int:
    """What the session's streams hold of the messages they carried."""
    return sum(
        len(event.payload)
        for stream in list(runtime.streams.values())
        for _, event in stream.events_after(0)
    )


@contextlib.asynccontextmanager
async def running(app: Application) -> AsyncIterator[ServerThread]:
    server = ServerThread(app).start()
    try:
        yield server
    finally:
        server.stop()


# -- a stream dropped while calls run --------------------------------------------------------


@pytest.mark.anyio
async def test_dropping_the_stream_with_calls_running_gives_everything_back(
    tmp_path: Path,
) -> None:
    app = create_app(settings_for(tmp_path))  # MCP_MAX_SESSIONS_PER_CLIENT: 64
    sse = app.sse
    assert sse is not None
    ended: list[str] = []
    publish = app.legacy.bus.publish

    def told(kind: str, data: dict[str, Any]) -> None:
        if kind == "ended":
            ended.append(data["sid"])
        publish(kind, data)

    app.legacy.bus.publish = told  # type: ignore[method-assign]
    async with running(app) as live, httpx.AsyncClient(base_url=live.url, timeout=10) as http:
        dropped: list[str] = []
        for _ in range(65):  # one past the per-client session cap
            async with raw_stream(http, "/sse") as (got, lines):
                assert got.status_code == 200  # not 429: every dropped session gave its slot
                endpoint = await endpoint_of(lines)
                await http.post(endpoint, json=INITIALIZE)
                await next_message(lines)
                for request_id in (2, 3):
                    posted = await http.post(endpoint, json=slow_call(request_id))
                    assert posted.status_code == 202
                runtime = app.runtimes.peek(session_of(endpoint))
                assert runtime is not None
                await eventually(lambda runtime=runtime: len(runtime.inflight) == 2)  # type: ignore[misc]
            dropped.append(endpoint)
            # The session is deleted: a POST on it is refused, not taken into the void.
            gone = session_of(endpoint)
            await eventually(lambda gone=gone: app.runtimes.peek(gone) is None)  # type: ignore[misc]
            refused = await http.post(endpoint, json=slow_call(4))
            assert refused.status_code == 404, refused.text
        # Its calls were cancelled, the other replicas told, its slot returned.
        await eventually(lambda: not sse.calls)
        assert ended == [session_of(each) for each in dropped]
        assert len(app.runtimes) == 0
        assert len(app.gate.sessions) == 0  # no client holds a session slot


# -- answers copied to Redis, kept after they were sent ---------------------------------------


@pytest.mark.anyio
async def test_answers_are_not_copied_to_redis(
    tmp_path: Path, redis_server: Any, redis_client: Any
) -> None:
    prefix = fresh_prefix()
    settings = settings_for(
        tmp_path, redis_url=redis_server.url, redis_prefix=prefix, state_secret="s" * 32
    )
    async with (
        running(create_app(settings)) as live,
        httpx.AsyncClient(base_url=live.url, timeout=30) as http,
        raw_stream(http, "/sse") as (_, lines),
    ):
        endpoint = await endpoint_of(lines)
        await http.post(endpoint, json=INITIALIZE)
        await next_message(lines)
        before = (await redis_client.info("memory"))["used_memory"]
        for request_id in range(2, 22):  # 20 answers of 3.5 MB
            posted = await http.post(endpoint, json=call(request_id, "echo", text="x" * BIG))
            assert posted.status_code == 202
            with anyio.fail_after(20):
                assert (await next_message(lines))["id"] == request_id
        await anyio.sleep(0.5)  # the mirror's writer would have written by now
        shared = [key async for key in redis_client.scan_iter(match=f"{prefix}:*")]
        assert shared, "the app keeps its session in this Redis: else nothing could be copied"
        copied = [key async for key in redis_client.scan_iter(match=f"{prefix}:events:*")]
        assert copied == []
        grown = (await redis_client.info("memory"))["used_memory"] - before
        assert grown < 10 * 2**20, f"Redis grew by {grown / 2**20:.0f} MiB"


@pytest.mark.anyio
async def test_answers_are_not_kept_once_sent(live_app: ServerThread) -> None:
    app = live_app.app
    async with (
        httpx.AsyncClient(base_url=live_app.url, timeout=30) as http,
        raw_stream(http, "/sse") as (_, lines),
    ):
        endpoint = await endpoint_of(lines)
        await http.post(endpoint, json=INITIALIZE)
        await next_message(lines)
        runtime = app.runtimes.peek(session_of(endpoint))
        assert runtime is not None
        for request_id in range(2, 42):  # 40 answers of 3.5 MB
            posted = await http.post(endpoint, json=call(request_id, "echo", text="x" * BIG))
            assert posted.status_code == 202
            with anyio.fail_after(20):
                assert (await next_message(lines))["id"] == request_id
        # Once sent (the stream's next turn, a keep-alive at the latest), nothing is kept.
        await eventually(lambda: kept_bytes(runtime) < BIG)


@pytest.fixture
def live_app(tmp_path: Path) -> Any:
    server = ServerThread(create_app(settings_for(tmp_path))).start()
    yield server
    server.stop()


# -- one id, many requests -------------------------------------------------------------------


async def next_answer(lines: AsyncIterator[str]) -> dict[str, Any]:
    """The next answer on the stream, past the notifications (the running call's logs)."""
    while "id" not in (message := await next_message(lines)):
        pass
    return message


@pytest.mark.anyio
async def test_a_duplicate_id_of_a_running_request_is_refused(tmp_path: Path) -> None:
    app = create_app(settings_for(tmp_path))
    sse = app.sse
    assert sse is not None
    async with (
        running(app) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
        raw_stream(http, "/sse") as (_, lines),
    ):
        endpoint = await endpoint_of(lines)
        await http.post(endpoint, json=INITIALIZE)
        await next_message(lines)
        for _ in range(40):
            assert (await http.post(endpoint, json=slow_call(7))).status_code == 202
        refusals = [await next_answer(lines) for _ in range(39)]
        assert {each["id"] for each in refusals} == {7}
        assert {each["error"]["code"] for each in refusals} == {-32600}
        assert "still running" in refusals[0]["error"]["message"]
        assert len(sse.calls) == 1  # one runs, counted by the pending cap
        cancel: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
        cancel["params"] = {"requestId": 7}
        assert (await http.post(endpoint, json=cancel)).status_code == 202
        await eventually(lambda: not sse.calls)  # and it was within reach
        session_id = session_of(endpoint)
    await eventually(
        lambda: (
            len(
                [
                    r
                    for r in records(tmp_path)
                    if r.get("session_id") == session_id and r.get("jsonrpc_id") == 7
                ]
            )
            == 40
        )
    )
    mine = [r for r in records(tmp_path) if r.get("session_id") == session_id]
    outcomes = sorted(str(r.get("outcome")) for r in mine if r.get("jsonrpc_id") == 7)
    assert outcomes.count("error") == 39


# -- a slow reader ---------------------------------------------------------------------------


class SlowReader:
    """A GET /sse driven straight through the app, whose every frame takes ``pause`` s to be
    sent: a client reading slower than its tools write (but never stalled)."""

    def __init__(self, app: Application, pause: float) -> None:
        self.app, self.pause = app, pause
        self.frames: list[bytes] = []
        self.status: int | None = None
        self.ended = False
        self.leave = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> MutableMapping[str, Any]:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.frames.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.ended = True
            await asyncio.sleep(self.pause)

    def start(self) -> None:
        scope = sse_get_scope()
        self.task = asyncio.ensure_future(self.app(scope, self.receive, self.send))

    async def endpoint(self) -> str:
        await eventually(lambda: bool(self.frames))
        return endpoint_of_blocking(iter(self.frames[0].decode().splitlines()))

    def messages(self) -> list[dict[str, Any]]:
        # Each send is one whole event; the first is the endpoint event, not a message.
        return messages_of(b"".join(self.frames[1:]).decode())

    async def close(self) -> None:
        self.leave.set()
        if self.task is not None:
            with anyio.fail_after(10):
                await self.task


@contextlib.asynccontextmanager
async def in_process(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Application, Any]]:
    app = create_app(settings_for(tmp_path, keepalive_s=5, **settings))
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as http,
    ):
        yield app, http


def target(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    return f"{parts.path}?{parts.query}"


CALLS = range(100, 110)


async def ten_calls_of_ninety_messages(http: httpx.AsyncClient, endpoint: str) -> None:
    await http.post(endpoint, json=INITIALIZE)
    level: dict[str, Any] = {"jsonrpc": "2.0", "id": "level", "method": "logging/setLevel"}
    level["params"] = {"level": "debug"}
    await http.post(endpoint, json=level)
    for request_id in CALLS:  # 45 steps: a progress and a log each, 900 messages
        counting = call(request_id, "count_slowly", steps=45, delay_ms=0)
        counting["params"]["_meta"] = {"progressToken": f"p{request_id}"}
        assert (await http.post(endpoint, json=counting)).status_code == 202


@pytest.mark.anyio
async def test_a_slow_reader_gets_every_message(tmp_path: Path) -> None:
    async with in_process(tmp_path) as (app, http):
        reader = SlowReader(app, pause=0.002)
        reader.start()
        endpoint = target(await reader.endpoint())
        await ten_calls_of_ninety_messages(http, endpoint)
        with anyio.fail_after(60):
            while len([m for m in reader.messages() if m.get("id") in CALLS]) < 10:
                assert not reader.ended, "the stream ended"
                await asyncio.sleep(0.05)
        messages = reader.messages()
        await reader.close()
    logs = [m for m in messages if m.get("method") == "notifications/message"]
    progress = [m for m in messages if m.get("method") == "notifications/progress"]
    assert len(logs) == 450
    assert len(progress) == 450
    assert sorted(m["id"] for m in messages if m.get("id") in CALLS) == list(CALLS)


@pytest.mark.anyio
async def test_past_its_bound_a_slow_readers_stream_closes_with_the_outcome_recorded(
    tmp_path: Path,
) -> None:
    async with in_process(tmp_path, sse_transport_max_queued_bytes=64 * 1024) as (app, http):
        reader = SlowReader(app, pause=0.05)
        reader.start()
        endpoint = target(await reader.endpoint())
        await http.post(endpoint, json=INITIALIZE)
        for request_id in range(2, 12):  # ten answers of 100 KB, each beyond the bound
            posted = await http.post(endpoint, json=call(request_id, "echo", text="y" * 100_000))
            assert posted.status_code in (202, 404)  # 404: the session already ended
        # The stream closes (the client connects again), not drops answers while open.
        await eventually(lambda: reader.ended, limit=20)
        answered = {m["id"] for m in reader.messages() if isinstance(m.get("id"), int)}
        assert answered == set(range(1, 1 + len(answered)))  # a prefix, in order: no gap
        assert len(answered) < 11
        # Its session ended with it (deleted from the store just after).
        await eventually(lambda: app.runtimes.peek(session_of(endpoint)) is None)
        await eventually(lambda: app.legacy.era.store.count() == 0)
        after = await http.post(endpoint, json=call(99, "echo", text="late"))
        assert after.status_code == 404
        await reader.close()
        session_id = session_of(endpoint)
    await eventually(
        lambda: any(
            r["kind"] == "stream" and r.get("session_id") == session_id for r in records(tmp_path)
        )
    )
    [stream] = [
        r for r in records(tmp_path) if r["kind"] == "stream" and r.get("session_id") == session_id
    ]
    assert stream["end"] == "overflow"


# -- the stream's GET in the report ----------------------------------------------------------


@pytest.mark.anyio
async def test_the_streams_get_is_the_client_that_initialized_its_session(
    tmp_path: Path,
) -> None:
    async with (
        running(create_app(settings_for(tmp_path))) as live,
        httpx.AsyncClient(base_url=live.url, timeout=10) as http,
    ):
        async with raw_stream(http, "/sse") as (_, lines):
            endpoint = await endpoint_of(lines)
            await http.post(endpoint, json=INITIALIZE)
            await next_message(lines)
            call_echo = call(2, "echo", text="hi")
            await http.post(endpoint, json=call_echo)
            await next_message(lines)
        async with raw_stream(http, "/sse") as (_, lines):  # one that never initializes
            await endpoint_of(lines)
        await eventually(lambda: len([r for r in records(tmp_path) if r["kind"] == "stream"]) == 2)
    opened = [r for r in records(tmp_path) if r["kind"] == "request" and r["verb"] == "GET"]
    assert sorted(str(r["client"]["name"]) for r in opened) == ["None", "raw-sse"]
    with (tmp_path / "records.jsonl").open("rb") as lines_file:
        report = aggregate([("records.jsonl", lines_file)])
    named = {client.name: client.requests for client in report.clients}
    assert named == {"raw-sse": 3, None: 1}  # GET, initialize, call; the silent GET apart


@pytest.mark.anyio
async def test_a_dropped_stream_ends_its_calls_on_every_replica(
    tmp_path: Path, redis_server: Any
) -> None:
    prefix = fresh_prefix()
    apps = [
        create_app(
            settings_for(
                tmp_path / str(n),
                redis_url=redis_server.url,
                redis_prefix=prefix,
                state_secret="s" * 32,
                records=["none"],
            )
        )
        for n in range(2)
    ]
    holder, other = (app.sse for app in apps)
    assert holder is not None
    assert other is not None
    async with (
        running(apps[0]) as first,
        running(apps[1]) as second,
        httpx.AsyncClient(timeout=10) as http,
    ):
        async with raw_stream(http, f"{first.url}/sse") as (_, lines):
            endpoint = await endpoint_of(lines)
            await http.post(first.url + endpoint, json=INITIALIZE)
            await next_message(lines)
            for request_id in (2, 3):  # two calls here, where the stream is held
                assert (
                    await http.post(first.url + endpoint, json=slow_call(request_id))
                ).status_code == 202
            # and one on the other replica (a POST a load balancer sent there)
            assert (await http.post(second.url + endpoint, json=slow_call(4))).status_code == 202
            await eventually(lambda: len(holder.calls) == 2 and len(other.calls) == 1)
        await eventually(lambda: not holder.calls and not other.calls)  # everywhere
        await eventually(lambda: apps[1].runtimes.peek(session_of(endpoint)) is None)
        late = await http.post(second.url + endpoint, json=slow_call(5))
        assert late.status_code == 404
