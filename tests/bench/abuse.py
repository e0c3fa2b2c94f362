"""Abuse bench: what hostile request shapes cost a fresh server, class by class.

Run from anywhere (not collected by pytest: ``addopts`` ignores ``tests/bench``)::

    python tests/bench/abuse.py                          # every class, full sizes (< ~5 min)
    python tests/bench/abuse.py --quick                  # smaller sizes (< ~2 min)
    python tests/bench/abuse.py --classes batch,template # some classes only
    python tests/bench/abuse.py --server-root /path/to/other/checkout --env MCP_MAX_BATCH=64

For each size class it starts a **fresh** ``<python> -m server`` (cwd: ``--server-root``, by
default the repository this script lives in; ``MCP_HOST=127.0.0.1``, a free port,
``MCP_RECORDS=file`` into a temporary directory, ``MCP_RATE_LIMIT_RPS=0`` so the rate limit
does not hide the effect, ``MCP_DRAIN_TIMEOUT_S=5`` so a stop stays bounded, the ``probe``
catalog unless ``--catalog``), sends a few ordinary requests (the warm-up, which also checks
the requests are well formed), then the class's hostile traffic, and measures:

- **healthz worst**: the slowest ``GET /healthz`` seen while the attack ran, polled every
  20 ms from its own thread on its own keep-alive connection (a poll still waiting when the
  attack ends counts with its age then);
- **RSS**: ``VmRSS`` of the server process before the attack (after the warm-up) and after
  it, and ``VmHWM`` (its peak since it started), from ``/proc/<pid>/status``;
- **sent / statuses**: how many HTTP requests went to the endpoint (warm-up included) and
  their status codes (``timeout``, ``reset``, ``aborted`` when no full answer came);
- **records**: after the attack the server is stopped with SIGTERM (SIGKILL after
  ``--stop-timeout`` s) and the lines of every ``records*.jsonl*`` file (rotated and gzipped
  ones too) are counted against the requests sent.

The classes (full size; ``--quick`` in brackets), from an adversarial report:

``batch``
    a 2025-03-26 session (initialize, notifications/initialized), then one JSON-RPC batch of
    32,000 [8,000] ``ping`` requests (about 1.4 MB) and one of 8,000 [2,000] ``tools/list``;
    each answer's time, size and message count (client timeout 60 s or what is left of the
    budget).
``headers``
    1,000 [200] requests each for a distinct 1 MiB ``Host`` (expected 403), ``Origin`` (403)
    and ``User-Agent`` (200) value: 3,000 [600] requests, 3 GiB [600 MiB] of headers. RSS after
    each of the three phases.
``body-keys``
    a small modern ``tools/call`` of ``echo`` must answer 200 first; then 1,000 [200] modern
    ``tools/call`` requests whose ``arguments`` carry a distinct 1 MiB key name.
``init-caps``
    40 [10] legacy ``initialize`` requests (2025-11-25) whose capabilities are 3.7 MB of nested
    objects; how many sessions were created (a ``ping`` on each) and the RSS per session.
    ``MCP_MAX_SESSIONS_PER_CLIENT=0`` for this class, so the per-client cap hides nothing.
``user-agent``
    200 [100] ordinary requests with a marked ``User-Agent``, then 60 requests with a distinct
    8 MiB ``User-Agent``, 0.25 s apart (``--ua-pause``: the records writer wakes every 200 ms,
    so each record is a write, and a rotation check, of its own); how many of the marked
    records are still in the files (``records.jsonl`` and its rotated ``.N.gz``) at the end.
``template``
    served with ``--template-catalog`` (default ``abuse_catalog:catalog``: the probe catalog
    plus ``weather://{city}.{format}``, from ``tests/bench/abuse_catalog.py``): lists the
    templates, picks one with two variables not separated by ``/`` (skipped, and said so, if
    there is none) and reads one 40 KB [20 KB] URI through it that makes the match backtrack
    (for ``weather://{city}.{format}``: ``weather://`` + 40,000 dots + ``/``).
``skills-alias``
    served with ``abuse_skills_catalog:catalog`` (``tests/bench/abuse_skills_catalog.py``: the
    probe catalog plus a skill whose ~500-byte frontmatter nests YAML aliases, 159 MB as JSON).
    A server that refuses aliases does not start (the class reports ``failed`` with the
    server's one line naming the file). Otherwise: one ``skills/list`` read whole (time, size),
    then 10 more sent on their own connections and never read, held 5 s [3 s] while RSS is
    sampled (peak and after), then closed.
``tasks``
    one address (``X-Forwarded-For`` through ``MCP_TRUSTED_PROXIES=127.0.0.1``) floods task
    slots from legacy sessions: each session calls ``long_job`` (``seconds`` 0) with a ``task``
    param until refused, then is DELETEd and the next one opens, until 10,000 [2,000] tasks
    were created (``MCP_MAX_TASKS`` the same), a new session gets none (the server is full),
    or twice that many calls were made; the last session is kept. Then another address
    asks for a legacy task and a modern one (the tasks extension declared): what it gets is
    the class's finding.
``stalled-reader``
    ``MCP_SEND_TIMEOUT_S=2``: 40 [20] raw sockets (default buffers) open streams, half of them
    ``subscriptions/listen`` streams, half legacy ``GET`` streams of a 2025-11-25 session,
    all following ``probe://stall/``, read the stream's head and stop reading; then 1,500 [800]
    ``touch_resource`` calls announce updates of 2 KB URIs below it (about 3 MB per stream).
    Send timeout + 3 s after the flood: the server's sockets still established and the bytes
    they hold unsent (``/proc/net/tcp``, the server's port; other states counted apart), and
    its RSS. ``MCP_MAX_STREAMS_PER_CLIENT=0`` and ``MCP_MAX_SESSIONS_PER_CLIENT=0`` for this
    class (every socket comes from 127.0.0.1).
``log-injection``
    served with the ``--template-catalog`` (its ``abuse_log`` tool logs its argument),
    ``MCP_LOG_LEVEL=info``: 20 [5] modern ``tools/call`` of ``abuse_log`` whose client name
    is 3 MB and whose argument is 64 KB, both with line breaks (``\n``, ``\u2028``) that
    start a forged log line; then 200 [50] requests refused for an 8 KB ``Host``. The server's
    log (its stderr) is measured: bytes written per request, its longest line, how many lines
    pass for one of the server's own (forged), how many lines the refused Hosts left.
``live-report``
    ``MCP_REPORT_LIVE=true``: 10,000 [2,000] modern ``tools/call`` of ``echo``, each from a
    client of its own (a distinct 200-character name, version and ``User-Agent``); the RSS
    once the live report has counted them (the table's RSS is measured after), then how long
    the report takes to draw (``GET /admin/report?format=json``) and its size.
``sse-drop``
    the HTTP+SSE transport: 70 [66] times, a ``GET /sse`` whose session initializes and starts
    two 10 s ``count_slowly`` calls, then closes its socket (a client that drops its stream with
    calls running). Then a POST on each dropped session (404 once it ended; 202 while it lives
    on) and a new ``GET /sse`` (429 when the client's session slots were never returned:
    ``MCP_MAX_SESSIONS_PER_CLIENT`` is 64).
``sse-big`` / ``sse-big-redis``
    one HTTP+SSE session reads 40 [10] (with Redis: 20 [10]) ``echo`` answers of 3.5 MB, one
    after the other; the RSS is measured with the session still open. ``sse-big-redis`` runs a
    ``redis-server`` of its own (free loopback port, no persistence, stopped at the end) as
    ``MCP_REDIS_URL`` and notes its ``used_memory`` growth with the session open and 1 s after
    it ended.
``sse-dup-ids``
    40 POSTs on one HTTP+SSE session of a 4 s ``count_slowly`` under one JSON-RPC id, then
    ``notifications/cancelled`` for that id: how many were refused (-32600) and how many still
    answered after the cancellation.
``sse-slow-reader``
    an HTTP+SSE stream on a socket with a 4 KiB receive buffer, 10 ``count_slowly`` calls of 45
    steps without pause (a progress and a log message each: 900 messages) behind 10 ``echo``
    answers of 500 KB, read after 1 s, a receive buffer at a time every 2 ms (slow, never
    stalled): how many of the 20 answers, logs and progress messages arrived, and whether the
    stream was closed.

Bounded: every class has its sizes above (the size options, e.g. ``--batch-pings``, are
capped too), a time budget for its attack (``--budget``, 60 s, at most 120; every request has
its own timeout within it), and the whole run a budget (``--total-budget``, 290 s, at most 900)
after which no class starts; a running class's attack ends at it, and its server gets SIGTERM
and then at most ``--stop-timeout`` s (60) but no more than what is left of the run (at least
10 s) before SIGKILL. The full run takes about 2-3 minutes on 2 CPUs, ``--quick`` under one.
An RSS watchdog ends a class's attack when the server passes ``--max-rss-mib`` (6144; the
full sizes pinned up to ~2.8 GiB before the fixes of the adversarial report). About 3.5 GB of
loopback traffic in all. Every request goes to 127.0.0.1 only (the address is a constant; the
``Host`` header is only a header), and the one server process per class that this script
starts is stopped by its PID on every exit path (try/finally, SIGTERM to this script too).
The records files (hundreds of MB in ``user-agent``) are deleted at the end unless ``--keep``.

Output: progress on stderr; on stdout one line per class, then a table of all classes.
Exit status 0 whatever the numbers (this measures; it does not judge), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.mcp_client import initialize

HOST = "127.0.0.1"  # the only address this script ever connects to
PATH = "/mcp"
BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parents[1]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
BATCH_VERSION = "2025-03-26"
ACCEPT = "application/json, text/event-stream"
KIB = 1024
MIB = 1024 * 1024
POLL_INTERVAL_S = 0.02
RSS_INTERVAL_S = 0.05
SLICE_S = 0.25  # socket operations wait at most this long before checking the budget
SEND_CHUNK = 256 * KIB
NORMAL_UA = "abuse-bench-normal/1.0"
BENCH_UA = "abuse-bench/1.0"
CLASSES: tuple[str, ...] = (
    "batch",
    "headers",
    "body-keys",
    "init-caps",
    "user-agent",
    "template",
    "tasks",
    "stalled-reader",
)

Header = tuple[str, str | bytes]


# -- sizes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    batch_pings: int
    batch_tools: int
    header_count: int
    header_bytes: int
    key_count: int
    key_bytes: int
    caps_count: int
    caps_bytes: int
    ua_normal: int
    ua_count: int
    ua_bytes: int
    uri_bytes: int


FULL = Sizes(
    batch_pings=32_000,
    batch_tools=8_000,
    header_count=1_000,
    header_bytes=MIB,
    key_count=1_000,
    key_bytes=MIB,
    caps_count=40,
    caps_bytes=3_700_000,
    ua_normal=200,
    ua_count=60,
    ua_bytes=8 * MIB,
    uri_bytes=40_000,
)
QUICK = Sizes(
    batch_pings=8_000,
    batch_tools=2_000,
    header_count=200,
    header_bytes=MIB,
    key_count=200,
    key_bytes=MIB,
    caps_count=10,
    caps_bytes=3_700_000,
    ua_normal=100,
    ua_count=60,
    ua_bytes=8 * MIB,
    uri_bytes=20_000,
)
# Upper bounds on what the size options accept: the run stays bounded whatever is asked.
LIMITS = Sizes(
    batch_pings=100_000,
    batch_tools=100_000,
    header_count=2_000,
    header_bytes=16 * MIB,
    key_count=2_000,
    key_bytes=4 * MIB,
    caps_count=100,
    caps_bytes=4 * MIB,
    ua_normal=1_000,
    ua_count=100,
    ua_bytes=16 * MIB,
    uri_bytes=1 * MIB,
)


# -- a small HTTP/1.1 client on blocking sockets -------------------------------------------


@dataclass(slots=True)
class Reply:
    status: int | None  # None: no complete answer (see error)
    error: str | None
    headers: dict[str, str]
    body: bytes
    seconds: float

    @property
    def code(self) -> str:
        return str(self.status) if self.status is not None else (self.error or "?")

    def json(self) -> Any:
        kind = self.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):  # the last data: line holds the answer
            data = [
                line[5:].strip()
                for line in self.body.split(b"\n")
                if line.startswith(b"data:") and line[5:].strip()
            ]
            return json.loads(data[-1]) if data else None
        return json.loads(self.body) if self.body else None


def _dechunk(body: bytes) -> bytes:
    out: list[bytes] = []
    position = 0
    while True:
        end = body.index(b"\r\n", position)
        size = int(body[position:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2 : end + 2 + size])
        position = end + 2 + size + 2


def _complete(data: bytearray, head_end: int, headers: dict[str, str]) -> bool:
    body_length = len(data) - head_end
    if "content-length" in headers:
        return body_length >= int(headers["content-length"])
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return data.endswith(b"\r\n0\r\n\r\n") or bytes(data[head_end:]) == b"0\r\n\r\n"
    return False  # read to the end of the connection


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


def _send(sock: socket.socket, payload: bytes, over: Callable[[], str | None]) -> str | None:
    """Sends everything; None, or why it stopped ("timeout", "aborted", "closed")."""
    view, sent = memoryview(payload), 0
    while sent < len(view):
        if reason := over():
            return reason
        try:
            sent += sock.send(view[sent : sent + SEND_CHUNK])
        except TimeoutError:
            continue
        except OSError:
            return "closed"  # the server gave up reading: its answer may still be there
    return None


def _receive(sock: socket.socket, over: Callable[[], str | None]) -> tuple[bytearray, str | None]:
    data = bytearray()
    head_end, headers = -1, {}
    while True:
        if reason := over():
            return data, reason
        try:
            chunk = sock.recv(MIB)
        except TimeoutError:
            continue
        except OSError:
            return data, "reset"
        if not chunk:
            return data, None
        data += chunk
        if head_end < 0 and (found := data.find(b"\r\n\r\n")) >= 0:
            head_end = found + 4
            headers = _parse_head(bytes(data[:found]))[1]
        if head_end >= 0 and _complete(data, head_end, headers):
            return data, None


def http_request(
    port: int,
    verb: str,
    headers: Sequence[Header],
    body: bytes,
    *,
    deadline: float,
    abort: threading.Event,
) -> Reply:
    """One request on its own connection (``Connection: close``) to 127.0.0.1:``port``."""
    names = {name.lower() for name, _ in headers}
    head = [f"{verb} {PATH} HTTP/1.1\r\n".encode()]
    if "host" not in names:
        head.append(f"Host: {HOST}:{port}\r\n".encode())
    for name, value in headers:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        head.append(name.encode() + b": " + raw + b"\r\n")
    head.append(f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
    payload = b"".join(head) + body
    del head

    def over() -> str | None:
        if abort.is_set():
            return "aborted"
        return "timeout" if time.monotonic() >= deadline else None

    start = time.monotonic()
    try:
        sock = socket.create_connection((HOST, port), timeout=5)
    except OSError:
        return Reply(None, "refused", {}, b"", time.monotonic() - start)
    with sock:
        sock.settimeout(SLICE_S)
        stopped = _send(sock, payload, over)
        del payload
        if stopped in ("timeout", "aborted"):
            return Reply(None, stopped, {}, b"", time.monotonic() - start)
        data, stopped = _receive(sock, over)
    seconds = time.monotonic() - start
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return Reply(None, stopped or "no answer", {}, b"", seconds)
    status, reply_headers = _parse_head(bytes(data[:head_end]))
    body = bytes(data[head_end + 4 :])
    framed = "content-length" in reply_headers or "chunked" in reply_headers.get(
        "transfer-encoding", ""
    )
    if stopped is None and framed and not _complete(data, head_end + 4, reply_headers):
        stopped = "cut off"  # the connection ended before the announced body did
    if stopped is not None:
        return Reply(None, stopped, reply_headers, body, seconds)
    if "chunked" in reply_headers.get("transfer-encoding", "").lower():
        body = _dechunk(body)
    return Reply(status, None, reply_headers, body, seconds)


# -- the server process --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes (empty when it is gone)."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * KIB
    return values


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    workdir: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def server_env(
    args: argparse.Namespace, port: int, workdir: Path, extra: dict[str, str]
) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MCP_") and key != "PYTHONPATH"
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(args.server_root), str(BENCH_DIR)]),
            "MCP_HOST": HOST,
            "MCP_PORT": str(port),
            "MCP_CATALOG": args.catalog,
            "MCP_LOG_LEVEL": "warning",
            "MCP_RECORDS": "file",
            "MCP_RECORDS_FILE": str(workdir / "records.jsonl"),
            "MCP_RATE_LIMIT_RPS": "0",
            "MCP_DRAIN_TIMEOUT_S": "5",
        }
    )
    env.update(extra)
    for pair in args.env:
        key, _, value = pair.partition("=")
        env[key] = value
    return env


def start_server(args: argparse.Namespace, workdir: Path, extra: dict[str, str]) -> Server:
    port = free_port()
    env = server_env(args, port, workdir, extra)
    with (workdir / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [args.python, "-m", "server"],
            cwd=args.server_root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, port, workdir)
    try:
        wait_healthy(server)
    except BaseException:
        stop_server(server, 5)
        raise
    return server


def wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = (server.workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the server exited with {server.process.returncode}:\n{tail}")
        connection = http.client.HTTPConnection(HOST, server.port, timeout=1)
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        time.sleep(0.1)
    raise RuntimeError("the server did not answer /healthz within 30 s")


@dataclass
class Stopped:
    seconds: float
    returncode: int | None
    killed: bool

    def text(self) -> str:
        how = "SIGKILL after SIGTERM timed out" if self.killed else "SIGTERM"
        return f"{how}, exit {self.returncode} in {self.seconds:.1f} s"


def stop_server(server: Server, timeout: float) -> Stopped:
    """SIGTERM, then SIGKILL after ``timeout`` s: to this one PID only."""
    start = time.monotonic()
    process = server.process
    if process.poll() is not None:
        return Stopped(0.0, process.returncode, False)
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
        return Stopped(time.monotonic() - start, process.returncode, False)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        return Stopped(time.monotonic() - start, process.returncode, True)
    except BaseException:  # interrupted while waiting (Ctrl-C, SIGTERM): do not leave it behind
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
        raise


# -- watching the server while it is attacked ----------------------------------------------


class HealthPoller(threading.Thread):
    """GET /healthz every 20 ms on one keep-alive connection; the slowest answer wins."""

    def __init__(self, port: int) -> None:
        super().__init__(name="healthz", daemon=True)
        self.port = port
        self.done = threading.Event()
        self.latencies: list[float] = []
        self.failed = 0
        self.inflight: float | None = None
        self.connection: http.client.HTTPConnection | None = None

    def run(self) -> None:
        while not self.done.is_set():
            start = time.monotonic()
            self.inflight = start
            ok = self._poll()
            elapsed = time.monotonic() - start
            self.inflight = None
            if self.done.is_set():
                break
            self.latencies.append(elapsed)
            if not ok:
                self.failed += 1
            self.done.wait(max(0.0, POLL_INTERVAL_S - elapsed))

    def _poll(self) -> bool:
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection(HOST, self.port, timeout=600)
            self.connection.request("GET", "/healthz")
            response = self.connection.getresponse()
            response.read()
            return response.status == 200
        except (OSError, http.client.HTTPException):
            if self.connection is not None:
                self.connection.close()
            self.connection = None
            return False

    def finish(self) -> tuple[float, float, int, int]:
        """(worst, median, polls, failed); a poll still waiting counts with its age."""
        inflight = self.inflight
        waiting = time.monotonic() - inflight if inflight is not None else 0.0
        self.done.set()
        connection = self.connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        self.join(5)
        latencies = list(self.latencies)
        worst = max([waiting, *latencies]) if latencies or inflight else 0.0
        median = statistics.median(latencies) if latencies else 0.0
        return worst, median, len(latencies) + (inflight is not None), self.failed


class RssWatch(threading.Thread):
    """Samples VmRSS; sets ``abort`` when the server passes the cap or is gone."""

    def __init__(self, server: Server, cap: int, abort: threading.Event) -> None:
        super().__init__(name="rss", daemon=True)
        self.server = server
        self.cap = cap
        self.abort = abort
        self.done = threading.Event()
        self.peak = 0
        self.reason: str | None = None

    def run(self) -> None:
        while not self.done.wait(RSS_INTERVAL_S):
            rss = proc_status(self.server.pid).get("VmRSS")
            if rss is None or self.server.process.poll() is not None:
                self.reason = f"the server exited ({self.server.process.poll()})"
                self.abort.set()
                return
            self.peak = max(self.peak, rss)
            if rss > self.cap:
                self.reason = f"RSS {rss / MIB:,.0f} MiB passed the cap {self.cap / MIB:,.0f} MiB"
                self.abort.set()
                return

    def finish(self) -> None:
        self.done.set()
        self.join(5)


# -- requests ------------------------------------------------------------------------------


class OutOfBudget(Exception):
    pass


@dataclass
class Attack:
    """What a class sends through: counts every request and its status, keeps the budget."""

    port: int
    pid: int
    deadline: float
    abort: threading.Event = field(default_factory=threading.Event)
    statuses: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    notes: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        if self.abort.is_set():
            raise OutOfBudget("aborted")
        if self.left() <= 0:
            raise OutOfBudget("time budget spent")

    def post(self, headers: Sequence[Header], body: bytes, *, timeout: float = 60.0) -> Reply:
        return self.send("POST", headers, body, timeout=timeout)

    def send(self, verb: str, headers: Sequence[Header], body: bytes, *, timeout: float) -> Reply:
        self.check()
        self.sent += 1
        deadline = min(self.deadline, time.monotonic() + timeout)
        reply = http_request(self.port, verb, headers, body, deadline=deadline, abort=self.abort)
        self.statuses[reply.code] += 1
        return reply


def meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
    }


def modern(
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: int = 1,
    name: str | None = None,
    user_agent: str | bytes = BENCH_UA,
) -> tuple[list[Header], bytes]:
    """A 2026-07-28 request: ``_meta`` in the params, version, method (and name) in headers."""
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**(params or {}), "_meta": meta()},
    }
    headers: list[Header] = [
        ("Content-Type", "application/json"),
        ("Accept", ACCEPT),
        ("User-Agent", user_agent),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", method),
    ]
    if name is not None:
        headers.append(("Mcp-Name", name))
    return headers, json.dumps(message).encode()


def legacy_headers(version: str | None = None, session: str | None = None) -> list[Header]:
    headers: list[Header] = [
        ("Content-Type", "application/json"),
        ("Accept", ACCEPT),
        ("User-Agent", BENCH_UA),
    ]
    if version is not None:
        headers.append(("MCP-Protocol-Version", version))
    if session is not None:
        headers.append(("Mcp-Session-Id", session))
    return headers


def initialize_body(version: str, capabilities: bytes = b"{}", request_id: int = 0) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"%s",'
        b'"clientInfo":{"name":"abuse-bench","version":"1.0"},"capabilities":'
        % (request_id, version.encode())
        + capabilities
        + b"}}"
    )


def open_session(attack: Attack, version: str) -> str | None:
    """initialize and notifications/initialized; the session id, or None (noted)."""
    reply = attack.post(legacy_headers(), initialize_body(version))
    session = reply.headers.get("mcp-session-id")
    if reply.status != 200 or not session:
        attack.notes.append(f"initialize {version} answered {reply.code}: {reply.body[:200]!r}")
        return None
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    attack.post(legacy_headers(version, session), initialized)
    return session


def warm_up(attack: Attack) -> bool:
    """Ordinary requests of both eras; False (noted) when one is not answered as expected."""
    expected: list[tuple[str, Reply]] = []
    for method, params, name in (
        ("server/discover", None, None),
        ("tools/list", None, None),
        ("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, "echo"),
    ):
        headers, body = modern(method, params, name=name)
        expected.append((f"modern {method}", attack.post(headers, body)))
    session = open_session(attack, LEGACY)
    if session is not None:
        ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
        expected.append(("legacy ping", attack.post(legacy_headers(LEGACY, session), ping)))
        expected.append(
            (
                "legacy DELETE",
                attack.send("DELETE", legacy_headers(LEGACY, session), b"", timeout=10),
            )
        )
    bad = [f"{label}: {reply.code}" for label, reply in expected if reply.status != 200]
    if session is None or bad:
        attack.notes.append("warm-up not as expected: " + (", ".join(bad) or "no session"))
        return False
    return True


def mb(size: float) -> str:
    return f"{size / 1e6:,.2f} MB"


def answer_text(reply: Reply) -> str:
    """'200 in 1.23 s, 0.45 MB' (or why there was no answer)."""
    if reply.status is None:
        return f"no answer ({reply.error}) after {reply.seconds:.1f} s"
    return f"{reply.status} in {reply.seconds:.2f} s, {mb(len(reply.body))}"


def error_of(reply: Reply) -> str:
    try:
        message = reply.json()
    except (ValueError, UnicodeDecodeError):
        return ""
    if isinstance(message, dict) and isinstance(message.get("error"), dict):
        error = message["error"]
        return f" (error {error.get('code')}: {str(error.get('message'))[:80]})"
    return ""


# -- the classes ---------------------------------------------------------------------------


def attack_batch(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    session = open_session(attack, BATCH_VERSION)
    if session is None:
        return
    headers = legacy_headers(BATCH_VERSION, session)
    for method, count in (("ping", sizes.batch_pings), ("tools/list", sizes.batch_tools)):
        body = (
            b"["
            + b",".join(
                b'{"jsonrpc":"2.0","id":%d,"method":"%s"}' % (i, method.encode())
                for i in range(count)
            )
            + b"]"
        )
        if len(body) > args.max_body:
            attack.notes.append(
                f"{method} batch of {count:,} is {mb(len(body))}, over the body limit"
            )
        reply = attack.post(headers, body, timeout=args.batch_timeout)
        text = f"{method} batch x{count:,} ({mb(len(body))}): {answer_text(reply)}"
        if reply.status is not None:
            try:
                answer = reply.json()
            except ValueError:
                answer = None
            if isinstance(answer, list):
                text += f", {len(answer):,} answer{'' if len(answer) == 1 else 's'}"
            else:
                text += error_of(reply)
        attack.notes.append(text)


def big_value(index: int, size: int, tail: str = "") -> str:
    """A distinct header-safe value of ``size`` characters."""
    prefix = f"v{index:07d}"
    return prefix + "a" * max(0, size - len(prefix) - len(tail)) + tail


def attack_headers(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    headers, body = modern("server/discover")
    for kind in ("Host", "Origin", "User-Agent"):
        codes: Counter[str] = Counter()
        try:
            for index in range(sizes.header_count):
                if kind == "Host":
                    value = big_value(index, sizes.header_bytes, ".example")
                elif kind == "Origin":
                    value = "http://" + big_value(index, sizes.header_bytes - 7, ".example")
                else:
                    value = big_value(index, sizes.header_bytes)
                sent = [(name, v) for name, v in headers if name != "User-Agent"] + [
                    (kind, value.encode())
                ]
                if kind != "User-Agent":
                    sent.append(("User-Agent", BENCH_UA))
                codes[attack.post(sent, body, timeout=30).code] += 1
        finally:
            rss = proc_status(attack.pid).get("VmRSS", 0)
            attack.notes.append(
                f"{kind}: {sum(codes.values()):,} x {sizes.header_bytes / MIB:g} MiB "
                f"[{summary(codes)}] -> RSS {rss / MIB:,.0f} MiB"
            )


def attack_body_keys(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    headers, body = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, name="echo")
    reply = attack.post(headers, body)
    answer = reply.json() if reply.status == 200 else None
    content = (answer or {}).get("result", {}).get("content") if isinstance(answer, dict) else None
    if not content or content[0].get("text") != "hi":
        attack.notes.append(
            f"a small tools/call answered {reply.code} {reply.body[:200]!r}: skipped"
        )
        return
    attack.notes.append("small tools/call echo: 200, 'hi'")
    codes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    slowest = 0.0
    try:
        for index in range(sizes.key_count):
            key = big_value(index, sizes.key_bytes)
            arguments = {"text": "hi", key: 1}
            headers, body = modern(
                "tools/call",
                {"name": "echo", "arguments": arguments},
                request_id=index,
                name="echo",
            )
            reply = attack.post(headers, body, timeout=30)
            codes[reply.code] += 1
            slowest = max(slowest, reply.seconds)
            if reply.status == 200 and index < 3:
                errors[result_kind(reply)] += 1
    finally:
        attack.notes.append(
            f"{sum(codes.values()):,} tools/call with a {sizes.key_bytes / MIB:g} MiB key "
            f"[{summary(codes)}], slowest {slowest:.2f} s; first answers: {summary(errors)}"
        )


def result_kind(reply: Reply) -> str:
    try:
        answer = reply.json()
    except ValueError:
        return "not JSON"
    if not isinstance(answer, dict):
        return "not an object"
    if "error" in answer:
        return f"error {answer['error'].get('code')}"
    result = answer.get("result") or {}
    return "isError result" if result.get("isError") else "result"


def nested_capabilities(size: int) -> bytes:
    """About ``size`` bytes of capabilities: many small nested objects, as a client could."""
    shell = b'{"experimental":{"abuse":{}}}'
    count = max(1, (size - len(shell)) // len(b'"k0000000":{"v":[0]},'))
    parts = [b'"k%07d":{"v":[%d]}' % (i, i % 10) for i in range(count)]
    return b'{"experimental":{"abuse":{' + b",".join(parts) + b"}}}"


def attack_init_caps(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    capabilities = nested_capabilities(sizes.caps_bytes)
    sessions: list[str] = []
    codes: Counter[str] = Counter()
    before = proc_status(attack.pid).get("VmRSS", 0)
    try:
        for index in range(sizes.caps_count):
            body = initialize_body(LEGACY, capabilities, request_id=index)
            reply = attack.post(legacy_headers(), body, timeout=30)
            codes[reply.code] += 1
            session = reply.headers.get("mcp-session-id")
            if reply.status == 200 and session:
                sessions.append(session)
    finally:
        grown = proc_status(attack.pid).get("VmRSS", 0) - before
        per = f", {grown / max(1, len(sessions)) / MIB:,.1f} MiB RSS each" if sessions else ""
        attack.notes.append(
            f"{sum(codes.values())} initialize x {mb(len(capabilities))} of capabilities "
            f"[{summary(codes)}]: {len(sessions)} sessions{per}"
        )
    alive = 0
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    try:
        for session in sessions:
            alive += attack.post(legacy_headers(LEGACY, session), ping, timeout=10).status == 200
    finally:
        attack.notes.append(f"{alive} of {len(sessions)} answer a ping")


def attack_user_agent(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    normal = 0
    for index in range(sizes.ua_normal):
        headers, body = modern(
            "tools/call",
            {"name": "echo", "arguments": {"text": f"n{index}"}},
            request_id=index,
            name="echo",
            user_agent=f"{NORMAL_UA} #{index}",
        )
        normal += attack.post(headers, body, timeout=10).status == 200
    attack.notes.append(f"{normal} of {sizes.ua_normal} marked requests answered 200")
    codes: Counter[str] = Counter()
    try:
        for index in range(sizes.ua_count):
            headers, body = modern(
                "server/discover", request_id=index, user_agent=big_value(index, sizes.ua_bytes)
            )
            codes[attack.post(headers, body, timeout=30).code] += 1
            # Paced so each record is a write of its own (the records writer wakes every
            # 200 ms) and may rotate the file: what a patient client gets.
            time.sleep(args.ua_pause)
    finally:
        attack.notes.append(
            f"{sum(codes.values())} x {sizes.ua_bytes / MIB:g} MiB User-Agent, "
            f"{args.ua_pause:g} s apart [{summary(codes)}]"
        )


def two_variable_templates(templates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Templates with two variables in a row whose literal between has no '/'."""
    found = []
    for template in templates:
        uri = str(template.get("uriTemplate", ""))
        pieces = uri.replace("}", "{").split("{")  # literal, var, literal, var, ...
        between = pieces[2:-1:2]
        if any("/" not in literal and not literal.startswith(("?", "#")) for literal in between):
            found.append(template)
    return found


