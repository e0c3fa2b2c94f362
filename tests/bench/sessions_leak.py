"""Do legacy sessions give their memory back when they expire?

Run from the repository root (not collected by pytest: ``addopts`` ignores ``tests/bench``)::

    python tests/bench/sessions_leak.py                  # 10,000 sessions x 2 cycles, sweep
    python tests/bench/sessions_leak.py --expiry lazy    # the request-finds-it-expired path

It starts ``python -m server`` (probe catalog, 127.0.0.1, a free port, a short idle timeout, a
session cap above what it opens, request records off) in a temporary working directory, and
reads that process's RSS from ``/proc/<pid>/status`` (``VmRSS``):

1. warm-up: a few hundred sessions that each do real work and are then DELETEd; then the
   **baseline** RSS;
2. per cycle: open ``--sessions`` legacy sessions (``initialize``, ``notifications/initialized``,
   one ``tools/call`` of ``add`` whose structured sum is checked), ``--concurrency`` at a time
   over as many keep-alive connections, and never DELETE them; the **peak** RSS is the highest
   of samples taken every 0.1 s while they are open;
3. wait until every session must have expired, then check that the server agrees: the most
   recently used ids and a random sample of the others (or every id, ``--probe-all``) must
   answer 404. The sweep ends sessions least recently used first and stops at the first one
   still in use, so the newest id gone means every older one is gone: the session count is
   back to zero, seen from outside (the server has no debug endpoint, and none is added).
   Then wait ``--settle`` s (the 404 probes allocate, so the cyclic GC gets to run) and read
   the **after-expiry** RSS.

How a cycle's sessions expire (``--expiry``):

- ``sweep`` (default): nothing touches an old id until the server's periodic sweep must have
  run (idle timeout + two sweep intervals; the server sweeps every
  ``min(30, max(0.5, timeout / 4))`` s). This is what a client that just goes away causes.
- ``lazy``: each old id is sent one ``ping`` 50 ms after its idle timeout, before the sweep gets
  to it, so the session store finds it expired on that request (``MemorySessionStore.get``)
  and answers 404. This is what a client that comes back late causes.

The idle timeout (``--idle-timeout``, 15 s) must be longer than opening one cycle's sessions
takes, or the first sessions expire before the peak is read (the run warns when that happens).

Pass or fail (exit status 1 on fail). CPython does not reliably hand freed memory back to the
OS (pymalloc frees an arena only when every object in it is gone, glibc keeps freed heap), so
an after-expiry RSS near the peak is not by itself a leak. The checks:

- **returned**: the last after-expiry RSS <= baseline + max(20 MiB, 25 % of the first cycle's
  growth); or, when that fails,
- **reused**: every later cycle's peak, and every after-expiry RSS, stay within max(4 MiB, 10 %
  of the first cycle's growth) of the first cycle's peak: what one cycle's sessions freed, the
  next one's reuse, so nothing accumulates (needs ``--cycles`` >= 2). Anything a session
  leaves behind raises every later peak: 0.4 KiB per session is 4 MiB per cycle of 10,000.
  (The expired-session runtime leak, since fixed, made ``--expiry lazy`` grow 13 MiB a cycle.)

The bulk requests go over a small keep-alive HTTP/1.1 client written on asyncio streams
(``--client raw``, the default): ``httpx`` spends about 2.3 ms of CPU per request, nine times
what the server spends, so on a small machine it measures the client and cannot open 10,000
sessions twice within the time bound. ``--client httpx`` uses ``httpx.AsyncClient`` (with the
same connection limit) for everything, for comparison at a smaller ``--sessions``.

Bounded: at most 50,000 sessions x 5 cycles, a deadline (``--deadline``, 170 s) after which the
run stops and fails, 127.0.0.1 only, and the server (the one process this script started) is
stopped by its PID on every exit path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
PATH = "/mcp"
LEGACY_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
MIB = 1024 * 1024
NEWEST_PROBED = 50
SAMPLE_PROBED = 200


class DeadlineExceeded(Exception):
    pass


@dataclass
class Cycle:
    peak: int = 0
    after: int = 0
    opened: int = 0
    open_seconds: float = 0.0
    expiry_seconds: float = 0.0
    probed: int = 0


@dataclass
class Run:
    args: argparse.Namespace
    pid: int
    port: int
    deadline: float
    baseline: int = 0
    cycles: list[Cycle] = field(default_factory=list)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise DeadlineExceeded(f"the run took longer than {self.args.deadline:g} s")


# -- the server process --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def rss(pid: int) -> int:
    """The process's resident set size in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_rss(pid: int, samples: int = 5, pause: float = 0.2) -> int:
    """The median of a few readings, so one allocation burst does not decide."""
    readings = []
    for _ in range(samples):
        readings.append(rss(pid))
        time.sleep(pause)
    return sorted(readings)[len(readings) // 2]


def start_server(args: argparse.Namespace, workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MCP_") and key != "PYTHONPATH"
    }
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "MCP_HOST": HOST,
            "MCP_PORT": str(port),
            "MCP_CATALOG": "probe",
            "MCP_LOG_LEVEL": "warning",
            "MCP_RECORDS": "none",
            "MCP_SESSION_IDLE_TIMEOUT_S": str(args.idle_timeout),
            "MCP_MAX_SESSIONS": str(max(10_000, 2 * (args.sessions + args.warmup))),
            # Every session comes from this one client: no per-client cap.
            "MCP_MAX_SESSIONS_PER_CLIENT": "0",
        }
    )
    for pair in args.env:
        key, _, value = pair.partition("=")
        env[key] = value
    # A temporary working directory: no developer .env is read, and anything the server
    # writes next to itself goes away with it.
    log_path = Path(workdir) / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "server"],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    deadline = time.monotonic() + 20
    while True:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the server exited with {process.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://{HOST}:{port}/healthz", timeout=1).status_code == 200:
                return process, port
        if time.monotonic() > deadline:
            stop_server(process)
            raise RuntimeError("the server did not become healthy within 20 s")
        time.sleep(0.1)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, to this one PID only."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(5)


# -- clients -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    used: float = field(default_factory=time.monotonic)


class Client(Protocol):
    async def request(self, verb: str, body: bytes | None, headers: dict[str, str]) -> Reply: ...


class RawClient:
    """Keep-alive HTTP/1.1 over asyncio streams: a pool of connections, one request each at a
    time. Enough for JSON answers (Content-Length or chunked); nothing else is asked for. A
    connection the server may have closed as idle (uvicorn's keep-alive timeout is 5 s) is
    replaced before use, and a request that finds its reused connection closed is sent again
    on a new one."""

    IDLE_REUSE_S = 3.0

    def __init__(self, port: int, connections: int) -> None:
        self.port = port
        self.size = connections
        self.idle: asyncio.Queue[Connection | None] = asyncio.Queue()
        self.open: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> RawClient:
        for _ in range(self.size):
            self.idle.put_nowait(None)  # connected on first use
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in list(self.open):
            await self._close(writer)

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        self.open.discard(writer)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()

    async def _connect(self) -> Connection:
        reader, writer = await asyncio.open_connection(HOST, self.port)
        self.open.add(writer)
        return Connection(reader, writer)

    async def request(self, verb: str, body: bytes | None, headers: dict[str, str]) -> Reply:
        connection = await self.idle.get()
        try:
            if connection is not None and time.monotonic() - connection.used > self.IDLE_REUSE_S:
                await self._close(connection.writer)
                connection = None
            reused = connection is not None
            if connection is None:
                connection = await self._connect()
            try:
                reply = await self._exchange(connection, verb, body, headers)
            except (asyncio.IncompleteReadError, ConnectionError):
                if not reused:
                    raise
                await self._close(connection.writer)
                connection = await self._connect()
                reply = await self._exchange(connection, verb, body, headers)
        except BaseException:
            if connection is not None:
                await self._close(connection.writer)
            self.idle.put_nowait(None)
            raise
        connection.used = time.monotonic()
        self.idle.put_nowait(connection)
        return reply

    async def _exchange(
        self, connection: Connection, verb: str, body: bytes | None, headers: dict[str, str]
    ) -> Reply:
        reader, writer = connection.reader, connection.writer
        payload = body or b""
        lines = [f"{verb} {PATH} HTTP/1.1", f"Host: {HOST}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(payload)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        received = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                received[name.strip().lower()] = value.strip()
        if "content-length" in received:
            content = await reader.readexactly(int(received["content-length"]))
        elif received.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            content = b"".join(chunks)
        else:
            content = b""
        return Reply(status, received, content)


class HttpxClient:
    def __init__(self, port: int, connections: int) -> None:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.url = f"http://{HOST}:{port}{PATH}"
        self.http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0))

    async def __aenter__(self) -> HttpxClient:
        await self.http.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.__aexit__(None, None, None)

    async def request(self, verb: str, body: bytes | None, headers: dict[str, str]) -> Reply:
        if body is not None:
            headers = {**headers, "content-type": "application/json"}
        answer = await self.http.request(verb, self.url, content=body, headers=headers)
        return Reply(answer.status_code, dict(answer.headers), answer.content)


