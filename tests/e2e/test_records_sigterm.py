"""SIGTERM to ``python -m server`` loses no request record.

The real process serves the probe catalog on a free port with the file sink. A burst of mixed
requests (modern ``tools/call`` and ``tools/list``, and rejected ones: 415 and 404) is answered,
a few streaming calls are still running when SIGTERM arrives (sent to that PID only), and once
the process has exited the file must hold exactly one request record per request, each with its
own ``request_id``, plus a stream record for every streaming call: the Recorder is closed after
uvicorn has let the in-flight requests finish, and its close writes everything still queued.
"""

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.deploy_helpers import free_port
from tests.support.mcp_client import modern, modern_headers, sse_messages

ROOT = Path(__file__).resolve().parents[2]
INFO = {"name": "sigterm-test", "version": "1"}
N = 3000
IN_FLIGHT = 10  # of N: streaming calls still running when SIGTERM arrives
WORKERS = 4  # concurrent connections of the burst
STEPS = 4


def message(method: str, id: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return modern(method, params, id, client_info=INFO)


def headers(body: dict[str, Any], **extra: str) -> dict[str, str]:
    return modern_headers(body, **extra)


def request_for(number: int) -> tuple[str, dict[str, Any], dict[str, str], int]:
    """(kind, body, headers, expected status) of the ``number``-th request of the burst."""
    slot = number % 10
    if slot == 0:
        body = message("tools/list", number)
        return "415", body, headers(body, **{"Content-Type": "text/plain"}), 415
    if slot == 1:
        body = message("no/such-method", number)
        return "404", body, headers(body), 404
    if slot in (2, 3):
        body = message("tools/list", number)
        return "tools/list", body, headers(body), 200
    body = message("tools/call", number, {"name": "echo", "arguments": {"text": f"hi {number}"}})
    return "tools/call", body, headers(body), 200


async def burst(url: str, count: int) -> collections.Counter[str]:
    """``count`` requests from WORKERS clients, one connection each (httpx is fastest so)."""
    sent: collections.Counter[str] = collections.Counter()
    numbers = iter(range(count))

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for number in numbers:
                kind, body, sent_headers, status = request_for(number)
                response = await client.post("/mcp", content=json.dumps(body), headers=sent_headers)
                assert response.status_code == status, response.text
                if status == 200:
                    assert response.json()["id"] == number
                sent[kind] += 1

    await asyncio.gather(*(worker() for _ in range(WORKERS)))
    return sent


async def slow_call(client: httpx.AsyncClient, number: int, started: asyncio.Event) -> int:
    """A streaming call; sets ``started`` at its first event; returns how many it received."""
    body = message(
        "tools/call",
        number,
        {
            "name": "count_slowly",
            "arguments": {"steps": STEPS, "delay_ms": 120},
            "_meta": {"progressToken": number},
        },
    )
    received = 0
    async with client.stream(
        "POST", "/mcp", content=json.dumps(body), headers=headers(body)
    ) as response:
        assert response.status_code == 200
        async for _ in sse_messages(response):
            received += 1
            started.set()
    return received


async def drive(url: str, pid: int) -> tuple[collections.Counter[str], list[int]]:
    sent = await burst(url, N - IN_FLIGHT)
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        events = [asyncio.Event() for _ in range(IN_FLIGHT)]
        calls = [
            asyncio.create_task(slow_call(client, N - IN_FLIGHT + index, event))
            for index, event in enumerate(events)
        ]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), 5)
        os.kill(pid, signal.SIGTERM)  # that process only
        received = await asyncio.wait_for(asyncio.gather(*calls), 10)
    sent["streaming"] = IN_FLIGHT
    return sent, received


def test_sigterm_writes_one_record_per_request(tmp_path: Path) -> None:
    port = free_port()
    records = tmp_path / "records" / "mcp-requests.jsonl"
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(
        {
            "MCP_HOST": "127.0.0.1",
            "MCP_PORT": str(port),
            "MCP_CATALOG": "probe",
            "MCP_LOG_LEVEL": "warning",
            "MCP_RECORDS": "file",
            "MCP_RECORDS_FILE": str(records),
            "MCP_DRAIN_TIMEOUT_S": "10",
            "PYTHONPATH": str(ROOT),
        }
    )
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "server"], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.05)
        sent, received = asyncio.run(drive(url, process.pid))
        # uvicorn re-raises the SIGTERM it caught once its shutdown is complete.
        assert process.wait(15) in (0, -signal.SIGTERM), log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    # The streaming calls ran to the end: every progress notification and the result.
    assert received == [STEPS + 1] * IN_FLIGHT
    assert sum(sent.values()) == N

    lines = records.read_text().splitlines()
    found = [json.loads(line) for line in lines]
    requests = [record for record in found if record["kind"] == "request"]
    streams = [record for record in found if record["kind"] == "stream"]
    assert len(requests) == N
    assert len(found) == N + IN_FLIGHT
    assert len({record["request_id"] for record in requests}) == N

    by_status = collections.Counter(record["status"] for record in requests)
    assert by_status == {415: sent["415"], 404: sent["404"], 200: N - sent["415"] - sent["404"]}
    # Every request that had an id was recorded once, with that id.
    answered_ids = sorted(
        record["jsonrpc_id"] for record in requests if record["jsonrpc_id"] is not None
    )
    burst_ids = [n for n in range(N - IN_FLIGHT) if request_for(n)[0] != "415"]
    expected_ids = sorted([*burst_ids, *range(N - IN_FLIGHT, N)])
    assert answered_ids == expected_ids
    assert all(record["error"]["code"] == -32601 for record in requests if record["status"] == 404)
    assert sum(record["method"] == "tools/list" for record in requests) == sent["tools/list"]
    # The calls that were running at SIGTERM finished, and their streams were recorded.
    assert len(streams) == IN_FLIGHT
    assert {record["end"] for record in streams} == {"complete"}
    assert {record["events"] for record in streams} == {STEPS + 1}
    streamed_ids = {record["request_id"] for record in requests if record["streaming"]}
    assert {record["request_id"] for record in streams} == streamed_ids
