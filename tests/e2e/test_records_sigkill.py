"""SIGKILL to ``python -m server`` loses at most the records of its last flush interval.

The real process serves the probe catalog on a free port with the file sink and a flush
interval of its own (``MCP_RECORDS_FLUSH_MS``). A burst of requests is answered (modern
``tools/call``, and rejected ones: 404); one flush interval (and a margin for a busy machine)
after the last answer, the process gets SIGKILL (that PID only): no shutdown, nothing drained.
The file must hold the record of every answered request, in whole lines: the writer hands each
batch to the kernel with ``os.write`` within the interval, so nothing waited in a buffer of the
process.
"""

from __future__ import annotations

import asyncio
import collections
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.deploy_helpers import (
    ServerProcess,
    modern,
    modern_call,
    modern_headers,
    read_records,
)

N = 1500
WORKERS = 4
FLUSH_MS = 500
MARGIN_S = 1.5  # the writer thread shares two busy CPUs with everything else


def request_for(number: int) -> tuple[dict[str, Any], int]:
    """The ``number``-th request of the burst and the status it is answered with."""
    if number % 5 == 0:
        return modern("no/such-method", id=number), 404
    return modern_call("echo", {"text": f"hi {number}"}, id=number), 200


async def burst(url: str) -> collections.Counter[int]:
    answered: collections.Counter[int] = collections.Counter()
    numbers = iter(range(N))

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for number in numbers:
                body, status = request_for(number)
                response = await client.post(
                    "/mcp", content=json.dumps(body), headers=modern_headers(body)
                )
                assert response.status_code == status, response.text
                assert response.json()["id"] == number
                answered[status] += 1

    await asyncio.gather(*(worker() for _ in range(WORKERS)))
    return answered


def test_sigkill_loses_no_record_older_than_one_flush_interval(tmp_path: Path) -> None:
    records = tmp_path / "records" / "mcp-requests.jsonl"
    server = ServerProcess(
        tmp_path,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(records),
        MCP_RECORDS_FLUSH_MS=str(FLUSH_MS),
    ).start()
    assert server.process is not None
    try:
        answered = asyncio.run(burst(server.url))
        time.sleep(FLUSH_MS / 1000 + MARGIN_S)
        server.process.send_signal(signal.SIGKILL)  # this process only, by its PID
        assert server.process.wait(10) == -signal.SIGKILL
    finally:
        server.stop()
    assert sum(answered.values()) == N

    data = records.read_bytes()
    assert data.endswith(b"\n")  # whole lines only
    requests = [record for record in read_records(records) if record["kind"] == "request"]
    assert sorted(record["jsonrpc_id"] for record in requests) == list(range(N))
    assert len({record["request_id"] for record in requests}) == N
    by_status = collections.Counter(record["status"] for record in requests)
    assert by_status == answered
