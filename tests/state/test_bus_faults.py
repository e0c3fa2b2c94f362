"""An HTTP+SSE answer that must cross the bus while Redis stalls or restarts empty: never a hang.

Two replicas (two apps under uvicorn, each on its own loop and thread) share a redis-server
this module starts for itself, so it can stall it (SIGSTOP, as a frozen or overloaded Redis)
and restart it empty. The client holds its stream on one replica and posts to the other, so
every answer travels on the bus. Each fault is at the size that showed it (issue 35): a 10 s
stall, a restart that loses every session, with the default ``MCP_REDIS_TIMEOUT_S``. The promise:
the client gets its answer, a JSON-RPC error on its stream, or its stream closed, within
``MCP_REDIS_TIMEOUT_S`` plus a small margin of the answer being due; and a session whose stream
was closed is refused afterwards (404), not accepted into the void.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from server.app import create_app
from server.settings import Settings
from server.transport.sse_sessions import WATCH_S
from tests.support.deploy_helpers import INITIALIZE, INITIALIZED, legacy_headers
from tests.support.http_sse import endpoint_of
from tests.support.live_server import ServerThread
from tests.support.mcp_client import initialize
from tests.support.mcp_client import sse_messages as mcp_sse_messages
from tests.support.polling import wait_until_blocking
from tests.support.redis_server import RedisServer, fresh_prefix
from tests.support.replicas import PREFIX, Replicas

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIMEOUT_S = 2.0  # MCP_REDIS_TIMEOUT_S, its default
MARGIN_S = 2.0  # the shared 2-core machine's scheduling, and the 1 s steps of the bus's checks
CALL_S = 3.0  # the silent call: count_slowly, 2 steps of 1.5 s
STALL_S = 10.0
ELICIT: dict[str, Any] = {"elicitation": {}}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def subscribed(running: ServerThread) -> bool:
    status = running.app.shared.status()
    return status is not None and bool(status["bus"]["subscribed"])


@contextlib.contextmanager
def two_replicas(redis: RedisServer) -> Iterator[list[ServerThread]]:
    settings = Settings(
        _env_file=None,
        catalog="probe",
        records=["none"],
        redis_url=redis.url,
        redis_prefix=fresh_prefix(),
        redis_timeout_s=TIMEOUT_S,
        state_secret="one secret for both replicas",
        keepalive_s=1.0,
    )
    started: list[ServerThread] = []
    try:
        for _ in range(2):
            started.append(ServerThread(create_app(settings)).start())
        wait_until_blocking(lambda: all(subscribed(each) for each in started), limit=10)
        yield started
    finally:
        for each in started:
            each.stop()


@contextlib.asynccontextmanager
async def held_at(http: httpx.AsyncClient, holder: str) -> AsyncIterator[Client]:
    """A raw HTTP+SSE client whose stream ``holder`` holds (its endpoint event read); the
    stream let go on the way out, which a holder killed meanwhile has broken already."""
    context = http.stream("GET", holder + "/sse", headers={"Accept": "text/event-stream"})
    stream = await context.__aenter__()
    try:
        opened = Client(http, stream, "")
        first = await opened.event()
        assert first is not None
        opened.messages = first[1].removeprefix(PREFIX)
        yield opened
    finally:
        with contextlib.suppress(httpx.HTTPError):
            await context.__aexit__(None, None, None)


class Client:
    """A raw HTTP+SSE client: its stream held on one replica, its posts sent to another."""

    def __init__(self, http: httpx.AsyncClient, stream: httpx.Response, messages: str) -> None:
        self.http = http
        self.stream = stream
        self.messages = messages
        self.lines = stream.aiter_lines()

    async def event(self) -> tuple[str, str] | None:
        """The next event's name and data; None when the stream has ended."""
        fields: dict[str, str] = {}
        async for line in self.lines:
            if not line:
                if fields:
                    return fields.get("event", "message"), fields.get("data", "")
                continue
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.strip()
        return None

    async def post(self, base: str, message: dict[str, Any]) -> int:
        return (await self.http.post(base + self.messages, json=message)).status_code

    async def outcome(self, request_id: int, limit: float) -> str:
        """What the client gets for its request: ``answer``, ``error`` or ``closed``; fails
        if it gets none of them within ``limit`` seconds (the client hangs)."""
        try:
            with anyio.fail_after(limit):
                while (event := await self.event()) is not None:
                    if event[0] == "message" and json.loads(event[1]).get("id") == request_id:
                        return "error" if "error" in json.loads(event[1]) else "answer"
        except httpx.HTTPError:
            pass  # the connection was cut: closed too
        except TimeoutError:
            pytest.fail(f"no answer, no error and the stream still open after {limit:.1f} s")
        return "closed"


