"""Benchmark: how soon the live report shows a request, with the server under steady load.

Starts ``python -m server`` (``MCP_REPORT_LIVE=true``, records to a file in a temporary
directory) and drives it at a steady rate (default 1,000 requests/s: modern ``tools/call`` of
``echo``, raw HTTP/1.1 over 16 keep-alive connections). Every half second it sends one marker
request with a client name of its own and polls ``/admin/report?format=json`` until that client
shows, and prints the lag (p50, p95, max) against the 2 s target, the rate really achieved, and how
long a report took to fetch. Exits 1 if a marker took longer than the limit.

    python tests/bench/live_report_lag.py [--rate 1000] [--seconds 20] [--limit 2.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"


def call(name: str) -> tuple[dict[str, str], bytes]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": meta},
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    return headers, json.dumps(body).encode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def load(port: int, rate: float, stop: asyncio.Event, sent: list[int]) -> None:
    """Raw HTTP/1.1 over keep-alive connections (a client library costs more CPU than the
    server's answer, on a machine the server shares), paced to ``rate`` in all."""
    headers, body = call("load")
    request = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        + f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    workers = 16
    interval = workers / rate

    async def worker(offset: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        next_at = time.monotonic() + offset
        while not stop.is_set():
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            sent[0] += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        writer.close()

    await asyncio.gather(*(worker(i * interval / workers) for i in range(workers)))


async def markers(url: str, seconds: float, lags: list[float], fetches: list[float]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        deadline = time.monotonic() + seconds
        number = 0
        while time.monotonic() < deadline:
            number += 1
            name = f"marker-{number}"
            headers, body = call(name)
            await client.post("/mcp", content=body, headers=headers)
            sent = time.monotonic()
            while True:
                started = time.monotonic()
                document = (await client.get("/admin/report", params={"format": "json"})).json()
                fetches.append(time.monotonic() - started)
                if any(c["name"] == name for c in document["clients"]):
                    lags.append(time.monotonic() - sent)
                    break
                if time.monotonic() - sent > 30:
                    lags.append(float("inf"))
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - sent)))


async def run(
    url: str, port: int, rate: float, seconds: float
) -> tuple[list[float], list[float], float]:
    stop = asyncio.Event()
    sent = [0]
    lags: list[float] = []
    fetches: list[float] = []
    loader = asyncio.create_task(load(port, rate, stop, sent))
    await asyncio.sleep(2)  # let the load settle
    started, before = time.monotonic(), sent[0]
    await markers(url, seconds, lags, fetches)
    achieved = (sent[0] - before) / (time.monotonic() - started)
    stop.set()
    await loader
    return lags, fetches, achieved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="load, requests per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to send markers")
    parser.add_argument("--limit", type=float, default=2.0, help="seconds a marker may take")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **os.environ,
            "MCP_PORT": str(port),
            "MCP_REPORT_LIVE": "true",
            "MCP_RECORDS": "file",
            "MCP_RECORDS_FILE": str(Path(scratch) / "records.jsonl"),
            "MCP_RATE_LIMIT_RPS": "0",
            "MCP_LOG_LEVEL": "warning",
        }
        server = subprocess.Popen([sys.executable, "-m", "server"], cwd=ROOT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                time.sleep(0.1)
            lags, fetches, achieved = asyncio.run(run(url, port, args.rate, args.seconds))
        finally:
            server.terminate()
            server.wait(30)
    ordered = sorted(lags)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    print(f"load: {achieved:,.0f} requests/s (asked {args.rate:,.0f})")
    print(
        f"live report lag over {len(lags)} markers: p50 {statistics.median(lags):.3f} s, "
        f"p95 {p95:.3f} s, max {ordered[-1]:.3f} s (target < {args.limit:g} s)"
    )
    median, slowest = statistics.median(fetches) * 1000, max(fetches) * 1000
    print(f"report fetch: p50 {median:.1f} ms, max {slowest:.1f} ms")
    if ordered[-1] > args.limit:
        print("FAIL: a marker took longer than the limit")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