def hostile_uri(template: str, size: int) -> str:
    """A URI the template's regex fails to match only after trying every split: the literal
    before the first variable, the separator between the two variables repeated (each copy is
    one more place to split), then '/', which no simple variable takes."""
    pieces = template.replace("}", "{").split("{")  # literal, var, literal, var, ...
    prefix = pieces[0]
    separator = next(literal for literal in pieces[2:-1:2] if "/" not in literal) or "a"
    return prefix + separator * max(1, (size - len(prefix) - 1) // len(separator)) + "/"


def list_templates(attack: Attack) -> list[dict[str, Any]]:
    templates: list[dict[str, Any]] = []
    cursor: str | None = None
    for page in range(20):
        params = {"cursor": cursor} if cursor else None
        headers, body = modern("resources/templates/list", params, request_id=page)
        reply = attack.post(headers, body, timeout=10)
        answer = reply.json() if reply.status == 200 else None
        result = answer.get("result", {}) if isinstance(answer, dict) else {}
        templates.extend(result.get("resourceTemplates", []))
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return templates


def attack_template(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    templates = list_templates(attack)
    served = ", ".join(str(t.get("uriTemplate")) for t in templates) or "none"
    found = two_variable_templates(templates)
    if not found:
        attack.notes.append(
            f"SKIPPED: catalog {args.template_catalog} has no template with two variables not "
            f"separated by '/' (templates: {served})"
        )
        return
    template = found[0]
    origin = "this bench's" if str(template.get("name", "")).startswith("abuse-") else "catalog's"
    own = [t for t in found if not str(t.get("name", "")).startswith("abuse-")]
    attack.notes.append(
        f"templates: {served}; {origin} {template['uriTemplate']} used"
        + ("" if own else " (the catalog's own have none with two variables not split by '/')")
    )
    uri = hostile_uri(str(template["uriTemplate"]), sizes.uri_bytes)
    headers, body = modern("resources/read", {"uri": uri}, name=uri)
    reply = attack.post(headers, body, timeout=args.budget)
    attack.notes.append(
        f"resources/read of a {len(uri) / 1000:,.0f} KB URI: {answer_text(reply)}" + error_of(reply)
    )


# -- tasks: one address floods the task slots -------------------------------------------

TASK_FLOOD = 10_000  # task calls of the flooding address (--quick: TASK_FLOOD_QUICK)
TASK_FLOOD_QUICK = 2_000
FLOODER = "198.51.100.7"  # the addresses the clients appear as, behind the trusted proxy
BYSTANDER = "203.0.113.9"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def task_flood_size(args: argparse.Namespace) -> int:
    return TASK_FLOOD_QUICK if args.quick else TASK_FLOOD


def tasks_env(sizes: Sizes, args: argparse.Namespace) -> dict[str, str]:
    return {"MCP_TRUSTED_PROXIES": HOST, "MCP_MAX_TASKS": str(task_flood_size(args))}


def from_address(headers: list[Header], address: str) -> list[Header]:
    return [*headers, ("X-Forwarded-For", address)]


def task_session(attack: Attack, address: str) -> str | None:
    """A 2025-11-25 session of ``address``; None (noted) when refused."""
    reply = attack.post(from_address(legacy_headers(), address), initialize_body(LEGACY))
    session = reply.headers.get("mcp-session-id")
    if reply.status != 200 or not session:
        attack.notes.append(f"{address} initialize: {reply.code}{error_of(reply)}")
        return None
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    attack.post(from_address(legacy_headers(LEGACY, session), address), initialized)
    return session


def legacy_task_call(attack: Attack, address: str, session: str, request_id: int) -> Reply:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "long_job", "arguments": {"seconds": 0}, "task": {}},
        }
    ).encode()
    headers = from_address(legacy_headers(LEGACY, session), address)
    return attack.post(headers, body, timeout=10)


