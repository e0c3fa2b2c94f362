"""Streams benchmark: memory per idle ``subscriptions/listen`` stream, and list-change fan-out.

    python tests/bench/streams_bench.py [--streams 10000] [--fanout 1000] [--triggers 5]

Starts ``python -m server`` (probe catalog, 127.0.0.1, a free port, ``MCP_RECORDS=none`` unless
``--records file``), pinned to one CPU with ``taskset``, this client pinned to the other. The
client is lean: one asyncio protocol per stream (uvloop when installed), raw HTTP/1.1 on a
plain socket, no HTTP library. The file-descriptor limit is raised for this process (and so for
the server, which inherits it).

1. Memory: after a warm-up (a few streams opened, notified and closed), the server's VmRSS is
   read; then ``--streams`` listen streams (``toolsListChanged``) are opened, each counted only
   once its ``notifications/subscriptions/acknowledged`` frame arrived; after a pause, VmRSS
   again: (after - before) / streams is the cost of one idle stream.
2. Fan-out to every open stream: one list change (a ``tools/call`` of ``toggle_extra_tool`` on
   its own connection; the clock starts just before the request is written), and the time
   until ``notifications/tools/list_changed`` arrives on each stream.
3. Fan-out to ``--fanout`` streams: every stream beyond the first ``--fanout`` is closed, then
   ``--triggers`` list changes, one at a time; latencies over every (stream, change) pair.
   Each must arrive on every stream, exactly once per change.

Times are taken in this client's event loop when it reads each socket, so they include the
client's own time to go through the ready sockets one by one (an upper bound on the server's).
The first change after the mass close is reported on its own line. Prints the numbers; fails
(exit 1) if a stream missed a notification or got one twice. Only the server this script
started is stopped, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
ACK = b"notifications/subscriptions/acknowledged"
CHANGED = b"notifications/tools/list_changed"
OPEN_CONCURRENCY = 200


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def request_bytes(
    port: int, method: str, body: dict[str, object], accept: str, name: str = ""
) -> bytes:
    payload = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Accept: {accept}",
        f"MCP-Protocol-Version: {MODERN}",
        f"Mcp-Method: {method}",
        f"Content-Length: {len(payload)}",
    ]
    if name:
        headers.append(f"Mcp-Name: {name}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + payload


def listen_request(port: int, number: int) -> bytes:
    body: dict[str, object] = {
        "jsonrpc": "2.0",
        "id": f"listen-{number}",
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}, "_meta": META},
    }
    return request_bytes(port, "subscriptions/listen", body, "text/event-stream")


def trigger_request(port: int, number: int) -> bytes:
    body: dict[str, object] = {
        "jsonrpc": "2.0",
        "id": f"toggle-{number}",
        "method": "tools/call",
        "params": {"name": "toggle_extra_tool", "arguments": {}, "_meta": META},
    }
    return request_bytes(port, "tools/call", body, "application/json", name="toggle_extra_tool")


def describe_checkout(root: Path) -> str:
    """The commit measured, and whether server/ had uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%h %cs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "server"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    state = f", {len(changed)} uncommitted changes in server/" if changed else ", server/ clean"
    return f"{root} at {head}{state}"