@contextlib.asynccontextmanager
async def client(holder: str, runner: str) -> AsyncIterator[Client]:
    """A session whose stream is held on ``holder``, initialized through ``runner``."""
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", holder + "/sse", headers={"Accept": "text/event-stream"}) as stream,
    ):
        assert stream.status_code == 200
        opened = Client(http, stream, "")
        opened.messages = await endpoint_of(opened.lines)
        opening = initialize("2024-11-05", client_info={"name": "bus-faults", "version": "1"}, id=1)
        assert await opened.post(runner, opening) == 202
        assert await opened.outcome(1, 10) == "answer"
        yield opened


SILENT_CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "count_slowly", "arguments": {"steps": 2, "delay_ms": 1500}},
}


async def refused_later(opened: Client, runner: str, limit: float) -> int:
    """The status a POST on the session gets once it has settled (polled up to ``limit``)."""
    deadline = time.monotonic() + limit
    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    while (status := await opened.post(runner, ping)) not in (404,):
        if time.monotonic() > deadline:
            break
        await anyio.sleep(0.25)
    return status


async def test_a_stalled_redis_costs_an_answer_an_error_or_a_closed_stream_not_a_hang(
    redis: RedisServer,
) -> None:
    with two_replicas(redis) as (runner, holder):
        async with client(holder.url, runner.url) as opened:
            assert await opened.post(runner.url, SILENT_CALL) == 202
            with redis.paused():
                stalled = time.monotonic()
                outcome = await opened.outcome(2, CALL_S + TIMEOUT_S + MARGIN_S)
                waited = time.monotonic() - stalled
                print(f"stall: {outcome} after {waited:.2f} s")
                await anyio.sleep(max(0.0, STALL_S - waited))
            # The answer cannot cross a stalled bus, nor can an error for it: the holder,
            # longer than MCP_REDIS_TIMEOUT_S without its bus, closes the stream (reconnect).
            assert outcome == "closed", outcome
            # Redis is back: the session is ended everywhere, so its posts are refused.
            assert await refused_later(opened, runner.url, 3 * TIMEOUT_S + MARGIN_S) == 404


async def test_a_redis_restarted_empty_closes_the_stream_and_the_session_at_once(
    redis: RedisServer,
) -> None:
    with two_replicas(redis) as (runner, holder):
        async with client(holder.url, runner.url) as opened:
            assert await opened.post(runner.url, SILENT_CALL) == 202
            with redis.stopped():
                stopped = time.monotonic()
                # The session vanishes with Redis: its stream closes without waiting for it.
                outcome = await opened.outcome(2, TIMEOUT_S + MARGIN_S)
                waited = time.monotonic() - stopped
                print(f"restart: {outcome} after {waited:.2f} s")
                # The call ends while Redis is away: its answer cannot cross.
                await anyio.sleep(max(0.0, CALL_S + 0.5 - waited))
            assert outcome == "closed", outcome  # a stream whose session is gone: reconnect
            wait_until_blocking(lambda: subscribed(runner), limit=10)
            assert await refused_later(opened, runner.url, TIMEOUT_S + MARGIN_S) == 404