def modern_task_call(attack: Attack, address: str) -> Reply:
    headers, _ = modern("tools/call", name="long_job")
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "long_job",
            "arguments": {"seconds": 0},
            "_meta": meta({"extensions": {TASKS_EXTENSION: {}}}),
        },
    }
    return attack.post(from_address(headers, address), json.dumps(message).encode(), timeout=10)


def attack_tasks(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    flood = task_flood_size(args)
    calls = created = sessions = 0
    codes: Counter[str] = Counter()
    started = time.monotonic()
    session: str | None = None
    try:
        while created < flood and calls < 2 * flood:
            if session is not None:  # refused: this session is done with, and ended
                delete_headers = from_address(legacy_headers(LEGACY, session), FLOODER)
                attack.send("DELETE", delete_headers, b"", timeout=10)
            session = task_session(attack, FLOODER)
            if session is None:
                break
            sessions += 1
            fresh = True
            while created < flood:
                reply = legacy_task_call(attack, FLOODER, session, calls + 1)
                calls += 1
                codes[reply.code] += 1
                if reply.status != 200 or b'"task"' not in reply.body:
                    break
                created += 1
                fresh = False
            if fresh and created < flood:  # a new session got none: the server is full
                break
    finally:
        attack.notes.append(
            f"flooder: {calls:,} task calls from {sessions} sessions in "
            f"{time.monotonic() - started:.1f} s [{summary(codes)}], {created:,} tasks created"
        )
    answers = []
    bystander = task_session(attack, BYSTANDER)
    if bystander is not None:
        reply = legacy_task_call(attack, BYSTANDER, bystander, 1)
        answers.append(f"legacy task {reply.code}{error_of(reply)}")
    reply = modern_task_call(attack, BYSTANDER)
    answers.append(f"modern task {reply.code}{error_of(reply)}")
    attack.notes.append("another address then gets: " + "; ".join(answers))


@dataclass(frozen=True)
class Kind:
    run: Callable[[Attack, Sizes, argparse.Namespace], None]
    env: Callable[[Sizes, argparse.Namespace], dict[str, str]]
    marker: bytes | None = None  # records holding it are counted (they are the earlier ones)


def no_env(sizes: Sizes, args: argparse.Namespace) -> dict[str, str]:
    return {}


# stalled-reader: (streams, updates) at full size and with --quick; the send timeout it sets.
STALL_SIZES = (40, 1_500)
STALL_QUICK = (20, 800)
STALL_TIMEOUT_S = 2.0
STALL_MARGIN_S = 3.0
STALL_PREFIX = "probe://stall/"
# /proc/net/tcp's states (TIME_WAIT, 06, holds nothing: the flood's own closed connections)
TCP_STATES = {"01": "established", "04": "fin-wait-1", "08": "close-wait", "0B": "closing"}


def server_sockets(port: int) -> list[tuple[str, int]]:
    """(state, bytes unsent or unacknowledged) of every TCP socket on 127.0.0.1:``port``
    but the listener (``/proc/net/tcp``)."""
    local = f"0100007F:{port:04X}"
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[3] not in ("0A", "06"):  # LISTEN, TIME_WAIT
                found.append((fields[3], int(fields[4].split(":")[0], 16)))
    return found


def open_streams_gauge(port: int) -> str:
    """The server's own ``mcp_open_streams`` gauges (``listen 20, legacy_get 20``), or why not."""
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as error:
        return f"no /metrics ({error})"
    finally:
        connection.close()
    kinds = [
        line.split('kind="', 1)[1].replace('"}', "").rsplit(".", 1)[0]
        for line in text.splitlines()
        if line.startswith("mcp_open_streams{")
    ]
    return ", ".join(kinds) or "no mcp_open_streams gauge"


def open_stalled_stream(port: int, request: bytes) -> socket.socket | None:
    """A raw connection that sends ``request``, reads the response head and the first event,
    then never reads again; None if the stream did not open."""
    sock = socket.create_connection((HOST, port), timeout=5)
    try:
        sock.sendall(request)
        seen = b""
        while b"\r\n\r\n" not in seen or b"data:" not in seen:
            chunk = sock.recv(4096)
            if not chunk:
                break
            seen += chunk
        if not seen.startswith(b"HTTP/1.1 200"):
            sock.close()
            return None
        return sock
    except OSError:
        sock.close()
        return None


def raw_stream_request(verb: str, port: int, headers: Sequence[Header], body: bytes) -> bytes:
    head = [f"{verb} {PATH} HTTP/1.1", f"Host: {HOST}:{port}"]
    head += [f"{name}: {value!s}" for name, value in headers]
    if body:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def stalled_requests(attack: Attack, count: int) -> list[bytes]:
    """Half listen streams, half legacy GET streams (one session each, subscribed)."""
    listen = {"notifications": {"resourceSubscriptions": [STALL_PREFIX]}}
    requests = []
    for index in range(count):
        if index % 2 == 0:
            headers, body = modern("subscriptions/listen", listen, request_id=index)
            headers = [(n, v) for n, v in headers if n != "Accept"]
            headers.append(("Accept", "text/event-stream"))
            requests.append(raw_stream_request("POST", attack.port, headers, body))
            continue
        session = open_session(attack, LEGACY)
        if session is None:
            continue
        subscribe = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "resources/subscribe",
                "params": {"uri": STALL_PREFIX},
            }
        ).encode()
        attack.post(legacy_headers(LEGACY, session), subscribe)
        get_headers = [
            ("Accept", "text/event-stream"),
            ("MCP-Protocol-Version", LEGACY),
            ("Mcp-Session-Id", session),
        ]
        requests.append(raw_stream_request("GET", attack.port, get_headers, b""))
    return requests