@contextlib.asynccontextmanager
async def client_for(run: Run) -> AsyncIterator[Client]:
    chosen = RawClient if run.args.client == "raw" else HttpxClient
    async with chosen(run.port, run.args.concurrency) as client:
        yield client


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def session_headers(session_id: str) -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": LEGACY_VERSION,
    }


INITIALIZE = encode(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "sessions-leak-bench", "version": "1.0"},
        },
    }
)
INITIALIZED = encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
PING = encode({"jsonrpc": "2.0", "id": 1, "method": "ping"})


async def open_session(client: Client, n: int) -> str:
    """initialize, notifications/initialized, one checked tools/call; the session id."""
    reply = await client.request("POST", INITIALIZE, {"Accept": ACCEPT})
    if reply.status != 200:
        raise RuntimeError(f"initialize answered {reply.status}: {reply.body[:200]!r}")
    session_id = reply.headers["mcp-session-id"]
    headers = session_headers(session_id)
    reply = await client.request("POST", INITIALIZED, headers)
    if reply.status != 202:
        raise RuntimeError(f"notifications/initialized answered {reply.status}")
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": n, "b": 1}},
    }
    reply = await client.request("POST", encode(call), headers)
    result = reply.json().get("result", {}) if reply.status == 200 else {}
    if result.get("structuredContent", {}).get("sum") != n + 1:
        raise RuntimeError(f"tools/call answered {reply.status}: {reply.body[:200]!r}")
    return session_id


