"""1,000 requests carrying distinct 1 MiB values leave the server's memory where it was.

A real ``python -m server`` (probe catalog, records to a file, no rate limit), with the header
limits raised to 2 MiB so that the values reach everything that remembers request values
(Host and Origin verdicts, the records' memos, the privacy verdicts of params keys; by default
the server's protocol refuses such a head with 431 before reading it). After a warm-up of the
same shapes with small values, 250 requests each with a distinct 1 MiB ``Host``, ``Origin``,
``User-Agent`` and ``tools/call`` argument key; ``VmRSS`` (``/proc/<pid>/status``) must end
within 50 MiB of where it started. Before every cache of request values was bounded in bytes,
the same requests pinned about a gigabyte.
"""

import json
from pathlib import Path

import httpx
import pytest

from tests.support.deploy_helpers import ServerProcess, modern, modern_headers

MIB = 1024 * 1024
EACH = 250  # of four kinds: 1,000 requests
LIMIT_MIB = 50


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def send_all(client: httpx.Client, count: int, size: int) -> list[int]:
    statuses = []
    for number in range(count):
        value = f"{number:06d}" + "x" * (size - 6)
        call = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, number)
        headers = modern_headers(call)
        for extra in ({"Host": value}, {"Origin": "http://" + value}, {"User-Agent": value}):
            response = client.post("/mcp", content=json.dumps(call), headers=headers | extra)
            statuses.append(response.status_code)
        keyed = modern("tools/call", {"name": "echo", "arguments": {"text": "hi", value: 1}})
        response = client.post("/mcp", content=json.dumps(keyed), headers=modern_headers(keyed))
        statuses.append(response.status_code)
    return statuses


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.timeout(300)  # 1 GiB of requests: half a minute on a quiet machine
def test_1000_requests_with_1_mib_values_leave_rss_within_50_mib(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(tmp_path / "records.jsonl"),
        MCP_RATE_LIMIT_RPS="0",
        MCP_DRAIN_TIMEOUT_S="5",
        MCP_MAX_HEADER_BYTES=str(2 * MIB),
        MCP_MAX_HEADER_VALUE_BYTES=str(2 * MIB),
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            warm = send_all(client, 20, 1000)
            assert set(warm) == {200, 403}, warm
            before = rss_mib(server.pid)
            statuses = send_all(client, EACH, MIB)
            after = rss_mib(server.pid)
        assert statuses.count(403) == 2 * EACH  # Host and Origin refused, the rest answered
        assert statuses.count(200) == 2 * EACH
        assert after - before < LIMIT_MIB, f"RSS {before:.0f} -> {after:.0f} MiB"
    finally:
        server.stop()
