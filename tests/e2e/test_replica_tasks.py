"""Tasks across two replicas sharing Redis (``python -m server`` processes, no nginx: each request
goes to a named replica, so "started on A, seen on B" is certain).

- A task created through replica A is polled and cancelled through replica B; it settles to
  ``cancelled``, and A stopped its handler (A's catalog says so).
- A task whose replica is killed (SIGKILL: no drain, no goodbye) is reported ``failed`` through
  the other replica within the lease (``MCP_TASK_LEASE_S``, 2 s here) plus a poll.
- A replica stopped with SIGTERM fails the tasks it cannot finish within its drain time, and the
  other replica reports them so.
- Under token auth a task started through A (either era) and answered through B ran with the
  caller a direct call sees.
"""

from __future__ import annotations

import hashlib
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import mcp_client as mcp
from tests.support.deploy_helpers import legacy_headers, modern, modern_headers
from tests.support.redis_server import RedisServer
from tests.support.replicas import Replicas

LEASE_S = 2.0
TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TIMEOUT = httpx.Timeout(5.0)


@pytest.fixture
def replicas(redis_server: RedisServer, tmp_path: Any) -> Iterator[Replicas]:
    with Replicas(
        2,
        extra_env={"MCP_TASK_LEASE_S": f"{LEASE_S:g}", "MCP_DRAIN_TIMEOUT_S": "3"},
        redis=redis_server,
        nginx=False,
        workdir=tmp_path,
    ) as running:
        yield running