class ListenStream(asyncio.Protocol):
    """One open listen stream: waits for its ack, then timestamps every list_changed frame."""

    def __init__(self, request: bytes, acked: asyncio.Future[None]) -> None:
        self.request = request
        self.acked = acked
        self.transport: asyncio.Transport | None = None
        self.tail = b""  # the end of what came before, so a marker split over reads is found
        self.head = b""
        self.arrivals: list[float] = []
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        transport.write(self.request)  # type: ignore[attr-defined]  # a stream transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.acked.done():
            self.head += data
            if not self.head.startswith(b"HTTP/1.1 200"[: len(self.head)]):
                self.acked.set_exception(RuntimeError(f"not a stream: {self.head[:300]!r}"))
            elif ACK in self.head:
                self.acked.set_result(None)
                self.tail = self.head[-64:]
                self.head = b""
            return
        window = self.tail + data
        self.arrivals.extend(now for _ in range(window.count(CHANGED)))
        self.tail = window[-64:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.acked.done():
            self.acked.set_exception(ConnectionError(f"closed before the ack: {self.head[:300]!r}"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Server:
    def __init__(
        self, port: int, directory: Path, records: str, pin: list[str], root: Path = ROOT
    ) -> None:
        self.port = port
        env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
        env.update(
            {
                "MCP_HOST": "127.0.0.1",
                "MCP_PORT": str(port),
                "MCP_CATALOG": "probe",
                "MCP_LOG_LEVEL": "warning",
                "MCP_RECORDS": records,
                "MCP_RECORDS_FILE": str(directory / "records.jsonl"),
                "MCP_SHUTDOWN_GRACE_S": "1",
                "MCP_DRAIN_TIMEOUT_S": "2",
                # one client opens every stream: the per-client caps stay on (their cost is
                # measured) but so high they never refuse
                "MCP_MAX_STREAMS_PER_CLIENT": "1000000",
                "MCP_RATE_LIMIT_RPS": "1000000000",
                "MCP_RATE_LIMIT_BURST": "1000000000",
                "PYTHONPATH": str(root),
            }
        )
        self.log = directory / "server.log"
        with self.log.open("wb") as handle:
            self.process = subprocess.Popen(
                [*pin, sys.executable, "-m", "server"],
                cwd=directory,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, limit: float = 20.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{self.port}/readyz"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def quiet(self, limit_s: float = 60.0) -> float:
        """Wait until the server stops working (under 2% of a CPU for half a second, twice);
        returns the seconds waited."""
        started = time.monotonic()
        calm = 0
        last = self.cpu_seconds()
        while calm < 2 and time.monotonic() - started < limit_s:
            await asyncio.sleep(0.5)
            now = self.cpu_seconds()
            calm = calm + 1 if now - last < 0.01 else 0
            last = now
        return time.monotonic() - started

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self) -> None:
        """SIGTERM to this server's PID; SIGKILL to the same PID if it does not exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


class Client:
    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: list[ListenStream] = []
        self.triggers = 0

    async def open_streams(self, count: int, limit_s: float) -> float:
        """Open ``count`` streams, each acknowledged; returns the seconds it took."""
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(OPEN_CONCURRENCY)
        started = time.perf_counter()

        async def one(number: int) -> None:
            async with gate:
                acked: asyncio.Future[None] = loop.create_future()
                stream = ListenStream(listen_request(self.port, number), acked)
                await loop.create_connection(lambda: stream, "127.0.0.1", self.port)
                self.streams.append(stream)
                await asyncio.wait_for(acked, limit_s)

        base = len(self.streams)
        await asyncio.gather(*(one(base + n) for n in range(count)))
        return time.perf_counter() - started

    async def trigger(self, streams: list[ListenStream], limit_s: float) -> list[float]:
        """One list change; the latency (ms) to each of ``streams``, when all have it."""
        before = [len(s.arrivals) for s in streams]
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        request = trigger_request(self.port, self.triggers)
        self.triggers += 1
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        answer = await reader.readexactly(length)
        answered = time.perf_counter()
        writer.close()
        if not head.startswith(b"HTTP/1.1 200") or b'"isError":true' in answer:
            raise RuntimeError(f"trigger failed: {head!r} {answer!r}")
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if all(len(s.arrivals) > n for s, n in zip(streams, before, strict=True)):
                break
            await asyncio.sleep(0.005)
        missing = sum(len(s.arrivals) <= n for s, n in zip(streams, before, strict=True))
        if missing:
            raise RuntimeError(f"{missing} of {len(streams)} streams missed the list change")
        doubled = sum(len(s.arrivals) > n + 1 for s, n in zip(streams, before, strict=True))
        if doubled:
            raise RuntimeError(f"{doubled} streams got the list change more than once")
        print(f"    trigger answered after {(answered - started) * 1000:.2f} ms", flush=True)
        return [(s.arrivals[n] - started) * 1000 for s, n in zip(streams, before, strict=True)]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def describe(latencies: list[float]) -> str:
    return (
        f"p50 {percentile(latencies, 0.50):.2f} ms, p99 {percentile(latencies, 0.99):.2f} ms, "
        f"max {max(latencies):.2f} ms, mean {statistics.fmean(latencies):.2f} ms "
        f"({len(latencies)} arrivals)"
    )


def raise_fd_limit(needed: int) -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        with contextlib.suppress(ValueError, OSError):  # only root may raise the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
            return needed, needed
    target = needed if hard == resource.RLIM_INFINITY else min(hard, max(soft, needed))
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def bench(args: argparse.Namespace, server: Server) -> int:
    client = Client(server.port)
    # warm-up: open, notify and close a few streams, so first-use costs are not counted
    await client.open_streams(50, 30)
    await client.trigger(client.streams, 10)
    for stream in client.streams:
        stream.close()
    client.streams.clear()
    await server.quiet()
    before = server.rss_kib()
    fds_before = server.open_fds()
    took = await client.open_streams(args.streams, 60)
    print(f"opened {args.streams} listen streams in {took:.1f} s (all acknowledged)", flush=True)
    await asyncio.sleep(args.settle)
    await server.quiet()
    after = server.rss_kib()
    fds = server.open_fds() - fds_before
    per_stream = (after - before) / args.streams
    print(
        f"server RSS: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB with "
        f"{args.streams} idle streams ({fds} more open fds): {per_stream:.2f} KiB per stream",
        flush=True,
    )
    print(f"list change to all {len(client.streams)} open streams:", flush=True)
    everyone = await client.trigger(client.streams, 30)
    print(f"  {describe(everyone)}", flush=True)

    keep = client.streams[: args.fanout]
    for stream in client.streams[args.fanout :]:
        stream.close()
    await asyncio.sleep(0.5)
    busy = await server.quiet()
    print(
        f"closed {len(client.streams) - len(keep)} streams; the server was busy for "
        f"{busy + 0.5:.1f} s; its RSS now {server.rss_kib() / 1024:.1f} MiB, "
        f"{server.open_fds()} open fds",
        flush=True,
    )
    client.streams = keep
    # The first change after the mass close is reported on its own: it shows what the closed
    # streams still cost the server (a stall here is a finding, not noise).
    first = await client.trigger(keep, 30)
    print(f"first list change after the close, to {len(keep)} streams: {describe(first)}")
    await server.quiet()
    print(f"list changes to {len(keep)} streams, {args.triggers} times:", flush=True)
    fanout: list[float] = []
    for _ in range(args.triggers):
        one = await client.trigger(keep, 30)
        print(f"  {describe(one)}", flush=True)
        fanout.extend(one)
        await server.quiet()
    print(f"fan-out to {len(keep)} streams, {args.triggers} changes: {describe(fanout)}")
    print(
        f"summary: {per_stream:.2f} KiB per idle stream at {args.streams} streams "
        f"(target <= 12); fan-out to {len(keep)} streams p50 {percentile(fanout, 0.5):.2f} ms, "
        f"p99 {percentile(fanout, 0.99):.2f} ms (target p99 < 100); first change after "
        f"closing {args.streams - len(keep)} streams p99 {percentile(first, 0.99):.2f} ms; "
        f"to all {args.streams} p99 {percentile(everyone, 0.99):.2f} ms"
    )
    for stream in keep:
        stream.close()
    await asyncio.sleep(0.5)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10000, help="idle streams to open")
    parser.add_argument("--fanout", type=int, default=1000, help="streams for the fan-out")
    parser.add_argument("--triggers", type=int, default=5, help="list changes in the fan-out")
    parser.add_argument("--settle", type=float, default=2.0, help="pause before reading RSS (s)")
    parser.add_argument("--records", choices=["none", "file"], default="none")
    parser.add_argument(
        "--server-root", default=str(ROOT), help="the checkout whose server/ to measure"
    )
    args = parser.parse_args()
    args.fanout = min(args.fanout, args.streams)
    started = time.monotonic()
    limits = raise_fd_limit(args.streams + 1024)
    if limits[0] < args.streams + 100:
        print(f"file-descriptor limit {limits[0]} is too low for {args.streams} streams")
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    server_pin: list[str] = []
    if shutil.which("taskset") and len(cpus) >= 2:
        server_pin = ["taskset", "-c", str(cpus[1])]
        os.sched_setaffinity(0, {cpus[0]})
    try:
        import uvloop

        runner: Any = uvloop.run
        loop_name = "uvloop"
    except ImportError:
        runner = asyncio.run
        loop_name = "asyncio"
    print(
        f"fd limit {limits[0]}; server {' '.join(server_pin) or 'unpinned'}, client on CPU "
        f"{cpus[0] if server_pin else 'any'} ({loop_name}); records {args.records}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="streams-bench-") as temp:
        root = Path(args.server_root).resolve()
        print(f"measuring {describe_checkout(root)}", flush=True)
        server = Server(free_port(), Path(temp), args.records, server_pin, root)
        try:
            server.wait_ready()
            code = runner(bench(args, server))
        finally:
            server.stop()
    print(f"elapsed: {time.monotonic() - started:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