def attack_stalled_reader(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    streams, updates = STALL_QUICK if args.quick else STALL_SIZES
    socks = []
    try:
        for request in stalled_requests(attack, streams):
            attack.check()
            sock = open_stalled_stream(attack.port, request)
            attack.statuses["stream open" if sock else "stream refused"] += 1
            if sock is not None:
                socks.append(sock)
        before = proc_status(attack.pid).get("VmRSS", 0)
        flood_start = time.monotonic()
        filler = "x" * 1900
        for n in range(updates):
            uri = f"{STALL_PREFIX}{n}/{filler}"
            headers, body = modern(
                "tools/call",
                {"name": "touch_resource", "arguments": {"uri": uri}},
                name="touch_resource",
            )
            attack.post(headers, body, timeout=10)
        flooded = time.monotonic()
        peak = server_sockets(attack.port)
        # When the last stalled socket went: the last one holding over 64 KiB unsent (the
        # healthz poller's holds a response for an instant now and then). None: never.
        cleared: float | None = None
        while time.monotonic() < flooded + STALL_TIMEOUT_S + STALL_MARGIN_S:
            stalled = [unsent for _, unsent in server_sockets(attack.port) if unsent > 64 * KIB]
            if stalled:
                cleared = None
            elif cleared is None:
                cleared = time.monotonic() - flooded
            time.sleep(0.1)
        held = server_sockets(attack.port)
        gauges = open_streams_gauge(attack.port)
        after = proc_status(attack.pid).get("VmRSS", 0)
        established = [unsent for state, unsent in held if state == "01"]
        others = Counter(TCP_STATES.get(state, state) for state, _ in held if state != "01")
        attack.notes.append(
            f"{len(socks)} streams stalled, flood of {updates:,} updates in "
            f"{flooded - flood_start:.1f} s; right after it: {len(peak)} server sockets, "
            f"{mb(sum(unsent for _, unsent in peak))} unsent; the last stalled one gone "
            + (f"{cleared:.1f} s after it" if cleared is not None else "- (never)")
        )
        attack.notes.append(
            f"send timeout + {STALL_MARGIN_S:g} s later: {len(established)} server sockets "
            f"established (one is the healthz poller's; {mb(sum(established))} unsent), others "
            f"{dict(others) or 'none'} ({mb(sum(u for s, u in held if s != '01'))} unsent); "
            f"open streams (the server's gauges): {gauges}; "
            f"RSS {before / MIB:,.0f} -> {after / MIB:,.0f} MiB"
        )
    finally:
        for sock in socks:
            sock.close()


def stalled_env(sizes: Sizes, args: argparse.Namespace) -> dict[str, str]:
    return {
        "MCP_SEND_TIMEOUT_S": str(STALL_TIMEOUT_S),
        "MCP_MAX_STREAMS_PER_CLIENT": "0",
        "MCP_MAX_SESSIONS_PER_CLIENT": "0",
    }


KINDS: dict[str, Kind] = {
    "batch": Kind(attack_batch, no_env),
    "headers": Kind(attack_headers, no_env),
    "body-keys": Kind(attack_body_keys, no_env),
    "init-caps": Kind(attack_init_caps, lambda s, a: {"MCP_MAX_SESSIONS_PER_CLIENT": "0"}),
    "user-agent": Kind(attack_user_agent, no_env, marker=f'"{NORMAL_UA} #'.encode()),
    "template": Kind(attack_template, lambda s, a: {"MCP_CATALOG": a.template_catalog}),
    "tasks": Kind(attack_tasks, tasks_env),
    "stalled-reader": Kind(attack_stalled_reader, stalled_env),
}


# -- skills-alias (its own block: the class, its entry in CLASSES and KINDS) ----------------

SKILLS_CATALOG = "abuse_skills_catalog:catalog"
SKILLS_UNREAD = 10


def held_unread(attack: Attack, count: int, hold_s: float) -> tuple[int, int]:
    """``count`` skills/list requests on their own connections, never read, held ``hold_s``
    seconds (or to the budget): (peak RSS while held, connections the server accepted)."""
    headers, body = modern("skills/list")
    head = [f"POST {PATH} HTTP/1.1\r\nHost: {HOST}:{attack.port}\r\n".encode()]
    head += [f"{name}: {value!s}\r\n".encode() for name, value in headers]
    payload = b"".join(head) + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    sockets: list[socket.socket] = []
    peak = 0
    try:
        for _ in range(count):
            attack.check()
            with contextlib.suppress(OSError):
                sock = socket.create_connection((HOST, attack.port), timeout=5)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KIB)  # read nothing
                sockets.append(sock)
                sock.sendall(payload)
                attack.sent += 1
                attack.statuses["unread"] += 1
        until = min(time.monotonic() + hold_s, attack.deadline)
        while time.monotonic() < until and not attack.abort.is_set():
            peak = max(peak, proc_status(attack.pid).get("VmRSS", 0))
            time.sleep(RSS_INTERVAL_S)
    finally:
        for sock in sockets:
            sock.close()
    return peak, len(sockets)


