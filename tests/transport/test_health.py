"""server.transport.health: ``/readyz`` under a stalled Redis, in a real server process.

A Redis that stalls (SIGSTOP: nothing refused, nothing answered) must take the replica out of
rotation, and fail the requests that need it with 503, within ``MCP_REDIS_TIMEOUT_S`` (issue
35: /readyz stayed 200 for ~5 s and 503s took twice the timeout). The test's own redis-server,
stopped by its PID and always continued.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.deploy_helpers import INITIALIZE, ServerProcess, legacy_headers
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.slow

TIMEOUT_S = 1.0
# What the shared CPU may add to a deadline (a busy machine schedules late, not early).
MARGIN_S = 0.4


def test_a_stalled_redis_is_a_503_and_not_ready_within_the_redis_timeout(tmp_path: Path) -> None:
    redis = RedisServer().start()
    server = ServerProcess(
        tmp_path,
        MCP_REDIS_URL=redis.url,
        MCP_STATE_SECRET=secrets.token_urlsafe(32),
        MCP_REDIS_TIMEOUT_S=str(TIMEOUT_S),
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
            [f"/readyz 200 for {not_ready_s:.2f} s"] if not_ready_s > TIMEOUT_S + MARGIN_S else []
        )
        late += [f"a 503 after {took:.2f} s" for _, took in answers if took > TIMEOUT_S + MARGIN_S]
        assert not late, f"{late}: more than MCP_REDIS_TIMEOUT_S={TIMEOUT_S}"
    finally:
        if redis.process is not None:
            os.kill(redis.process.pid, signal.SIGCONT)
        server.stop()
        redis.close()