def send(base: str, method: str, params: dict[str, Any], id: Any = 1) -> dict[str, Any]:
    message = modern(method, params, id)
    message["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = TASKS
    headers = modern_headers(message)
    if "taskId" in params:
        headers["Mcp-Name"] = params["taskId"]
    answer = httpx.post(f"{base}/mcp", json=message, headers=headers, timeout=TIMEOUT)
    body = answer.json()
    assert "result" in body, body
    return body["result"]


def start_work(base: str, seconds: float, label: str) -> str:
    created = send(
        base, "tools/call", {"name": "work", "arguments": {"seconds": seconds, "label": label}}
    )
    assert created["resultType"] == "task", created
    return str(created["taskId"])


def status(base: str, task_id: str) -> dict[str, Any]:
    return send(base, "tasks/get", {"taskId": task_id})


def test_a_task_started_on_a_is_polled_and_cancelled_through_b(replicas: Replicas) -> None:
    a, b = replicas.replica_urls
    task_id = start_work(a, 60, "cancel-me")
    assert status(b, task_id)["status"] == "working"
    ack = send(b, "tasks/cancel", {"taskId": task_id})
    assert set(ack) == {"resultType", "_meta"}
    assert status(b, task_id)["status"] == "cancelled"
    assert status(a, task_id)["status"] == "cancelled"
    # The cancel crossed the bus: A stopped the handler it was running.
    deadline = time.monotonic() + 5
    while True:
        stopped = send(a, "tools/call", {"name": "stopped_jobs", "arguments": {}})
        if "cancel-me" in stopped["content"][0]["text"]:
            break
        assert time.monotonic() < deadline, "replica A never stopped the cancelled handler"
        time.sleep(0.05)
    # And an answer on B for a task on A: a finished one reads the same from both.
    quick = start_work(a, 0.2, "quick")
    deadline = time.monotonic() + 5
    while status(b, quick)["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert status(b, quick)["result"]["content"][0]["text"] == "quick done"


def test_a_task_whose_replica_was_killed_is_reported_failed_in_bounded_time(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls
    task_id = start_work(a, 600, "orphan")
    process = replicas.servers[0].process
    assert process is not None
    process.send_signal(signal.SIGKILL)  # this test's own replica, by its PID
    process.wait(5)
    killed = time.monotonic()
    while True:
        got = status(b, task_id)
        if got["status"] != "working":
            break
        assert time.monotonic() - killed < LEASE_S + 3, "the orphaned task stayed working"
        time.sleep(0.1)
    elapsed = time.monotonic() - killed
    print(f"reported failed {elapsed:.2f} s after SIGKILL (lease {LEASE_S:g} s)")
    assert got["status"] == "failed"
    assert got["error"]["code"] == -32603
    assert "stopped before it finished" in got["error"]["message"]
    assert elapsed <= LEASE_S + 1.5, f"reported after {elapsed:.1f} s"


def test_sigterm_fails_what_cannot_finish_and_b_reports_it(replicas: Replicas) -> None:
    a, b = replicas.replica_urls
    short = start_work(a, 0.5, "finishes")
    long = start_work(a, 600, "too-long")
    replicas.servers[0].stop()  # SIGTERM: a 3 s drain
    assert status(b, short)["status"] == "completed"
    failed = status(b, long)
    assert failed["status"] == "failed"
    assert "shut down" in failed["error"]["message"]


def test_a_task_sees_its_caller_whichever_replica_is_asked(
    redis_server: RedisServer, tmp_path: Any
) -> None:
    """Under token auth, a task started through A (either era) and answered through B ran
    with the caller a direct call sees (a 2025-11-25 task ran with none: "no authentication")."""
    token = "a-replica-test-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    env = {
        "MCP_AUTH": "tokens",
        "MCP_AUTH_TOKENS": digest,
        "MCP_AUTH_TOKEN_SCOPES": "mcp,tools:read",
        "MCP_TASK_LEASE_S": f"{LEASE_S:g}",
    }
    bearer = {"Authorization": f"Bearer {token}"}
    with Replicas(
        2,
        "tests.support.caller_catalog:catalog",
        env,
        redis=redis_server,
        nginx=False,
        workdir=tmp_path,
    ) as running:
        a, b = running.replica_urls
        message = modern("tools/call", {"name": "whoami", "arguments": {}})
        message["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = TASKS
        headers = {**modern_headers(message), **bearer}
        created = httpx.post(f"{a}/mcp", json=message, headers=headers, timeout=TIMEOUT).json()
        task_id = created["result"]["taskId"]
        deadline = time.monotonic() + 10
        while True:
            poll = modern("tasks/get", {"taskId": task_id}, 2)
            poll["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = TASKS
            headers = {**modern_headers(poll), "Mcp-Name": task_id, **bearer}
            got = httpx.post(f"{b}/mcp", json=poll, headers=headers, timeout=TIMEOUT).json()
            if got["result"]["status"] == "completed":
                break
            assert time.monotonic() < deadline, got
            time.sleep(0.05)
        modern_seen = json.loads(got["result"]["result"]["content"][0]["text"])

        opened = httpx.post(
            f"{a}/mcp",
            json=mcp.initialize(),
            headers={**legacy_headers(), **bearer},
            timeout=TIMEOUT,
        )
        session = opened.headers["mcp-session-id"]
        session_headers = {**legacy_headers(session), **bearer}
        initialized = mcp.notification("notifications/initialized")
        httpx.post(f"{a}/mcp", json=initialized, headers=session_headers, timeout=TIMEOUT)
        start = mcp.legacy("tools/call", {"name": "whoami", "arguments": {}, "task": {}}, 3)
        task = httpx.post(f"{a}/mcp", json=start, headers=session_headers, timeout=TIMEOUT)
        wait = mcp.legacy("tasks/result", {"taskId": task.json()["result"]["task"]["taskId"]}, 4)
        answered = httpx.post(f"{b}/mcp", json=wait, headers=session_headers, timeout=TIMEOUT)
        legacy_seen = json.loads(answered.json()["result"]["content"][0]["text"])
    for seen in (legacy_seen, modern_seen):
        assert seen["subject"] is not None, seen
        assert seen["subject"].startswith("token:")
        assert seen["scopes"] == ["mcp", "tools:read"]
        assert seen["client_key"] == "sub:" + seen["subject"]