async def test_a_post_for_a_session_whose_holder_died_is_refused_and_its_call_stopped(
    redis: RedisServer, tmp_path: Path
) -> None:
    with Replicas(2, catalog="probe", redis=redis, nginx=False, workdir=tmp_path) as running:
        runner, holder = running.replica_urls
        async with httpx.AsyncClient(timeout=30) as http:
            async with held_at(http, holder) as opened:
                long_call = {
                    **SILENT_CALL,
                    "params": {"name": "long_job", "arguments": {"seconds": 60}},
                }
                assert await opened.post(runner, long_call) == 202
                process = running.servers[1].process
                assert process is not None
                process.kill()  # SIGKILL: no drain, no "ended" on the bus
                process.wait(10)
                killed = time.monotonic()
            # Nobody will read what the call sends: it stops within WATCH_S, by itself.
            await anyio.sleep(WATCH_S + 4.0)
            # And the session's posts are refused, not accepted into the void.
            assert await refused_later(opened, runner, TIMEOUT_S) == 404
            waited_ms = (time.monotonic() - killed) * 1000
    calls = [
        record
        for record in running.records()[0]
        if record.get("method") == "tools/call" and record.get("transport") == "sse"
    ]
    assert len(calls) == 1
    # Stopped before the post that was refused, not run to its 60 s end.
    assert calls[0]["duration_ms"] < waited_ms


# -- the initialize era: a client's answer to a question of a replica that died ----------------


@pytest.mark.parametrize("crash", [False, True], ids=["asker-alive", "asker-killed"])
async def test_an_answer_reaches_the_replica_that_asked_or_its_post_learns_it_is_gone(
    crash: bool, redis: RedisServer, tmp_path: Path
) -> None:
    # A call on replica A asks the client (elicitation); the client posts its answer to B.
    # Alive, A gets it over the bus (only A hears it: its id names A). SIGKILLed, nobody
    # hears it: the POST was a 202 into the void (issue 35), it is a 410 now (a 404 would
    # tell the client its session is gone).
    with Replicas(2, redis=redis, nginx=False, workdir=tmp_path) as running:
        a, b = running.replica_urls
        async with httpx.AsyncClient(timeout=30) as http:
            initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": ELICIT}}
            opened = await http.post(f"{a}/mcp", json=initialize, headers=legacy_headers())
            sid = opened.headers["mcp-session-id"]
            done = await http.post(f"{a}/mcp", json=INITIALIZED, headers=legacy_headers(sid))
            assert done.status_code == 202
            call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call"}
            call["params"] = {"name": "ask_name", "arguments": {}}
            headers = legacy_headers(sid)
            async with http.stream("POST", f"{a}/mcp", json=call, headers=headers) as stream:
                messages = mcp_sse_messages(stream, limit=10)
                question = await anext(messages)
                assert question["method"] == "elicitation/create"
                if crash:
                    process = running.servers[0].process
                    assert process is not None
                    process.kill()
                    process.wait(10)
                answer = {"jsonrpc": "2.0", "id": question["id"]}
                answer["result"] = {"action": "accept", "content": {"name": "Ada"}}
                posted = await http.post(f"{b}/mcp", json=answer, headers=headers)
                if crash:
                    assert posted.status_code == 410, posted.text
                    assert "stopped" in posted.json()["error"]["message"]
                    return
                assert posted.status_code == 202, posted.text
                result = await anext(messages)
                assert result["id"] == 5
                assert result["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_a_stream_initialized_through_another_replica_keeps_its_record_through_a_crash(
    redis: RedisServer, tmp_path: Path
) -> None:
    """The GET's record, which waits for the client's name, is written once the initialize's
    answer reaches the stream, not at the stream's end: a SIGKILL of the holder a second
    later loses it no more than any record older than the writer's flush (the chaos run's
    replica SIGKILL met such a GET opened in an earlier fault's window)."""
    with Replicas(2, catalog="probe", redis=redis, nginx=False, workdir=tmp_path) as running:
        runner, holder = running.replica_urls
        async with httpx.AsyncClient(timeout=30) as http, held_at(http, holder) as opened:
            named = {"name": "named-elsewhere", "version": "1"}
            opening = initialize("2024-11-05", client_info=named, id=1)
            assert await opened.post(runner, opening) == 202
            assert await opened.outcome(1, 10) == "answer"
            await anyio.sleep(1.0)  # five of the writer's 200 ms flushes
            process = running.servers[1].process
            assert process is not None
            process.kill()  # SIGKILL: the stream never ends on the holder's side
            process.wait(10)
    gets = [r for r in running.records()[1] if r["verb"] == "GET" and r["path"].endswith("/sse")]
    assert [(r["status"], r["client"]["name"]) for r in gets] == [(200, "named-elsewhere")]
