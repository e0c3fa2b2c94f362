"""Do the per-client rate limits hold under load, without hurting the clients that behave?

    python tests/bench/limits_load.py                 # 10 s alone, then 10 s beside the greedy
    python tests/bench/limits_load.py --seconds 5     # shorter phases

Starts ``python -m server`` (probe catalog, 127.0.0.1, a free port, request records off) with
``MCP_AUTH=tokens`` and two static tokens, so the two clients are two subjects although they
share the loopback address; ``MCP_RATE_LIMIT_EXEMPT`` is empty so loopback is limited too, at
``MCP_RATE_LIMIT_RPS=20`` with ``MCP_RATE_LIMIT_BURST=40``. Both clients send modern
``tools/call`` requests of ``echo`` over keep-alive HTTP/1.1 connections (a small client on
asyncio streams, so client overhead stays far below the server's):

- the **polite** client sends 15 requests per second (under its limit of 20) on one connection and
  times each one: first alone (the baseline), then while the greedy client runs;
- the **greedy** client runs in its own process (``--greedy``), as fast as ``--connections``
  (8) connections allow, for the second phase only.

With ``taskset`` available the server is pinned to CPU 0 and both clients to CPU 1, so the
clients do not steal the server's CPU. Prints the greedy client's 200s and 429s (and whether
every 429 carried ``Retry-After`` and a JSON-RPC error body), its accepted rate against the
limit, and the polite client's latency p50/p99/max alone and beside the greedy one. Fails (exit
1) if the polite client got anything but 200, if any 429 lacked ``Retry-After``, or if the
greedy client got more than the limit allows.

Bounded: under a minute (two phases of ``--seconds``, at most 20 s each, plus start-up), 127.0.0.1
only; the server and the greedy process (the only processes this script starts) are stopped
by their PIDs on every exit path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RATE, BURST = 20, 40
POLITE_RPS = 15
VERSION = "2026-07-28"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def request_bytes(port: int, token: str, n: int) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": {"text": "hi"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json\r\nMCP-Protocol-Version: {VERSION}\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection; reconnects if the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def exchange(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            assert self.reader is not None
            try:
                self.writer.write(raw)
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
                continue
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection", "").lower() == "close":
                self.close()
            return status, headers, body
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# -- the greedy client (its own process) --------------------------------------------------------


async def greedy(port: int, token: str, seconds: float, connections: int) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    retry_after: Counter[str] = Counter()
    missing_retry_after = 0
    bad_bodies = 0
    deadline = time.monotonic() + seconds

    async def loop(worker: int) -> None:
        nonlocal missing_retry_after, bad_bodies
        connection = Connection(port)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            status, headers, body = await connection.exchange(request_bytes(port, token, n))
            statuses[status] += 1
            if status == 429:
                if "retry-after" in headers:
                    retry_after[headers["retry-after"]] += 1
                else:
                    missing_retry_after += 1
                error = json.loads(body).get("error", {})
                if error.get("code") != -32000 or error.get("data", {}).get("limit") != "rate":
                    bad_bodies += 1
        connection.close()

    started = time.monotonic()
    await asyncio.gather(*(loop(worker) for worker in range(connections)))
    return {
        "seconds": time.monotonic() - started,
        "statuses": {str(status): count for status, count in statuses.items()},
        "retry_after": dict(retry_after),
        "missing_retry_after": missing_retry_after,
        "bad_bodies": bad_bodies,
    }


# -- the polite client --------------------------------------------------------------------------


async def polite(port: int, token: str, seconds: float) -> tuple[list[float], Counter[int]]:
    connection = Connection(port)
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    interval = 1 / POLITE_RPS
    start = time.monotonic()
    for n in range(int(seconds * POLITE_RPS)):
        await asyncio.sleep(max(0.0, start + n * interval - time.monotonic()))
        sent = time.perf_counter()
        status, _, _ = await connection.exchange(request_bytes(port, token, n))
        latencies.append((time.perf_counter() - sent) * 1000)
        statuses[status] += 1
    connection.close()
    return latencies, statuses


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies: list[float]) -> str:
    return (
        f"p50 {statistics.median(latencies):6.2f} ms   p99 {percentile(latencies, 0.99):6.2f} ms"
        f"   max {max(latencies):6.2f} ms   ({len(latencies)} requests)"
    )


# -- processes ----------------------------------------------------------------------------------


def pinned(cpu: int, command: list[str]) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu), *command]
    return command


@contextlib.contextmanager
def running_server(port: int, digests: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("MCP_")},
        "PYTHONPATH": str(ROOT),
        "MCP_HOST": "127.0.0.1",
        "MCP_PORT": str(port),
        "MCP_CATALOG": "probe",
        "MCP_RECORDS": "none",
        "MCP_LOG_LEVEL": "warning",
        "MCP_AUTH": "tokens",
        "MCP_AUTH_TOKENS": ",".join(digests),
        "MCP_RATE_LIMIT_RPS": str(RATE),
        "MCP_RATE_LIMIT_BURST": str(BURST),
        "MCP_RATE_LIMIT_EXEMPT": "",
    }
    with tempfile.TemporaryDirectory(prefix="limits-load-") as workdir:
        process = subprocess.Popen(
            pinned(0, [sys.executable, "-m", "server"]), cwd=workdir, env=env
        )
        try:
            deadline = time.monotonic() + 15
            while True:
                assert process.poll() is None, "the server exited during start-up"
                assert time.monotonic() < deadline, "the server did not start"
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), timeout=0.2),
                ):
                    break
                time.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def main_async(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    from server.security.auth import new_token

    (polite_token, polite_digest), (greedy_token, greedy_digest) = new_token(), new_token()
    port = free_port()
    print(
        f"server: python -m server, probe catalog, MCP_AUTH=tokens, MCP_RATE_LIMIT_RPS={RATE}, "
        f"MCP_RATE_LIMIT_BURST={BURST}, MCP_RATE_LIMIT_EXEMPT=(empty)"
    )
    print(
        f"polite: {POLITE_RPS} req/s on 1 connection; greedy: as fast as {args.connections} "
        f"connections go; {args.seconds:g} s per phase"
    )
    with running_server(port, [polite_digest, greedy_digest]):
        await polite(port, polite_token, 1.0)  # warm-up
        alone, alone_statuses = await polite(port, polite_token, args.seconds)
        command = [
            sys.executable,
            __file__,
            "--greedy",
            str(port),
            greedy_token,
            str(args.seconds),
            str(args.connections),
        ]
        greedy_process = await asyncio.create_subprocess_exec(
            *pinned(1, command), stdout=asyncio.subprocess.PIPE
        )
        try:
            beside, beside_statuses = await polite(port, polite_token, args.seconds)
            output, _ = await asyncio.wait_for(greedy_process.communicate(), 60)
        finally:
            if greedy_process.returncode is None:
                greedy_process.kill()
                await greedy_process.wait()
    result = json.loads(output)
    statuses = {int(status): count for status, count in result["statuses"].items()}
    ok, limited = statuses.get(200, 0), statuses.get(429, 0)
    total = sum(statuses.values())
    allowed = BURST + RATE * result["seconds"]
    print()
    print(f"greedy client ({result['seconds']:.1f} s):")
    print(f"  requests           {total:7d}  ({total / result['seconds']:.0f} req/s)")
    print(f"  200                {ok:7d}  ({ok / result['seconds']:.1f} req/s accepted;")
    print(f"                              burst + rate x time allows {allowed:.0f})")
    print(f"  429                {limited:7d}")
    others = {status: count for status, count in statuses.items() if status not in (200, 429)}
    if others:
        print(f"  other statuses     {others}")
    print(
        f"  Retry-After        on {limited - result['missing_retry_after']} of {limited} 429s "
        f"(values: {result['retry_after']}); JSON-RPC error body on "
        f"{limited - result['bad_bodies']} of {limited}"
    )
    print()
    print("polite client:")
    print(f"  alone              {summary(alone)}   statuses {dict(alone_statuses)}")
    print(f"  beside the greedy  {summary(beside)}   statuses {dict(beside_statuses)}")
    problems = []
    if set(alone_statuses) != {200} or set(beside_statuses) != {200}:
        problems.append("the polite client got something other than 200")
    if result["missing_retry_after"] or result["bad_bodies"]:
        problems.append("a 429 lacked Retry-After or its JSON-RPC error body")
    if ok > allowed + RATE:  # one second of slack for timing at the edges
        problems.append(
            f"the greedy client got {ok} requests through, the limit allows {allowed:.0f}"
        )
    if not limited:
        problems.append("the greedy client was never limited")
    for problem in problems:
        print("FAIL:", problem)
    if not problems:
        print("\nPASS: the greedy client was held to its rate; the polite client got every answer")
    return 1 if problems else 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--greedy":
        port, token, seconds, connections = sys.argv[2:6]
        result = asyncio.run(greedy(int(port), token, float(seconds), int(connections)))
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--connections", type=int, default=8, help="greedy connections")
    args = parser.parse_args()
    args.seconds = max(1.0, min(args.seconds, 20.0))
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