def attack_skills_alias(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    headers, body = modern("skills/list")
    reply = attack.post(headers, body, timeout=min(60.0, args.budget))
    answer = reply.json() if reply.status == 200 else None
    entries = answer.get("result", {}).get("skills", []) if isinstance(answer, dict) else []
    served = [str(entry.get("uri")) for entry in entries]
    attack.notes.append(f"skills/list: {answer_text(reply)}{error_of(reply)}; skills {served}")
    before, start = proc_status(attack.pid).get("VmRSS", 0), time.monotonic()
    peak, held = held_unread(attack, SKILLS_UNREAD, 3.0 if args.quick else 5.0)
    attack.notes.append(
        f"{held} skills/list unread for {time.monotonic() - start:.1f} s: RSS peak "
        f"{mib(peak)} MiB ({(peak - before) / MIB:+,.0f})"
    )


CLASSES = (*CLASSES, "skills-alias")
KINDS["skills-alias"] = Kind(attack_skills_alias, lambda s, a: {"MCP_CATALOG": SKILLS_CATALOG})


# -- log-injection and live-report (their own block: the classes, their entries in CLASSES and
# KINDS) ----------------------------------------------------------------------------------------

# log-injection: (calls, client name bytes, argument bytes, refused Hosts) full and --quick.
LOG_SIZES = {False: (20, 3_000_000, 64 * KIB, 200), True: (5, 3_000_000, 64 * KIB, 50)}
FORGED = "2026-01-01 00:00:00,000 WARNING server.app: FORGED by the abuse bench"
# live-report: distinct clients, full and --quick.
LIVE_CLIENTS = {False: 10_000, True: 2_000}


def server_log(attack: Attack) -> Path:
    """The server's log: whatever its stderr is (the bench points it at ``server.log``)."""
    return Path(os.readlink(f"/proc/{attack.pid}/fd/2"))


def log_lines_since(path: Path, offset: int) -> list[bytes]:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().split(b"\n")


def attack_log_injection(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    calls, name_bytes, text_bytes, hosts = LOG_SIZES[args.quick]
    path = server_log(attack)
    start = path.stat().st_size
    breaks = "\n" + FORGED + "\u2028" + FORGED + "\n"
    answered: Counter[str] = Counter()
    for index in range(calls):
        info = {"name": f"log-{index}" + breaks + "n" * name_bytes, "version": "1" + breaks}
        message = {
            "jsonrpc": "2.0",
            "id": index,
            "method": "tools/call",
            "params": {
                "name": "abuse_log",
                "arguments": {"text": f"t{index}" + breaks + "t" * text_bytes},
                "_meta": {**meta(), "io.modelcontextprotocol/clientInfo": info},
            },
        }
        headers, _ = modern("tools/call", name="abuse_log")
        answered[attack.post(headers, json.dumps(message).encode(), timeout=30).code] += 1
    time.sleep(0.5)  # the log handler writes as it goes; let the last lines land
    lines = log_lines_since(path, start)
    written = path.stat().st_size - start
    forged = sum(line.startswith(FORGED[:10].encode()) and b"FORGED" in line for line in lines)
    attack.notes.append(
        f"{calls} calls with a {name_bytes / 1e6:g} MB client name [{summary(answered)}]: "
        f"log {written / max(calls, 1):,.0f} bytes/request, {len(lines) - 1} lines, longest "
        f"{max(map(len, lines)):,} bytes, forged lines {forged}"
    )
    start = path.stat().st_size
    refused: Counter[str] = Counter()
    host = "evil.example" + "h" * (8 * KIB - 100)
    headers, body = modern("tools/list")
    for _ in range(hosts):
        refused[attack.post([("Host", host), *headers], body, timeout=10).code] += 1
    time.sleep(0.5)
    lines = [line for line in log_lines_since(path, start) if line]
    written = path.stat().st_size - start
    attack.notes.append(
        f"{hosts} refused 8 KB Hosts [{summary(refused)}]: {len(lines)} log lines "
        f"({sum(b'MCP_ALLOWED_HOSTS' in line for line in lines)} about the Host), "
        f"{written / max(hosts, 1):,.0f} bytes/request, longest "
        f"{max(map(len, lines), default=0):,} bytes"
    )


def fetch_report(port: int) -> tuple[int, int, float]:
    """``GET /admin/report?format=json`` from loopback: status, bytes, seconds."""
    start = time.monotonic()
    connection = http.client.HTTPConnection(HOST, port, timeout=120)
    try:
        connection.request("GET", "/admin/report?format=json")
        answer = connection.getresponse()
        return answer.status, len(answer.read()), time.monotonic() - start
    finally:
        connection.close()


def attack_live_report(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    clients = LIVE_CLIENTS[args.quick]
    answered: Counter[str] = Counter()
    sent = 0
    try:
        for index in range(clients):
            distinct = f"{index:06d}-" + "x" * 193
            info = {"name": "client-" + distinct, "version": "v-" + distinct}
            message = {
                "jsonrpc": "2.0",
                "id": index,
                "method": "tools/call",
                "params": {
                    "name": "echo",
                    "arguments": {"text": "hi"},
                    "_meta": {**meta(), "io.modelcontextprotocol/clientInfo": info},
                },
            }
            headers, _ = modern("tools/call", name="echo", user_agent="agent-" + distinct)
            answered[attack.post(headers, json.dumps(message).encode(), timeout=10).code] += 1
            sent += 1
    finally:
        time.sleep(1.0)  # the records writer hands batches to the live report every 200 ms
        rss = proc_status(attack.pid).get("VmRSS", 0)
        attack.notes.append(
            f"{sent:,} distinct clients [{summary(answered)}]: RSS {mib(rss)} MiB once counted"
        )
    status, size, seconds = fetch_report(attack.port)
    attack.notes.append(f"live report {status} in {seconds:.2f} s, {mb(size)}")


CLASSES = (*CLASSES, "log-injection", "live-report")
KINDS["log-injection"] = Kind(
    attack_log_injection,
    lambda s, a: {"MCP_CATALOG": a.template_catalog, "MCP_LOG_LEVEL": "info"},
)
KINDS["live-report"] = Kind(attack_live_report, lambda s, a: {"MCP_REPORT_LIVE": "true"})


# -- HTTP+SSE transport classes: sse-drop, sse-big, sse-big-redis, sse-dup-ids, sse-slow-reader
# (issue 34; their own block: the classes, their entries in CLASSES and KINDS) -----------------

SSE_PATH = "/sse"
SSE_BIG = 3_500_000
# (drops, big answers, big answers with Redis), full and --quick.
SSE_SIZES = {False: (70, 40, 20), True: (66, 10, 10)}
SSE_DUPLICATES = 40
SSE_SLOW_CALLS, SSE_SLOW_STEPS, SSE_SLOW_ECHO = 10, 45, 500_000


def sse_body(request_id: int | str, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def sse_tool(request_id: int | str, name: str, **arguments: Any) -> bytes:
    return sse_body(request_id, "tools/call", {"name": name, "arguments": arguments})


SSE_INITIALIZE = json.dumps(
    initialize("2024-11-05", client_info={"name": "abuse-bench-sse", "version": "1.0"}, id=1)
).encode()


class SseStream:
    """A raw ``GET /sse`` on a socket of its own (``rcvbuf``: a small receive buffer, for a
    slow reader): its status, the URL its endpoint event names, and the messages read."""

    def __init__(self, port: int, *, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect((HOST, port))
        self.sock.sendall(
            f"GET {SSE_PATH} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n"
            f"User-Agent: {BENCH_UA}\r\n\r\n".encode()
        )
        self.raw = bytearray()  # chunked, as received
        self.body = bytearray()  # de-chunked, not yet parsed into events
        self.messages: list[dict[str, Any]] = []
        self.ended = False
        self.status: int | None = None
        self.endpoint: str | None = None
        while b"\r\n\r\n" not in self.raw and self._recv():
            pass
        head, _, rest = bytes(self.raw).partition(b"\r\n\r\n")
        if head:
            self.status = int(head.split(b" ", 2)[1])
        self.raw = bytearray(rest)
        if self.status == 200:
            self.read(5, lambda: self.endpoint is not None)

    def _recv(self, size: int = 65536) -> bool:
        try:
            chunk = self.sock.recv(size)
        except TimeoutError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.ended = True
            return False
        self.raw += chunk
        return True

    def _parse(self) -> None:
        while True:  # de-chunk what is complete
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                break
            size = int(bytes(self.raw[:line_end]).split(b";")[0] or b"0", 16)
            if len(self.raw) < line_end + 2 + size + 2:
                break
            self.body += self.raw[line_end + 2 : line_end + 2 + size]
            del self.raw[: line_end + 2 + size + 2]
            if size == 0:
                self.ended = True
        while (frame_end := self.body.find(b"\r\n\r\n")) >= 0:
            frame = bytes(self.body[:frame_end])
            del self.body[: frame_end + 4]
            for line in frame.split(b"\r\n"):
                if line.startswith(b"data: {"):
                    self.messages.append(json.loads(line[6:]))
                elif line.startswith(b"data: /") and self.endpoint is None:
                    self.endpoint = line[6:].decode()

    def read(
        self,
        seconds: float,
        done: Callable[[], bool] | None = None,
        *,
        size: int = 65536,
        pause: float = 0.0,
    ) -> None:
        """Read for ``seconds`` at most, or until ``done`` (``size`` bytes a read, ``pause`` s
        between reads)."""
        deadline = time.monotonic() + seconds
        self.sock.settimeout(SLICE_S)
        while True:
            self._parse()
            if self.ended or time.monotonic() >= deadline or (done is not None and done()):
                return
            if not self._recv(size):
                self._parse()
                return
            if pause:
                time.sleep(pause)

    def read_until(self, done: Callable[[], bool], seconds: float, **how: Any) -> bool:
        self.read(seconds, done, **how)
        return done()

    def answers(self, request_id: Any) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("id") == request_id and "method" not in m]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def answered(stream: SseStream, request_id: Any) -> Callable[[], bool]:
    return lambda: bool(stream.answers(request_id))


def sse_post(attack: Attack, endpoint: str, body: bytes) -> int | None:
    """One POST to the endpoint URL the stream named; its status (counted like every other)."""
    attack.check()
    attack.sent += 1
    connection = http.client.HTTPConnection(HOST, attack.port, timeout=30)
    try:
        connection.request(
            "POST",
            endpoint,
            body,
            {"Content-Type": "application/json", "User-Agent": BENCH_UA},
        )
        response = connection.getresponse()
        response.read()
        attack.statuses[str(response.status)] += 1
        return response.status
    except (OSError, http.client.HTTPException):
        attack.statuses["reset"] += 1
        return None
    finally:
        connection.close()


def sse_session(attack: Attack, **how: Any) -> SseStream | None:
    """A stream whose session answered its initialize (None, noted, otherwise)."""
    attack.sent += 1
    stream = SseStream(attack.port, **how)
    attack.statuses[str(stream.status)] += 1
    if stream.status != 200 or stream.endpoint is None:
        attack.notes.append(f"GET {SSE_PATH} answered {stream.status}")
        stream.close()
        return None
    sse_post(attack, stream.endpoint, SSE_INITIALIZE)
    if not stream.read_until(lambda: bool(stream.answers(1)), 10):
        attack.notes.append("initialize got no answer on the stream")
        stream.close()
        return None
    return stream


def attack_sse_drop(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    drops = SSE_SIZES[args.quick][0]
    dropped: list[str] = []
    for _ in range(drops):
        stream = sse_session(attack)
        if stream is None or stream.endpoint is None:
            break
        for request_id in (2, 3):  # two calls of 10 s running
            sse_post(attack, stream.endpoint, sse_tool(request_id, "count_slowly", steps=50))
        time.sleep(0.05)
        stream.close()  # the client goes: laptop sleep, a restart, a network change
        dropped.append(stream.endpoint)
    time.sleep(1.0)
    still = Counter(str(sse_post(attack, each, sse_tool(9, "echo", text="x"))) for each in dropped)
    attack.sent += 1
    after = SseStream(attack.port)
    attack.statuses[str(after.status)] += 1
    after.close()
    attack.notes.append(
        f"{len(dropped)} streams dropped with 2 calls running; a POST on each then: "
        f"{summary(still)}; a new GET {SSE_PATH}: {after.status}"
    )


def attack_sse_big(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    answers = SSE_SIZES[args.quick][1]
    stream = sse_session(attack)
    if stream is None or stream.endpoint is None:
        return
    received = 0
    started = time.monotonic()
    try:
        for request_id in range(2, 2 + answers):
            sse_post(attack, stream.endpoint, sse_tool(request_id, "echo", text="x" * SSE_BIG))
            if stream.read_until(answered(stream, request_id), 30):
                received += 1
            stream.messages.clear()
        time.sleep(1.0)  # the RSS is measured after the attack, the stream still open
    finally:
        attack.notes.append(
            f"{received}/{answers} answers of {mb(SSE_BIG)} read in "
            f"{time.monotonic() - started:.1f} s, the session kept open"
        )
        SSE_OPEN.append(stream)


# The streams left open until the RSS is measured (closed when the next class starts).
SSE_OPEN: list[SseStream] = []


class RedisForBench:
    """A redis-server of this run's own, on a free loopback port (stopped at exit)."""

    process: subprocess.Popen[bytes] | None = None
    port = 0

    @classmethod
    def start(cls) -> str:
        found = shutil.which("redis-server")
        if found is None:
            raise RuntimeError("redis-server is not installed (sse-big-redis needs it)")
        cls.stop()
        cls.port = free_port()
        cls.process = subprocess.Popen(
            [found, "--port", str(cls.port), "--bind", HOST, "--save", "", "--appendonly", "no"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                cls.used_memory()
                return f"redis://{HOST}:{cls.port}/0"
            time.sleep(0.05)
        raise RuntimeError("the bench's redis-server did not start")

    @classmethod
    def used_memory(cls) -> int:
        with socket.create_connection((HOST, cls.port), timeout=5) as sock:
            sock.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
            data = b""
            while b"used_memory:" not in data or not data.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        for line in data.split(b"\r\n"):
            if line.startswith(b"used_memory:"):
                return int(line.split(b":")[1])
        raise OSError("no used_memory in INFO")

    @classmethod
    def stop(cls) -> None:
        if cls.process is not None:
            cls.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                cls.process.wait(5)
            if cls.process.poll() is None:
                cls.process.kill()
            cls.process = None


def sse_redis_env(sizes: Sizes, args: argparse.Namespace) -> dict[str, str]:
    return {"MCP_REDIS_URL": RedisForBench.start(), "MCP_STATE_SECRET": "abuse-bench-" * 4}


def attack_sse_big_redis(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    answers = SSE_SIZES[args.quick][2]
    before = RedisForBench.used_memory()
    stream = sse_session(attack)
    if stream is None or stream.endpoint is None:
        return
    received = 0
    for request_id in range(2, 2 + answers):
        sse_post(attack, stream.endpoint, sse_tool(request_id, "echo", text="x" * SSE_BIG))
        if stream.read_until(answered(stream, request_id), 30):
            received += 1
        stream.messages.clear()
    time.sleep(1.0)  # the mirror's writer has written by now
    during = RedisForBench.used_memory()
    stream.close()
    time.sleep(1.0)
    after = RedisForBench.used_memory()
    attack.notes.append(
        f"{received}/{answers} answers of {mb(SSE_BIG)}: Redis used_memory "
        f"{(during - before) / MIB:+,.1f} MiB with the session open, "
        f"{(after - before) / MIB:+,.1f} MiB 1 s after it ended"
    )


def attack_sse_dup_ids(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    stream = sse_session(attack)
    if stream is None or stream.endpoint is None:
        return
    try:
        slow = sse_tool(7, "count_slowly", steps=10, delay_ms=400)  # 4 s each
        accepted = Counter(
            str(sse_post(attack, stream.endpoint, slow)) for _ in range(SSE_DUPLICATES)
        )
        stream.read(1.0)
        refused = [m for m in stream.answers(7) if m.get("error", {}).get("code") == -32600]
        cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}'
        sse_post(attack, stream.endpoint, cancel)
        stream.read(6.0)  # past the calls' 4 s
        results = [m for m in stream.answers(7) if "result" in m]
        attack.notes.append(
            f"{SSE_DUPLICATES} POSTs with id 7 ({summary(accepted)}): {len(refused)} refused "
            f"with -32600, {len(results)} answered after notifications/cancelled"
        )
    finally:
        stream.close()


def attack_sse_slow_reader(attack: Attack, sizes: Sizes, args: argparse.Namespace) -> None:
    stream = sse_session(attack, rcvbuf=4096)
    if stream is None or stream.endpoint is None:
        return
    try:
        level = sse_body("level", "logging/setLevel", {"level": "debug"})
        sse_post(attack, stream.endpoint, level)
        counting = range(100, 100 + SSE_SLOW_CALLS)
        echoes = range(200, 200 + SSE_SLOW_CALLS)
        calls = [*counting, *echoes]
        for echo in echoes:  # 2 MB the reader has not read yet ...
            sse_post(attack, stream.endpoint, sse_tool(echo, "echo", text="e" * SSE_SLOW_ECHO))
        for request_id in counting:  # ... and 900 messages behind them
            body = json.loads(sse_tool(request_id, "count_slowly", steps=SSE_SLOW_STEPS))
            body["params"]["arguments"]["delay_ms"] = 0
            body["params"]["_meta"] = {"progressToken": f"p{request_id}"}
            sse_post(attack, stream.endpoint, json.dumps(body).encode())
        time.sleep(1.0)  # slow, not stalled: far within MCP_SEND_TIMEOUT_S
        stream.read_until(
            lambda: all(stream.answers(r) for r in calls), 40, size=16384, pause=0.002
        )
        got = sum(1 for r in calls if stream.answers(r))
        logs = sum(1 for m in stream.messages if m.get("method") == "notifications/message")
        progress_seen = sum(
            1 for m in stream.messages if m.get("method") == "notifications/progress"
        )
        wanted = SSE_SLOW_CALLS * SSE_SLOW_STEPS
        attack.notes.append(
            f"slow reader: {got}/{len(calls)} answers, {logs}/{wanted} logs, "
            f"{progress_seen}/{wanted} progress; stream "
            + ("closed by the server" if stream.ended else "still open")
        )
    finally:
        stream.close()


def sse_env(sizes: Sizes, args: argparse.Namespace) -> dict[str, str]:
    for stream in SSE_OPEN:
        stream.close()
    SSE_OPEN.clear()
    return {}


CLASSES = (*CLASSES, "sse-drop", "sse-big", "sse-big-redis", "sse-dup-ids", "sse-slow-reader")
KINDS["sse-drop"] = Kind(attack_sse_drop, sse_env)
KINDS["sse-big"] = Kind(attack_sse_big, sse_env)
KINDS["sse-big-redis"] = Kind(
    attack_sse_big_redis, lambda s, a: {**sse_env(s, a), **sse_redis_env(s, a)}
)
KINDS["sse-dup-ids"] = Kind(attack_sse_dup_ids, sse_env)
KINDS["sse-slow-reader"] = Kind(attack_sse_slow_reader, sse_env)


# -- records -------------------------------------------------------------------------------


@dataclass
class RecordCount:
    lines: int = 0
    requests: int = 0
    marked: int = 0
    files: int = 0
    size: int = 0


def count_records(workdir: Path, marker: bytes | None) -> RecordCount:
    """Lines of every records*.jsonl* file (gzipped rotations too)."""
    count = RecordCount()
    for path in sorted(workdir.glob("records*.jsonl*")):
        count.files += 1
        count.size += path.stat().st_size
        gzipped = path.name.endswith(".gz")
        with (
            contextlib.suppress(OSError, EOFError),
            gzip.open(path, "rb") if gzipped else path.open("rb") as lines,
        ):
            for line in lines:
                count.lines += 1
                count.requests += b'"kind":"request"' in line[:64]
                count.marked += marker is not None and marker in line
    return count


# -- running a class -----------------------------------------------------------------------


@dataclass
class Result:
    name: str
    sent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    healthz: tuple[float, float, int, int] = (0.0, 0.0, 0, 0)
    rss_before: int = 0
    rss_after: int = 0
    hwm: int = 0
    records: RecordCount | None = None
    stopped: Stopped | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    marker: bool = False


def summary(codes: Counter[str]) -> str:
    return " ".join(f"{code}:{count:,}" for code, count in sorted(codes.items())) or "-"


def run_class(name: str, sizes: Sizes, args: argparse.Namespace, tmp: Path, until: float) -> Result:
    """One class on its own fresh server; ``until``: the whole run's deadline (monotonic)."""
    kind = KINDS[name]
    result = Result(name, marker=kind.marker is not None)
    workdir = tmp / name
    workdir.mkdir()
    progress(f"[{name}] starting a server")
    server = start_server(args, workdir, kind.env(sizes, args))
    try:
        attack = Attack(server.port, server.pid, time.monotonic() + 30)
        try:
            warmed = warm_up(attack)
        except OutOfBudget:
            warmed = False
            attack.notes.append("warm-up took over 30 s")
        result.rss_before = proc_status(server.pid).get("VmRSS", 0)
        attack.deadline = min(time.monotonic() + args.budget, until)
        if warmed:
            run_attack(attack, kind, sizes, args, server, result)
        result.sent, result.statuses, result.notes = attack.sent, attack.statuses, attack.notes
        status = proc_status(server.pid)
        result.rss_after, result.hwm = status.get("VmRSS", 0), status.get("VmHWM", 0)
    finally:
        progress(f"[{name}] stopping the server (pid {server.pid})")
        # What is left of the whole run's budget, but never less than 10 s.
        wait = min(args.stop_timeout, max(10.0, until - time.monotonic()))
        result.stopped = stop_server(server, wait)
    result.records = count_records(workdir, kind.marker)
    return result


def run_attack(
    attack: Attack,
    kind: Kind,
    sizes: Sizes,
    args: argparse.Namespace,
    server: Server,
    result: Result,
) -> None:
    poller = HealthPoller(server.port)
    watch = RssWatch(server, args.max_rss_mib * MIB, attack.abort)
    poller.start()
    watch.start()
    start = time.monotonic()
    progress(f"[{result.name}] attacking (budget {attack.left():.0f} s)")
    try:
        kind.run(attack, sizes, args)
    except OutOfBudget as stop:
        attack.notes.append(f"STOPPED: {watch.reason or stop}")
    finally:
        result.seconds = time.monotonic() - start
        result.healthz = poller.finish()
        watch.finish()


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- output --------------------------------------------------------------------------------


def mib(size: int) -> str:
    return f"{size / MIB:,.0f}"


def records_text(result: Result) -> str:
    records = result.records
    if records is None:
        return "-"
    text = f"{records.lines:,} lines / {result.sent:,} sent"
    if records.lines != records.requests:
        text += f" ({records.requests:,} request records)"
    return text + f", {records.files} file(s), {mb(records.size)} on disk"


def line_for(result: Result) -> str:
    worst, median, polls, failed = result.healthz
    parts = [
        f"[{result.name}] sent {result.sent:,} ({summary(result.statuses)}) "
        f"in {result.seconds:.1f} s",
        f"healthz worst {worst:.3f} s (median {median * 1000:.1f} ms, {polls:,} polls, "
        f"{failed} failed)",
        f"RSS {mib(result.rss_before)} -> {mib(result.rss_after)} MiB "
        f"({(result.rss_after - result.rss_before) / MIB:+,.0f}), VmHWM {mib(result.hwm)} MiB",
        f"records {records_text(result)}",
    ]
    if result.marker and result.records is not None:
        parts.append(f"earlier (marked) records still kept: {result.records.marked:,}")
    if result.stopped is not None:
        parts.append(f"stop: {result.stopped.text()}")
    parts.extend(result.notes)
    return " | ".join(parts)


def table(results: list[Result]) -> str:
    header = (
        "class",
        "sent",
        "statuses",
        "healthz worst",
        "RSS before->after MiB",
        "growth",
        "VmHWM MiB",
        "records/sent",
        "stop",
    )
    rows = [header]
    for result in results:
        worst = result.healthz[0]
        records = result.records.lines if result.records is not None else 0
        kept = f" (kept {result.records.marked})" if result.marker and result.records else ""
        stop = result.stopped
        rows.append(
            (
                result.name,
                f"{result.sent:,}",
                summary(result.statuses),
                f"{worst:.3f} s",
                f"{mib(result.rss_before)}->{mib(result.rss_after)}",
                f"{(result.rss_after - result.rss_before) / MIB:+,.0f} MiB",
                mib(result.hwm),
                f"{records:,}/{result.sent:,}{kept}",
                ("KILL" if stop.killed else f"rc {stop.returncode}") + f" {stop.seconds:.1f} s"
                if stop
                else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Hostile request shapes against a fresh server per class; see the docstring."
    )
    parser.add_argument(
        "--classes", default=",".join(CLASSES), help="comma-separated: " + ",".join(CLASSES)
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--server-root", type=Path, default=ROOT, help="cwd of python -m server")
    parser.add_argument(
        "--python", help="the server's interpreter (default: <root>/.venv/bin/python or this one)"
    )
    parser.add_argument(
        "--catalog", default="probe", help="MCP_CATALOG for every class but template"
    )
    parser.add_argument(
        "--template-catalog", default="abuse_catalog:catalog", help="MCP_CATALOG for template"
    )
    parser.add_argument(
        "--budget", type=float, default=60.0, help="seconds of attack per class (max 120)"
    )
    parser.add_argument(
        "--total-budget", type=float, default=290.0, help="seconds for the whole run (max 900)"
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        help="SIGTERM to SIGKILL, seconds (max 120; never past the total budget + 10 s)",
    )
    parser.add_argument(
        "--batch-timeout", type=float, default=60.0, help="client timeout per batch"
    )
    parser.add_argument("--max-rss-mib", type=int, default=6144, help="end an attack past this RSS")
    parser.add_argument(
        "--max-body", type=int, default=4 * MIB, help="the server's body limit (to warn)"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra server setting"
    )
    parser.add_argument(
        "--ua-pause", type=float, default=0.25, help="seconds between big User-Agent requests"
    )
    parser.add_argument("--keep", action="store_true", help="keep the records and server logs")
    for name in Sizes.__dataclass_fields__:
        parser.add_argument("--" + name.replace("_", "-"), type=int, help=f"size: {name}")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.classes.split(",") if name.strip()]
    unknown = [name for name in names if name not in KINDS]
    if unknown or not names:
        parser.error(f"unknown classes {unknown}; choose from {', '.join(CLASSES)}")
    args.names = names
    args.budget = min(args.budget, 120.0)
    args.total_budget = min(args.total_budget, 900.0)
    args.stop_timeout = min(args.stop_timeout, 120.0)
    args.ua_pause = max(0.0, min(args.ua_pause, 1.0))
    args.server_root = args.server_root.resolve()
    if args.python is None:
        venv = args.server_root / ".venv" / "bin" / "python"
        args.python = str(venv) if venv.exists() else sys.executable
    base = QUICK if args.quick else FULL
    chosen = {}
    for name in Sizes.__dataclass_fields__:
        value = getattr(args, name)
        chosen[name] = (
            getattr(base, name) if value is None else max(1, min(value, getattr(LIMITS, name)))
        )
    args.sizes = Sizes(**chosen)
    return args


def server_package(args: argparse.Namespace) -> str:
    """Where ``import server`` resolves for the server (to show which code is measured)."""
    env = server_env(args, 0, Path(tempfile.gettempdir()), {})
    found = subprocess.run(
        [args.python, "-c", "import server; print(server.__file__)"],
        cwd=args.server_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return found.stdout.strip() or found.stderr.strip()[-300:]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the server
    started = time.monotonic()
    progress(f"server code: {server_package(args)} (python {args.python})")
    if (args.server_root / ".env").exists():
        progress(f"note: {args.server_root / '.env'} exists; settings not set here come from it")
    progress(f"sizes: {args.sizes}")
    tmp = Path(tempfile.mkdtemp(prefix="mcp-abuse-"))
    results: list[Result] = []
    try:
        for name in args.names:
            if started + args.total_budget - time.monotonic() < 5:
                print(f"[{name}] not run: the total budget ({args.total_budget:g} s) is spent")
                continue
            try:
                result = run_class(name, args.sizes, args, tmp, started + args.total_budget)
            except RuntimeError as failure:
                print(f"[{name}] failed: {failure}")
                continue
            results.append(result)
            print(line_for(result), flush=True)
    finally:
        RedisForBench.stop()
        sse_env(args.sizes, args)
        if args.keep:
            progress(f"records and server logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(results))
    print(f"\nwhole run: {time.monotonic() - started:.0f} s; sizes: {args.sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