async def probe_status(client: Client, session_id: str) -> int:
    reply = await client.request("POST", PING, session_headers(session_id))
    return reply.status


# -- the cycle -----------------------------------------------------------------------------


async def bounded(
    run: Run, jobs: Iterable[Callable[[], Awaitable[Any]]], concurrency: int | None = None
) -> list[Any]:
    gate = asyncio.Semaphore(concurrency or run.args.concurrency)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            run.check_time()
            return await job()

    return list(await asyncio.gather(*(one(job) for job in jobs)))


async def sample_peak(pid: int, stop: asyncio.Event, interval: float = 0.1) -> int:
    peak = rss(pid)
    while not stop.is_set():
        peak = max(peak, rss(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
    return max(peak, rss(pid))


def sweep_interval(idle_timeout: float) -> float:
    """How often the server sweeps idle sessions (server/app.py, expire_sessions)."""
    return min(30.0, max(0.5, idle_timeout / 4))


async def warm_up(run: Run, client: Client) -> None:
    async def session_then_delete(n: int) -> None:
        session_id = await open_session(client, n)
        reply = await client.request("DELETE", None, session_headers(session_id))
        if reply.status != 200:
            raise RuntimeError(f"DELETE answered {reply.status}")

    await bounded(run, (functools.partial(session_then_delete, n) for n in range(run.args.warmup)))


async def cycle(run: Run, client: Client) -> Cycle:
    args = run.args
    result = Cycle()
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_peak(run.pid, stop))
    last_used: dict[str, float] = {}

    async def open_one(n: int) -> None:
        session_id = await open_session(client, n)
        last_used[session_id] = time.monotonic()

    started = time.monotonic()
    try:
        await bounded(run, (functools.partial(open_one, n) for n in range(args.sessions)))
        result.open_seconds = time.monotonic() - started
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        result.peak = await sampler
    result.opened = len(last_used)
    if result.open_seconds > 0.8 * args.idle_timeout:
        print(
            f"  warning: opening took {result.open_seconds:.1f} s, close to the idle timeout"
            f" ({args.idle_timeout:g} s): the first sessions may have expired before the peak"
        )

    expiry_started = time.monotonic()
    if args.expiry == "lazy":
        await expire_lazily(run, client, last_used)
    else:
        newest = max(last_used.values())
        quiet_until = newest + args.idle_timeout + 2 * sweep_interval(args.idle_timeout) + 0.5
        while time.monotonic() < quiet_until:
            run.check_time()
            await asyncio.sleep(min(1.0, quiet_until - time.monotonic()))
    result.probed = await wait_all_gone(run, client, last_used)
    result.expiry_seconds = time.monotonic() - expiry_started
    await asyncio.sleep(args.settle)
    result.after = await asyncio.to_thread(settled_rss, run.pid)
    return result


async def expire_lazily(run: Run, client: Client, last_used: dict[str, float]) -> None:
    """One request per session just after its idle timeout, ahead of the sweep."""
    margin = 0.05
    gate = asyncio.Semaphore(run.args.concurrency)
    statuses: list[int] = []

    async def probe_at(session_id: str, when: float) -> None:
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        async with gate:
            run.check_time()
            statuses.append(await probe_status(client, session_id))

    await asyncio.gather(
        *(probe_at(sid, used + run.args.idle_timeout + margin) for sid, used in last_used.items())
    )
    late = sum(1 for status in statuses if status != 404)
    if late:
        print(f"  lazy expiry: {late} probes were not answered 404")


async def wait_all_gone(run: Run, client: Client, last_used: dict[str, float]) -> int:
    """Probe old ids until all answer 404: the newest, a sample, or all; how many were probed."""
    by_age = sorted(last_used, key=last_used.__getitem__)
    if run.args.probe_all:
        chosen = by_age
    else:
        older = by_age[:-NEWEST_PROBED]
        sample = random.sample(older, min(SAMPLE_PROBED, len(older)))
        chosen = by_age[-NEWEST_PROBED:] + sample
    alive = chosen
    while alive:
        statuses = await bounded(
            run, (functools.partial(probe_status, client, sid) for sid in alive)
        )
        alive = [sid for sid, status in zip(alive, statuses, strict=True) if status != 404]
        if alive:
            print(f"  {len(alive)} old sessions still answer; waiting for the sweep")
            await asyncio.sleep(sweep_interval(run.args.idle_timeout))
    return len(chosen)


# -- verdict -------------------------------------------------------------------------------


def report(run: Run) -> bool:
    args = run.args
    first = run.cycles[0]
    growth = max(first.peak - run.baseline, 0)
    returned_limit = max(20 * MIB, 0.25 * growth)
    reuse_limit = max(4 * MIB, 0.10 * growth)
    print()
    print(
        f"{args.sessions} legacy sessions per cycle (initialize + initialized + tools/call),"
        f" concurrency {args.concurrency}, client {args.client}, idle timeout"
        f" {args.idle_timeout:g} s, expiry path: {args.expiry}"
    )
    print()
    header = (
        "cycle  baseline MiB  peak MiB  after-expiry MiB  KiB/session at peak"
        "  retained MiB  open s  expiry s"
    )
    print(header)
    print("-" * len(header))
    for number, item in enumerate(run.cycles, 1):
        per_session = (item.peak - run.baseline) / max(item.opened, 1) / 1024
        print(
            f"{number:5d}  {run.baseline / MIB:12.1f}  {item.peak / MIB:8.1f}"
            f"  {item.after / MIB:16.1f}  {per_session:19.2f}"
            f"  {(item.after - run.baseline) / MIB:+12.1f}  {item.open_seconds:6.1f}"
            f"  {item.expiry_seconds:8.1f}"
        )
    print()
    checked = (
        "every id"
        if args.probe_all
        else f"the newest {NEWEST_PROBED} ids and a random {SAMPLE_PROBED} of the others"
    )
    print(f"(expiry checked per cycle on {checked}: all answered 404)")
    retained = run.cycles[-1].after - run.baseline
    returned = retained <= returned_limit
    print(
        f"returned: {retained / MIB:+.1f} MiB retained after expiry, limit"
        f" {returned_limit / MIB:.1f} MiB = max(20 MiB, 25% of the first cycle's"
        f" {growth / MIB:.1f} MiB growth): {'yes' if returned else 'no'}"
    )
    reused = False
    if len(run.cycles) < 2:
        print("reused: not checked (needs --cycles >= 2)")
    else:
        worst_peak = max(item.peak for item in run.cycles[1:]) - first.peak
        worst_after = max(item.after for item in run.cycles) - first.peak
        reused = worst_peak <= reuse_limit and worst_after <= reuse_limit
        print(
            f"reused: vs the first cycle's peak, later peaks {worst_peak / MIB:+.1f} MiB,"
            f" after-expiry RSS {worst_after / MIB:+.1f} MiB; limit {reuse_limit / MIB:.1f} MiB"
            f" = max(4 MiB, 10% of growth): {'yes' if reused else 'no'}"
        )
    verdict = returned or reused
    print(f"verdict: {'PASS' if verdict else 'FAIL'}")
    return verdict


async def main_async(run: Run) -> bool:
    async with client_for(run) as client:
        await warm_up(run, client)
        await asyncio.sleep(1.0)
        run.baseline = await asyncio.to_thread(settled_rss, run.pid)
        print(f"baseline {run.baseline / MIB:.1f} MiB after {run.args.warmup} warm-up sessions")
        for number in range(1, run.args.cycles + 1):
            item = await cycle(run, client)
            run.cycles.append(item)
            print(
                f"cycle {number}: opened {item.opened} in {item.open_seconds:.1f} s, peak"
                f" {item.peak / MIB:.1f} MiB; gone {item.expiry_seconds:.1f} s later,"
                f" after-expiry {item.after / MIB:.1f} MiB"
            )
    return report(run)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--sessions", type=int, default=10_000, help="sessions per cycle (10000)")
    add("--cycles", type=int, default=2, help="open-and-expire cycles (2)")
    add("--concurrency", type=int, default=32, help="requests and connections in flight (32)")
    add("--warmup", type=int, default=300, help="warm-up sessions, deleted (300)")
    add("--idle-timeout", type=float, default=15.0, help="MCP_SESSION_IDLE_TIMEOUT_S (15)")
    add("--expiry", choices=["sweep", "lazy"], default="sweep", help="expiry path (sweep)")
    add("--probe-all", action="store_true", help="check every old id for 404, not a sample")
    add("--client", choices=["raw", "httpx"], default="raw", help="bulk HTTP client (raw)")
    add("--settle", type=float, default=2.0, help="seconds before the after-expiry RSS (2)")
    add("--deadline", type=float, default=170.0, help="stop and fail after this (170 s)")
    add("--env", action="append", default=[], metavar="MCP_X=VALUE", help="extra setting")
    args = parser.parse_args(argv)
    if min(args.sessions, args.cycles, args.concurrency) < 1:
        parser.error("--sessions, --cycles and --concurrency must be at least 1")
    if args.sessions > 50_000 or args.cycles > 5 or args.concurrency > 256:
        parser.error("bounded: at most 50,000 sessions, 5 cycles, concurrency 256")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessions-leak-") as workdir:
        process, port = start_server(args, workdir)
        try:
            run = Run(args, process.pid, port, deadline=started + args.deadline)
            ok = asyncio.run(main_async(run))
        except DeadlineExceeded as late:
            print(f"FAIL: {late}")
            ok = False
        finally:
            stop_server(process)
    print(f"total {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
