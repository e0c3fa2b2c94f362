"""server.state.redis.link: bounded Redis operations, 503 on failure, connection state.

Uses the session's ``redis_server`` (a real redis-server); a test that stops it starts it again
in a ``finally``. Every test has its own key prefix. Last, the whole path in a real server
process: a stalled Redis takes the replica out of rotation and fails its requests with 503
within ``MCP_REDIS_TIMEOUT_S`` (issue 35).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.errors import ServiceUnavailable, http_status
from server.state.redis.link import (
    PING_LOST_S,
    CommandRefused,
    RedisLink,
    command_refused,
    redis_failure,
)
from tests.support.deploy_helpers import INITIALIZE, ServerProcess, free_port, legacy_headers
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, fresh_prefix

# A real redis-server, stopped and started: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIMEOUT_S = 0.5


@pytest.fixture
async def link(redis_server: RedisServer) -> AsyncIterator[RedisLink]:
    redis_link = RedisLink(redis_server.url, prefix=fresh_prefix(), timeout_s=TIMEOUT_S)
    yield redis_link
    await redis_link.close()


async def expect_unavailable(link: RedisLink, operation: Any) -> float:
    """Run ``operation`` through the link; it must fail with 503 in bounded time."""
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as caught:
        await link.run(operation)
    elapsed = time.monotonic() - started
    assert elapsed < link.timeout_s + 0.5  # one deadline, the retry included
    assert caught.value.retry_after == PING_LOST_S
    assert http_status(caught.value, "legacy") == 503
    assert http_status(caught.value, "modern") == 503
    return elapsed


# -- success ------------------------------------------------------------------------------------


async def test_a_new_link_is_not_connected_yet(link: RedisLink) -> None:
    assert link.connected is False
    assert link.status() == {"connected": False, "error": "not connected yet"}


async def test_run_returns_the_result_and_marks_connected(link: RedisLink) -> None:
    assert await link.run(link.client.ping()) is True
    assert link.connected is True
    assert link.last_error is None
    assert link.lost_at is None
    assert link.status() == {"connected": True}
    await link.run(link.client.set(link.key("k"), b"v"))
    assert await link.run(link.client.get(link.key("k"))) == b"v"


async def test_key_joins_the_prefix_and_parts(link: RedisLink) -> None:
    assert link.key("session", "abc") == f"{link.prefix}:session:abc"
    assert link.key() == link.prefix


async def test_errors_that_are_not_redis_failures_pass_through(link: RedisLink) -> None:
    async def broken() -> None:
        raise ValueError("a bug of ours")

    with pytest.raises(ValueError, match="a bug of ours"):
        await link.run(broken())
    assert link.status()["error"] == "not connected yet"  # not taken for an outage


def test_redis_failure_classifies_errors() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    assert redis_failure(RedisConnectionError("gone"))
    assert redis_failure(ConnectionRefusedError())
    assert redis_failure(TimeoutError())
    assert not redis_failure(ValueError())
    assert not redis_failure(KeyError("x"))


# -- an error reply is a failed command, not a lost Redis ---------------------------------------


async def test_an_error_reply_fails_the_command_and_leaves_the_link_connected(
    link: RedisLink,
) -> None:
    heard: list[str] = []
    link.on_reconnect(lambda: heard.append("back"))
    await link.run(link.client.ping())
    # A sequence past what a stream id holds: Redis answers "ERR Invalid stream ID".
    with pytest.raises(CommandRefused) as refused:
        await link.run(link.client.xrange(link.key("s"), f"0-{2**64}", "+"))
    assert isinstance(refused.value, ServiceUnavailable)
    assert http_status(refused.value, "legacy") == 503
    assert "refused" in str(refused.value)
    assert link.connected is True
    assert link.lost_at is None
    status = link.status()
    assert status["connected"] is True
    assert "error" not in status  # readiness's error: none, Redis answers
    assert status["refused_commands"] == 1
    assert "Invalid stream ID" in status["last_refusal"]
    # In a pipeline too (the error reply comes after the others are read).
    async with link.client.pipeline(transaction=False) as pipe:
        pipe.ping()
        pipe.xrange(link.key("s"), "not-an-id", "+")
        with pytest.raises(CommandRefused):
            await link.run(pipe.execute())
    assert link.connected is True
    assert link.status()["refused_commands"] == 2
    assert await link.run(link.client.ping()) is True
    assert heard == []  # never taken for an outage, so never "back" either


async def test_an_error_reply_while_lost_shows_redis_answers_again(
    link: RedisLink, redis_server: RedisServer
) -> None:
    with redis_server.stopped(), pytest.raises(ServiceUnavailable):
        await link.run(link.client.ping())
    assert link.connected is False
    with pytest.raises(CommandRefused):
        await link.run(link.client.xrange(link.key("s"), "not-an-id", "+"))
    assert link.connected is True


def test_command_refused_classifies_error_replies() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import DataError, ReadOnlyError, ResponseError

    assert command_refused(ResponseError("ERR Invalid stream ID"))
    assert command_refused(ReadOnlyError("READONLY"))
    assert command_refused(DataError("Invalid input of type: 'NoneType'"))
    assert not command_refused(RedisConnectionError("gone"))
    assert not command_refused(TimeoutError())
    assert not command_refused(ValueError())


# -- failures -----------------------------------------------------------------------------------


async def test_a_closed_port_is_a_prompt_503() -> None:
    link = RedisLink(
        f"redis://127.0.0.1:{free_port()}/0", prefix=fresh_prefix(), timeout_s=TIMEOUT_S
    )
    try:
        await expect_unavailable(link, link.client.ping())
        assert link.connected is False
        assert link.lost_at is not None
        status = link.status()
        assert status["connected"] is False
        assert "Connect" in status["error"] or "refused" in status["error"].lower()
    finally:
        await link.close()


async def test_a_redis_that_never_answers_is_a_bounded_503() -> None:
    # Accepts connections (the kernel completes the handshake) but never says a word.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        link = RedisLink(f"redis://127.0.0.1:{port}/0", prefix=fresh_prefix(), timeout_s=0.2)
        try:
            elapsed = await expect_unavailable(link, link.client.ping())
            assert elapsed >= 0.2  # it did wait for the timeout, then gave up
            assert link.connected is False
            assert link.status()["error"]
        finally:
            await link.close()


async def test_redis_stopped_is_a_503_and_the_link_says_so(
    link: RedisLink, redis_server: RedisServer
) -> None:
    await link.run(link.client.ping())
    assert link.connected
    with redis_server.stopped():
        await expect_unavailable(link, link.client.ping())
        assert link.connected is False
        assert link.status()["error"]
        lost_at = link.lost_at
        assert lost_at is not None
        # Still away: the outage keeps its start time.
        await expect_unavailable(link, link.client.get(link.key("k")))
        assert link.lost_at == lost_at
    # Redis is back: the next operation (a stale pooled connection, retried once) works.
    assert await link.run(link.client.ping()) is True
    assert link.status() == {"connected": True}
    assert link.lost_at is None


async def test_reconnect_listeners_hear_once_that_redis_is_back(
    link: RedisLink, redis_server: RedisServer
) -> None:
    await link.run(link.client.ping())
    heard: list[str] = []

    def failing_listener() -> None:
        raise RuntimeError("a listener's bug must not stop the others")

    link.on_reconnect(failing_listener)
    link.on_reconnect(lambda: heard.append("back"))
    await link.run(link.client.ping())
    assert heard == []  # no outage yet
    with redis_server.stopped():
        for _ in range(2):
            with pytest.raises(ServiceUnavailable):
                await link.run(link.client.ping())
        assert heard == []
    await link.run(link.client.ping())
    assert heard == ["back"]
    await link.run(link.client.ping())
    await link.run(link.client.set(link.key("k"), b"v"))
    assert heard == ["back"]  # once per outage, not per operation


async def test_the_monitor_notices_redis_going_and_coming_back(
    link: RedisLink, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import server.state.redis.link as redis_link_module

    monkeypatch.setattr(redis_link_module, "PING_CONNECTED_S", 0.05)
    monkeypatch.setattr(redis_link_module, "PING_LOST_S", 0.05)
    heard: list[str] = []
    link.on_reconnect(lambda: heard.append("back"))
    link.start()

    await wait_until(lambda: link.connected)
    heard.clear()  # the first connection is not what this test is about
    with redis_server.stopped():
        await wait_until(lambda: not link.connected)
        assert link.status()["error"]
    await wait_until(lambda: link.connected)
    assert heard == ["back"]
    started = time.monotonic()
    await link.close()
    assert time.monotonic() - started < 1


# -- what the log says ----------------------------------------------------------------------------


def link_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "server.state.redis.link"]


async def test_unreachable_at_start_is_one_line_however_often_it_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    link = RedisLink(
        f"redis://:hunter2@127.0.0.1:{port}/0", prefix=fresh_prefix(), timeout_s=TIMEOUT_S
    )
    caplog.set_level(logging.INFO, logger="server.state.redis.link")
    try:
        for _ in range(3):
            await expect_unavailable(link, link.client.ping())
    finally:
        await link.close()
    (line,) = link_lines(caplog)
    assert line.startswith(f"Redis at 127.0.0.1:{port} is unreachable at start (")
    assert "hunter2" not in line  # never the URL, which may hold a password


async def test_lost_and_back_are_one_line_each(
    link: RedisLink, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="server.state.redis.link")
    await link.run(link.client.ping())
    assert link_lines(caplog) == []  # the first connection says nothing
    with redis_server.stopped():
        for _ in range(3):
            await expect_unavailable(link, link.client.ping())
    await link.run(link.client.ping())
    await link.run(link.client.ping())
    where = f"127.0.0.1:{redis_server.port}"
    lost, back = link_lines(caplog)
    assert lost.startswith(f"Redis at {where} is unreachable (")
    assert back == f"Redis at {where} answers again; shared state is back"


async def test_a_ping_three_quarters_of_the_timeout_late_is_not_answering(link: RedisLink) -> None:
    # What /readyz reads: a stall shows before any operation times out (issue 35; the whole
    # path, a SIGSTOPped redis-server, is the last test here).
    await link.run(link.client.ping())
    assert link.answering
    link._ping_since = time.monotonic()  # a ping just sent: not late
    assert link.answering
    link._ping_since = time.monotonic() - link.timeout_s * 0.8
    assert not link.answering
    assert link.status()["connected"] is True
    assert "has not answered a ping" in link.status()["error"]
    link._ping_since = None  # answered
    assert link.answering
    assert link.status() == {"connected": True}


# -- the whole path: /readyz and requests of a real server under a stalled redis-server ----------

# The server's MCP_REDIS_TIMEOUT_S, and what the shared CPU may add to a deadline (a busy machine
# schedules late, not early). The test's own redis-server, stopped by its PID and always continued.
SERVER_REDIS_TIMEOUT_S = 1.0
MARGIN_S = 0.4


def test_a_stalled_redis_is_a_503_and_not_ready_within_the_redis_timeout(tmp_path: Path) -> None:
    redis = RedisServer().start()
    server = ServerProcess(
        tmp_path,
        MCP_REDIS_URL=redis.url,
        MCP_STATE_SECRET=secrets.token_urlsafe(32),
        MCP_REDIS_TIMEOUT_S=str(SERVER_REDIS_TIMEOUT_S),
    )
    assert redis.process is not None
    try:
        server.start(timeout=20)
        with httpx.Client(base_url=server.url, timeout=10) as client:
            deadline = time.monotonic() + 10
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "never ready"
                time.sleep(0.05)
            answer = client.post("/mcp", json=INITIALIZE, headers=legacy_headers())
            assert answer.status_code == 200, answer.text
            session = answer.headers["mcp-session-id"]

            os.kill(redis.process.pid, signal.SIGSTOP)
            try:
                stalled = time.monotonic()
                # Readiness first, with no request to notice the stall for it.
                while (ready := client.get("/readyz")).status_code == 200:
                    assert time.monotonic() - stalled < 10, "still ready 10 s into the stall"
                    time.sleep(0.05)
                not_ready_s = time.monotonic() - stalled
                assert ready.status_code == 503
                assert ready.json()["redis"]["error"]
                # Requests that need Redis: a new session, and one on an existing session.
                answers = []
                for body, headers in (
                    (INITIALIZE, legacy_headers()),
                    ({"jsonrpc": "2.0", "id": 2, "method": "ping"}, legacy_headers(session)),
                ):
                    started = time.monotonic()
                    failed = client.post("/mcp", json=body, headers=headers)
                    answers.append((failed.status_code, time.monotonic() - started))
                    assert failed.headers.get("retry-after"), failed.headers
            finally:
                os.kill(redis.process.pid, signal.SIGCONT)
        assert [status for status, _ in answers] == [503, 503]
        late = (
            [f"/readyz 200 for {not_ready_s:.2f} s"]
            if not_ready_s > SERVER_REDIS_TIMEOUT_S + MARGIN_S
            else []
        )
        late += [
            f"a 503 after {took:.2f} s"
            for _, took in answers
            if took > SERVER_REDIS_TIMEOUT_S + MARGIN_S
        ]
        assert not late, f"{late}: more than MCP_REDIS_TIMEOUT_S={SERVER_REDIS_TIMEOUT_S}"
    finally:
        if redis.process is not None:
            os.kill(redis.process.pid, signal.SIGCONT)
        server.stop()
        redis.close()
