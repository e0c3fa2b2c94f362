"""A client with an 8 MiB ``User-Agent`` cannot rotate other requests' records out of the files.

A real ``python -m server`` (probe catalog, file sink that rotates past 16 MiB into two backups)
answers 200 ordinary requests, each with a marked ``User-Agent``, then 60 requests whose
``User-Agent`` is a distinct 8 MiB value, paced so that the records writer (it wakes every
200 ms) writes them in several batches, as a patient client would get. After SIGTERM (to that
PID only) the records files must still hold every one of the 200 marked records, and each of the
60 records with the user agent clipped. Before user agents were clipped in records, each such
record was 8 MiB and every batch rotated the files: the marked records were gone.

The header limits are raised to 16 MiB here (MCP_MAX_HEADER_BYTES, MCP_MAX_HEADER_VALUE_BYTES),
so the 8 MiB values reach the endpoint and its records; by default the server's protocol
refuses such a head with 431 before it is read (tests/serving/test_uvicorn_protocol.py).
"""

import gzip
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx

from server.records.schema import MAX_CLIENT_STRING
from tests.support.deploy_helpers import ServerProcess, modern, modern_headers

NORMAL = 200
BIG = 60
EIGHT_MIB = 8 * 1024 * 1024
MARK = "marked-client/1.0 #"
PAUSE_S = 0.25  # after every tenth big request: more than the writer's 200 ms between batches


def read_all_records(directory: Path) -> list[dict[str, Any]]:
    """Every record in the live file and its rotated ones (plain or gzipped), oldest last."""
    records: list[dict[str, Any]] = []
    for path in sorted(directory.glob("records.jsonl*")):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        records.extend(json.loads(line) for line in data.splitlines() if line.strip())
    return records


def test_8_mib_user_agents_leave_earlier_records_in_the_files(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(tmp_path / "records.jsonl"),
        MCP_RECORDS_MAX_BYTES=str(16 * 1024 * 1024),
        MCP_RECORDS_BACKUPS="2",
        MCP_RECORDS_COMPRESS="false",
        MCP_RATE_LIMIT_RPS="0",
        MCP_DRAIN_TIMEOUT_S="5",
        MCP_MAX_HEADER_BYTES=str(16 * 1024 * 1024),
        MCP_MAX_HEADER_VALUE_BYTES=str(16 * 1024 * 1024),
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for number in range(NORMAL):
                call = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, number)
                headers = {**modern_headers(call), "User-Agent": f"{MARK}{number}"}
                response = client.post("/mcp", content=json.dumps(call), headers=headers)
                assert response.status_code == 200, response.text
            statuses = []
            for number in range(BIG):
                discover = modern("server/discover", id=number)
                # Distinct values, so that nothing can be shared between the records.
                agent = f"{number:04d}" + "X" * (EIGHT_MIB - 4)
                headers = {**modern_headers(discover), "User-Agent": agent}
                response = client.post("/mcp", content=json.dumps(discover), headers=headers)
                statuses.append(response.status_code)
                if number % 10 == 9:
                    # Several batches for the writer, each of which would rotate the files if
                    # its records were megabytes.
                    time.sleep(PAUSE_S)
            assert set(statuses) == {200}, statuses
        server.terminate()
        assert server.process is not None
        # uvicorn re-raises the SIGTERM it caught once its shutdown is complete.
        assert server.process.wait(20) in (0, -signal.SIGTERM), server.log()
    finally:
        server.stop()
    records = read_all_records(tmp_path)
    marked = {
        record["user_agent"]
        for record in records
        if (record["user_agent"] or "").startswith(MARK) and record["kind"] == "request"
    }
    assert marked == {f"{MARK}{number}" for number in range(NORMAL)}
    big = [
        record
        for record in records
        if record["user_agent"] and record["user_agent"].endswith(f"{EIGHT_MIB} chars]")
    ]
    assert len(big) == BIG
    for number, record in enumerate(sorted(big, key=lambda record: record["user_agent"])):
        clipped = f"{number:04d}" + "X" * (MAX_CLIENT_STRING - 4)
        assert record["user_agent"] == f"{clipped}…[truncated, {EIGHT_MIB} chars]"
    total = sum(path.stat().st_size for path in tmp_path.glob("records.jsonl*"))
    assert total < 1024 * 1024
