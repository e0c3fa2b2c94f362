"""HTTP benchmark: this server against a bare ASGI limit and the official Python SDK.

    python tests/bench/http_bench.py            # 16 and 64 connections, 3 repeats (< 15 min)
    python tests/bench/http_bench.py --quick    # 16 connections, 1 s runs (< 4 min)
    python tests/bench/http_bench.py --ab-root ../base   # adds base+rec: another checkout
    python tests/bench/http_bench.py --profile  # py-spy on this server under tools/call load

Starts every server once, all pinned to one CPU (``taskset``), and drives them one at a time
with ``wrk`` (one thread, pinned to another CPU, a Lua script for the POST body and the MCP
headers), interleaved: for each repeat, for each connection count, for each workload, every
server in turn (A B C D A B C D ..., the order rotated per repeat), so drift on a shared
machine spreads over all of them. ``--connections 1 16 64`` adds the 1-connection rows.

The tools come from one module this script writes, ``bench_catalog.py``: ``async def echo``
and ``def echo_sync`` (the same body, unstructured ``str`` results), 100 generated tools with
typed, described parameters for ``tools/list``, and this server's catalog factories
(``catalog_calls``: echo and echo_sync; ``catalog_1``, ``catalog_100``), which import only the
public ``server`` API when called, so an older checkout serves them too and the SDK's process
imports the module for the functions alone. The servers:

- ``this+rec`` / ``this-rec``: ``python -m server`` with request records on (``MCP_RECORDS=file``
  into a temp dir; no gzip on rotation, so no compression burst lands in another server's run)
  and off (``MCP_RECORDS=none``), one process per catalog;
- ``this-met``: as ``this+rec`` with the metrics off (``MCP_METRICS=false``), on the async
  ``tools/call`` only, for the cost of counting every request for ``/metrics``;
- ``base+rec`` (with ``--ab-root PATH``): as ``this+rec``, from the other checkout's
  ``server/``, in the same interleaved run: before and after side by side (``--server-root``
  still picks the checkout measured as ``this``);
- ``limit``: a bare ASGI callable (uvicorn, uvloop, httptools, orjson) that parses the body for
  the id and answers a fixed result spliced from cached bytes (the ones ``this+rec`` answered),
  no validation: the ceiling; it runs in every workload's group, next to the others;
- ``sdk``: the official SDK (``mcp==2.3.0``, installed by this script into
  ``.cache/bench-sdk-venv``) as ``MCPServer`` with ``streamable_http_app(stateless_http=True,
  json_response=True)``, its fastest mode, under the same uvicorn settings, serving the same
  functions (echo and echo_sync unstructured, so both answer the same content; it runs sync
  tools on its event loop).

Workloads: modern (2026-07-28) ``tools/call`` of ``echo`` and of ``echo_sync``; the same two
in the legacy era (2025-11-25) on an open session (this server: initialize once, the session id
in the Lua headers; the SDK: its stateless mode has no sessions, so it answers each legacy call
on its own); modern ``tools/list`` with 1 and with 100 tools (~44 KB, cached by this server),
and ``list100rule``: the 100 tools through a per-caller visibility rule (``MCP_SCOPED_ITEMS=
hidden``, two named tokens whose requests alternate; tenant b is not shown 10 of them), against
the SDK's 100 tools (issue 40: at least 20x).
Every server is checked first with one real request per workload (the JSON-RPC result must be
the expected one); during the runs wrk must see only 200s of the checked answer's size, and any
other answer makes the run fail. Prints rps, p50, p99 (wrk ``--latency``), the server's idle
RSS (VmRSS after start-up, the checks and the warm-up, before the measured runs), its RSS
after the runs, its CPU time per request (the records writer's catching up after the run
included) and, of that, its main thread's (``loop us``: the event loop's; the rest is the
records writer's and the sync handlers' threads'), the share of its core it got during the
run (``CPU %``), all as medians of the
repeats with min-max, and the
ratios to the limit and to the SDK, taken repeat by repeat (the two ran seconds apart), as
median (min-max); with ``--ab-root``, this+rec over base+rec; then the issues' targets (issue
22's last), each PASS/FAIL on the rps ratio, with the same ratio by CPU time per request
beside it (less disturbed by the other load on a shared machine: there a server with more
threads, records on or sync tools, gets a larger share of the contended core than a
single-threaded one, which ``CPU %`` shows and the rps ratios inherit).

Only the processes this script started are stopped, by PID. One file past 400 lines on
purpose: it is run as a script by hand, and writes the modules its servers import.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foreign_load import ForeignLoad

ROOT = Path(__file__).resolve().parents[2]
SDK_VENV = ROOT / ".cache" / "bench-sdk-venv"
SDK_VERSION = "2.3.0"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "http-bench", "version": "1"},
}
ACCEPT = "application/json, text/event-stream"
LIMIT_NAME, SDK_NAME = "limit", "sdk"
THIS_REC, THIS_NOREC = "this+rec", "this-rec"
THIS_NOMET = "this-met"  # records on, /metrics off (MCP_METRICS=false): what counting costs
BASE_REC = "base+rec"  # records on, the --ab-root checkout's server/
THIS = (THIS_REC, THIS_NOREC, THIS_NOMET)
VARIANTS = (THIS_REC, BASE_REC, THIS_NOREC, THIS_NOMET, LIMIT_NAME, SDK_NAME)
CATALOGS = ("calls", "list1", "list100", "list100rule")
# list100rule: two named tokens (tenants a and b) and a visibility rule hiding the 10 delete_*
# tools from tenant b (MCP_SCOPED_ITEMS=hidden); wrk alternates the two, request by request.
RULE_TOKENS = {"a": "bench-token-a-0123456789", "b": "bench-token-b-0123456789"}
RULE_SEES = {"a": 100, "b": 90}


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# ----------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    body: str
    headers: dict[str, str]
    catalog: str  # which catalog the servers need: calls, list1, list100
    limit_path: str  # the limit's path that answers the same result bytes
    legacy: bool = False
    metrics_row: bool = False  # also measure this-met (metrics off) on it
    # headers sent on every other request instead of the ones in ``headers`` (another caller)
    alternate: dict[str, str] = field(default_factory=dict)


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


LEGACY_HEADERS = {
    "Content-Type": "application/json",
    "Accept": ACCEPT,
    "MCP-Protocol-Version": LEGACY,
}


def call_params(tool: str) -> dict[str, Any]:
    return {"name": tool, "arguments": {"text": "hello"}}


def modern_call(name: str, title: str, tool: str, metrics_row: bool = False) -> Workload:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {**call_params(tool), "_meta": META},
    }
    headers = modern_headers("tools/call", tool)
    return Workload(name, title, compact(body), headers, "calls", "/call", metrics_row=metrics_row)


def legacy_call(name: str, title: str, tool: str) -> Workload:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_params(tool)}
    return Workload(name, title, compact(body), LEGACY_HEADERS, "calls", "/call", legacy=True)


def modern_list(name: str, title: str) -> Workload:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    return Workload(name, title, compact(body), modern_headers("tools/list"), name, f"/{name}")


def rule_list(name: str, title: str) -> Workload:
    """tools/list of 100 tools as two callers see them through a rule: a's token in the
    headers, b's in ``alternate`` (the SDK and the limit ignore both)."""
    plain = modern_list(name, title)
    headers = {**plain.headers, "Authorization": f"Bearer {RULE_TOKENS['a']}"}
    other = {"Authorization": f"Bearer {RULE_TOKENS['b']}"}
    return Workload(name, title, plain.body, headers, name, f"/{name}", alternate=other)


WORKLOADS = {
    w.name: w
    for w in (
        modern_call("call", "modern tools/call echo (async)", "echo", metrics_row=True),
        modern_call("call_sync", "modern tools/call echo_sync (sync)", "echo_sync"),
        legacy_call("legacy", "legacy tools/call echo (session)", "echo"),
        legacy_call("legacy_sync", "legacy tools/call echo_sync (session)", "echo_sync"),
        modern_list("list1", "modern tools/list, 1 tool"),
        modern_list("list100", "modern tools/list, 100 tools"),
        rule_list("list100rule", "modern tools/list, 100 tools, a rule"),
    )
}


# ----------------------------------------------------------------------------- generated files

VERBS = [
    ("search", "Search {p} by text and filters, newest first."),
    ("get", "Fetch one {s} by id with its linked records."),
    ("create", "Create a {s} and return its new id."),
    ("update", "Change the given fields of a {s}; others stay."),
    ("delete", "Delete a {s}; it stays recoverable for 30 days."),
    ("list", "List {p} page by page, with a cursor."),
    ("export", "Export matching {p} to CSV; returns a link."),
    ("summarize", "Summarize recent activity on {p} by status."),
    ("validate", "Check a {s} against the rules; lists problems."),
    ("archive", "Move {p} older than a date to the archive."),
]
NOUNS = [
    ("order", "orders"),
    ("invoice", "invoices"),
    ("customer", "customers"),
    ("ticket", "tickets"),
    ("shipment", "shipments"),
    ("product", "products"),
    ("contract", "contracts"),
    ("payment", "payments"),
    ("report", "reports"),
    ("user", "users"),
]


CATALOG_HEAD = '''"""The benchmark's tools, for both servers (generated by http_bench.py).

``echo`` (async) and ``echo_sync`` (sync, the same body) for tools/call, 100 realistic tools for
tools/list. This server's catalogs are the factories at the bottom; they import ``server`` when
called, so the SDK's process imports this module for the functions alone. Only the public
``server`` API is used (``from server import Catalog``), so an older checkout serves it too.
"""

from typing import Annotated, Literal

from pydantic import Field


async def echo(text: Annotated[str, Field(description="Text to send back")]) -> str:
    """Return the given text unchanged."""
    return text


def echo_sync(text: Annotated[str, Field(description="Text to send back")]) -> str:
    """Return the given text unchanged."""
    return text


CALL_TOOLS = [echo, echo_sync]
'''

CATALOG_TAIL = """

def _catalog(functions):
    from server import Catalog

    catalog = Catalog("bench-tools", "1.0.0")
    for function in functions:
        catalog.tool(function)
    return catalog


def catalog_calls():
    return _catalog(CALL_TOOLS)


def catalog_1():
    return _catalog(TOOLS[:1])


def catalog_100():
    return _catalog(TOOLS[:100])


def catalog_100_rule():
    catalog = _catalog(TOOLS[:100])
    # tenant b is not shown the delete_* tools (asked once per caller per catalog version)
    catalog.set_visibility_rule(
        lambda caller, tool: caller.tenant != "b" or not tool.name.startswith("delete_")
    )
    return catalog
"""


def bench_catalog_source() -> str:
    """The one catalog module: echo, echo_sync, 100 plain async functions with typed,
    described parameters (both servers derive the same schemas from them), and this server's
    catalog factories."""
    lines = [CATALOG_HEAD]
    names = []
    for verb, description in VERBS:
        for singular, plural in NOUNS:
            name = f"{verb}_{plural}"
            names.append(name)
            doc = description.format(s=singular, p=plural)
            lines += [
                "",
                f"async def {name}(",
                f'    query: Annotated[str, Field(description="{singular.title()} id or text")],',
                "    status: Annotated[",
                '        Literal["open", "closed", "pending"], Field(description="State filter")',
                '    ] = "open",',
                '    limit: Annotated[int, Field(ge=1, le=100, description="Max results")] = 20,',
                ") -> str:",
                f"    {doc!r}",
                f'    return "{name} ok"',
                "",
            ]
    lines.append(f"TOOLS = [{', '.join(names)}]")
    return "\n".join(lines) + CATALOG_TAIL


# the factory MCP_CATALOG names for each catalog
CATALOG_SPECS = {
    "calls": "bench_catalog:catalog_calls",
    "list1": "bench_catalog:catalog_1",
    "list100": "bench_catalog:catalog_100",
    "list100rule": "bench_catalog:catalog_100_rule",
}

LIMIT_APP = '''"""The limit: bare ASGI, orjson, a fixed result per path, no validation."""
import sys

import orjson
import uvicorn

with open(sys.argv[2], "rb") as source:
    RESULTS = {path: orjson.dumps(result) for path, result in orjson.loads(source.read()).items()}
HEAD = b'{"jsonrpc":"2.0","id":'
JSON = (b"content-type", b"application/json")


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request_id = orjson.dumps(orjson.loads(body)["id"])
    payload = HEAD + request_id + b',"result":' + RESULTS[scope["path"]] + b"}"
    length = (b"content-length", str(len(payload)).encode())
    await send({"type": "http.response.start", "status": 200, "headers": [JSON, length]})
    await send({"type": "http.response.body", "body": payload})


uvicorn.run(
    app,
    host="127.0.0.1",
    port=int(sys.argv[1]),
    log_level="warning",
    loop="uvloop",
    http="httptools",
    lifespan="off",
)
'''

SDK_APP = '''"""The official SDK in its fastest mode: MCPServer, stateless HTTP, JSON responses."""
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

import bench_catalog

kind, port = sys.argv[1], int(sys.argv[2])
mcp = MCPServer("bench-sdk", version="1.0.0", log_level="WARNING")
if kind == "calls":
    # unstructured, as this server's: both answer the same content; the SDK runs the sync
    # one on its event loop
    for function in bench_catalog.CALL_TOOLS:
        mcp.add_tool(function, structured_output=False)
else:
    for function in bench_catalog.TOOLS[: {"list1": 1, "list100": 100, "list100rule": 100}[kind]]:
        mcp.add_tool(function)
app = mcp.streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
config = uvicorn.Config(
    app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools"
)
uvicorn.Server(config).run()
'''


def lua_script(workload: Workload, extra_headers: dict[str, str], check_bodies: bool) -> str:
    """The wrk script: the POST body and headers. wrk itself counts non-2xx answers; the
    answer bodies are checked by size after the run (see ``run_wrk``), or here in Lua with
    ``check_bodies`` (which makes wrk buffer and copy every body: on 56 KB answers that costs
    the client more than the bare limit costs the server)."""
    headers = {**workload.headers, **extra_headers}
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(workload.body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    if workload.alternate:  # every other request as the other caller
        first = {k: headers.get(k, "") for k in workload.alternate}
        lines += [
            "local turn = 0",
            "function request()",
            "  turn = 1 - turn",
            "  if turn == 1 then",
        ]
        lines += [f"    wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in first.items()]
        lines.append("  else")
        lines += [
            f"    wrk.headers[{json.dumps(k)}] = {json.dumps(v)}"
            for k, v in workload.alternate.items()
        ]
        lines += ["  end", "  return wrk.format()", "end"]
    if check_bodies:
        lines += [
            "local bad, failed = 0, 0",
            "function response(status, headers, body)",
            "  if status ~= 200 then bad = bad + 1",
            "  elseif string.find(body, '\"error\"', 1, true)",
            "      or string.find(body, '\"isError\":true', 1, true) then",
            "    failed = failed + 1",
            "  end",
            "end",
            "function done(summary, latency, requests)",
            '  io.write(string.format("bad-status: %d\\nerror-bodies: %d\\n", bad, failed))',
            "end",
        ]
    return "\n".join(lines) + "\n"


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


# ----------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pinning() -> tuple[list[str], list[str]]:
    """taskset prefixes (servers, wrk): servers on the second CPU, wrk on the first."""
    cpus = sorted(os.sched_getaffinity(0))
    if shutil.which("taskset") and len(cpus) >= 2:
        return ["taskset", "-c", str(cpus[1])], ["taskset", "-c", str(cpus[0])]
    return [], []


def post(
    port: int, path: str, body: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    status, answer_headers, raw, _ = post_sized(port, path, body, headers)
    return status, answer_headers, raw


def post_sized(
    port: int, path: str, body: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes, int]:
    """(status, headers, body, the answer's size on the wire with its status line and headers)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", path, body=body.encode(), headers=headers)
        response = connection.getresponse()
        raw = response.read()
        pairs = response.getheaders()
        wire = len(f"HTTP/1.1 {response.status} {response.reason}\r\n") + 2 + len(raw)
        wire += sum(len(k) + len(v) + 4 for k, v in pairs)
        return response.status, {k.lower(): v for k, v in pairs}, raw, wire
    finally:
        connection.close()


def jsonrpc_of(headers: dict[str, str], raw: bytes) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or a one-message SSE answer."""
    if headers.get("content-type", "").startswith("text/event-stream"):
        for line in raw.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "id" in message:
                    return message
        raise AssertionError(f"no response in SSE answer: {raw[:300]!r}")
    return json.loads(raw)


@dataclass
class Proc:
    name: str  # e.g. this+rec/calls
    kind: str  # this, limit, sdk
    command: list[str]
    env: dict[str, str]
    path: str  # the request path
    log: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)
    records_file: Path | None = None
    idle_rss_kib: int = 0

    def start(self) -> None:
        handle = self.log.open("wb")
        self.process = subprocess.Popen(
            self.command, env=self.env, stdout=handle, stderr=subprocess.STDOUT, cwd=self.log.parent
        )
        handle.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_ready(self, workload: Workload, deadline: float) -> None:
        """Ready when a real request gets an HTTP answer."""
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                post(self.port, self.path, workload.body, workload.headers)
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text()[-3000:]}")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def cpu_seconds(self) -> float:
        return stat_cpu_seconds(Path(f"/proc/{self.pid}/stat"))

    def loop_cpu_seconds(self) -> float:
        """The main thread's alone: the event loop's (the records writer and the handler
        threads are the rest of cpu_seconds)."""
        return stat_cpu_seconds(Path(f"/proc/{self.pid}/task/{self.pid}/stat"))

    def loaded_libraries(self) -> str:
        maps = Path(f"/proc/{self.pid}/maps").read_text()
        found = [lib for lib in ("uvloop", "httptools", "orjson") if f"/{lib}/" in maps]
        return ",".join(found) or "none"

    def records_queued(self) -> tuple[int, int]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            connection.request("GET", "/readyz")
            status = json.loads(connection.getresponse().read())["records"]
        finally:
            connection.close()
        return int(status["queued"]), int(status["dropped"])

    def stop(self) -> None:
        """SIGTERM to this PID, then SIGKILL to the same PID if it does not exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def ensure_sdk_venv() -> Path:
    """The SDK's own venv, with the same uvicorn, uvloop and httptools as this server's."""
    from importlib.metadata import version

    pins = [
        f"mcp=={SDK_VERSION}",
        f"uvicorn=={version('uvicorn')}",
        f"uvloop=={version('uvloop')}",
        f"httptools=={version('httptools')}",
    ]
    python = SDK_VENV / "bin" / "python"
    marker = SDK_VENV / "bench-pins.txt"
    if python.exists() and marker.exists() and marker.read_text() == "\n".join(pins):
        return python
    print(f"installing {' '.join(pins)} into {SDK_VENV} ...", flush=True)
    shutil.rmtree(SDK_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(SDK_VENV)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *pins],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"pip install failed:\n{done.stdout}\n{done.stderr}")
    marker.write_text("\n".join(pins))
    return python


def stat_cpu_seconds(stat: Path) -> float:
    """User and system time from a /proc stat file (a process's or one thread's)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- wrk


@dataclass
class Run:
    rps: float
    p50_ms: float
    p99_ms: float
    rss_mib: float
    cpu_us: float
    # of cpu_us, the main thread's (the event loop): the rest is the records writer's and the
    # handler threads'
    loop_us: float
    # the server's CPU time over the run's length: a CPU-bound server at 16 connections that
    # gets much less than 100% is sharing its core with other load
    cpu_pct: float


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_latency(text: str, percentile: str) -> float:
    found = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
    if found is None:
        raise RuntimeError(f"no {percentile}% latency in wrk output:\n{text}")
    return float(found.group(1)) * UNITS[found.group(2)]


BINARY = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def run_wrk(
    proc: Proc,
    script: Path,
    *,
    connections: int,
    seconds: int,
    pin: list[str],
    answer_bytes: int,
    check_bodies: bool,
) -> tuple[int, float, float, float, float]:
    """(requests, requests/s, p50 ms, p99 ms, wrk CPU %); raises on any failed request.

    Every answer must be a 200 (wrk counts the others) of the verified answer's size on the
    wire (``answer_bytes``, headers included, within 1% + 16 bytes): wrk's bytes read divided
    by its requests. An error answer differs in size from the result it replaces."""
    command = [
        *pin,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(script),
        f"http://127.0.0.1:{proc.port}{proc.path}",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / seconds * 100
    out = done.stdout
    requests = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB|TB) read", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    problems = []
    if done.returncode or requests is None or rate is None:
        problems.append("unexpected output")
    if "Non-2xx" in out or "Socket errors" in out:
        problems.append("failed requests")
    if check_bodies:
        bad = re.search(r"bad-status: (\d+)", out)
        failed = re.search(r"error-bodies: (\d+)", out)
        if bad is None or failed is None or int(bad.group(1)) or int(failed.group(1)):
            problems.append("error answers")
    if requests is not None:
        per_answer = float(requests.group(2)) * BINARY[requests.group(3)] / int(requests.group(1))
        if abs(per_answer - answer_bytes) > answer_bytes * 0.01 + 16:
            problems.append(f"{per_answer:.0f} bytes per answer, expected {answer_bytes}")
    if problems:
        raise RuntimeError(f"wrk against {proc.name}: {'; '.join(problems)}:\n{out}\n{done.stderr}")
    assert requests is not None
    assert rate is not None
    return (
        int(requests.group(1)),
        float(rate.group(1)),
        parse_latency(out, "50"),
        parse_latency(out, "99"),
        wrk_cpu,
    )


# ----------------------------------------------------------------------------- setup


class Bench:
    def __init__(
        self,
        directory: Path,
        sdk_python: Path | None,
        server_root: Path = ROOT,
        base_root: Path | None = None,
    ) -> None:
        self.directory = directory
        self.server_root = server_root  # the checkout whose server/ is measured
        self.base_root = base_root  # --ab-root: a second checkout, served as base+rec
        self.server_pin, self.load_pin = pinning()
        (directory / "bench_catalog.py").write_text(bench_catalog_source())
        (directory / "limit_app.py").write_text(LIMIT_APP)
        (directory / "sdk_app.py").write_text(SDK_APP)
        self.procs: dict[tuple[str, str], Proc] = {}  # (variant, catalog) -> process
        self.sdk_python = sdk_python
        self.limit_results: dict[str, Any] = {}

    def root_of(self, variant: str) -> Path:
        if variant == BASE_REC:
            assert self.base_root is not None
            return self.base_root
        return self.server_root

    def imported_from(self, root: Path) -> str:
        """Where ``python -m server`` with this root on PYTHONPATH imports ``server`` from (an
        editable install of another checkout must not win)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        env["PYTHONPATH"] = os.pathsep.join([str(root), str(self.directory)])
        done = subprocess.run(
            [sys.executable, "-c", "import server; print(server.__file__)"],
            env=env,
            cwd=self.directory,
            capture_output=True,
            text=True,
            check=True,
        )
        where = Path(done.stdout.strip()).resolve()
        if not where.is_relative_to(root.resolve()):
            raise RuntimeError(f"with {root} first on PYTHONPATH, server comes from {where}")
        return str(where.parent)

    def this_proc(self, variant: str, catalog: str) -> Proc:
        records = variant in (THIS_REC, THIS_NOMET, BASE_REC)
        name = f"{variant}/{catalog}"
        slug = name.replace("/", "-").replace("+", "p")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        port = free_port()
        records_file = self.directory / f"{slug}.jsonl"
        env.update(
            {
                "MCP_HOST": "127.0.0.1",
                "MCP_PORT": str(port),
                "MCP_LOG_LEVEL": "warning",
                "MCP_CATALOG": CATALOG_SPECS[catalog],
                "MCP_RECORDS": "file" if records else "none",
                "MCP_RECORDS_FILE": str(records_file),
                "MCP_METRICS": "false" if variant == THIS_NOMET else "true",
                "MCP_RECORDS_COMPRESS": "false",
                "MCP_RECORDS_BACKUPS": "1",
                "MCP_DRAIN_TIMEOUT_S": "2",
                # one client (wrk) sends everything: the per-client rate limit stays on (its
                # cost is measured) but so high it never refuses
                "MCP_RATE_LIMIT_RPS": "1000000000",
                "MCP_RATE_LIMIT_BURST": "1000000000",
                "PYTHONPATH": os.pathsep.join([str(self.root_of(variant)), str(self.directory)]),
            }
        )
        if catalog == "list100rule":
            digests = [hashlib.sha256(RULE_TOKENS[t].encode()).hexdigest() for t in ("a", "b")]
            env["MCP_AUTH"] = "tokens"
            env["MCP_AUTH_TOKENS"] = ",".join(
                f"sha256:{digest};name={tenant};tenant={tenant}"
                for tenant, digest in zip(("a", "b"), digests, strict=True)
            )
            env["MCP_SCOPED_ITEMS"] = "hidden"
        return Proc(
            name,
            "this",
            [*self.server_pin, sys.executable, "-m", "server"],
            env,
            "/mcp",
            self.directory / f"{slug}.log",
            port=port,
            records_file=records_file if records else None,
        )

    def start_all(self, needs: set[tuple[str, str]]) -> None:
        """Start one process per (variant, catalog) in ``needs`` (the limit apart)."""
        for variant, catalog in sorted(needs):
            if variant == SDK_NAME:
                assert self.sdk_python is not None
                port = free_port()
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                env["PYTHONPATH"] = str(self.directory)
                self.procs[(SDK_NAME, catalog)] = Proc(
                    f"{SDK_NAME}/{catalog}",
                    SDK_NAME,
                    [*self.server_pin, str(self.sdk_python), "sdk_app.py", catalog, str(port)],
                    env,
                    "/mcp",
                    self.directory / f"sdk-{catalog}.log",
                    port=port,
                )
            elif variant != LIMIT_NAME:
                self.procs[(variant, catalog)] = self.this_proc(variant, catalog)
        for proc in self.procs.values():
            proc.start()
        deadline = time.monotonic() + 90
        for (_, catalog), proc in self.procs.items():
            workload = next(w for w in WORKLOADS.values() if w.catalog == catalog)
            proc.wait_ready(workload, deadline)

    def start_limit(self) -> None:
        """Started after the others: it serves the very result bytes this server answers."""
        results = self.directory / "limit_results.json"
        results.write_text(json.dumps(self.limit_results))
        port = free_port()
        proc = Proc(
            f"{LIMIT_NAME}",
            LIMIT_NAME,
            [*self.server_pin, sys.executable, "limit_app.py", str(port), str(results)],
            dict(os.environ),
            "/call",
            self.directory / "limit.log",
            port=port,
        )
        proc.start()
        proc.wait_ready(WORKLOADS["call"], time.monotonic() + 30)
        for catalog in CATALOGS:
            self.procs[(LIMIT_NAME, catalog)] = proc

    def proc_for(self, variant: str, workload: Workload) -> Proc | None:
        if variant == LIMIT_NAME:
            limit = self.procs.get((LIMIT_NAME, workload.catalog))
            if limit is None:
                return None
            # the same process, another path: the result bytes of this workload's answer
            return Proc(
                limit.name,
                LIMIT_NAME,
                limit.command,
                limit.env,
                workload.limit_path,
                limit.log,
                port=limit.port,
                process=limit.process,
            )
        return self.procs.get((variant, workload.catalog))

    def open_legacy_session(self, proc: Proc) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "http-bench", "version": "1"},
            },
        }
        headers = {"Content-Type": "application/json", "Accept": ACCEPT}
        status, answer_headers, raw = post(proc.port, "/mcp", compact(init), headers)
        message = jsonrpc_of(answer_headers, raw)
        session = answer_headers.get("mcp-session-id")
        if status != 200 or "result" not in message or not session:
            raise RuntimeError(f"{proc.name}: initialize failed: {status} {raw[:300]!r}")
        headers = {**headers, "MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}
        note = compact({"jsonrpc": "2.0", "method": "notifications/initialized"})
        status, _, raw = post(proc.port, "/mcp", note, headers)
        if status != 202:
            raise RuntimeError(f"{proc.name}: notifications/initialized got {status} {raw[:200]!r}")
        proc.extra_headers = {"Mcp-Session-Id": session}

    def verify(self, variant: str, workload: Workload, proc: Proc) -> int:
        """One real request (one per caller of a workload with two): the answer must be the
        right JSON-RPC result. Returns its size on the wire (with two callers, their mean:
        wrk alternates them)."""
        wire = self.verify_one(variant, workload, proc, {})
        if not workload.alternate:
            return wire
        other = self.verify_one(variant, workload, proc, workload.alternate)
        return (wire + other) // 2

    def verify_one(
        self, variant: str, workload: Workload, proc: Proc, alternate: dict[str, str]
    ) -> int:
        extra = dict(proc.extra_headers) if workload.legacy and variant != SDK_NAME else {}
        status, headers, raw, wire = post_sized(
            proc.port, proc.path, workload.body, {**workload.headers, **extra, **alternate}
        )
        message = jsonrpc_of(headers, raw)
        result = message.get("result")
        problem = None
        if status != 200 or not isinstance(result, dict) or "error" in message:
            problem = "not a result"
        elif workload.catalog == "calls":
            content = result.get("content") or [{}]
            if result.get("isError") or content[0].get("text") != "hello":
                problem = "not the echo"
        else:
            expected = {"list1": 1, "list100": 100}.get(workload.catalog, 100)
            if variant in THIS and alternate:  # tenant b: the rule hides delete_*
                expected = RULE_SEES["b"]
            tools = result.get("tools") or []
            if len(tools) != expected or not all(t.get("inputSchema") for t in tools):
                problem = f"{len(tools)} tools, expected {expected}"
        if problem:
            raise RuntimeError(f"{proc.name} {workload.name}: {problem}: {status} {raw[:400]!r}")
        if variant == THIS_REC and not alternate:
            # echo and echo_sync answer the same result in either era: the first one sets the
            # limit's bytes (a legacy workload measured alone left the limit none: a 500)
            self.limit_results.setdefault(workload.limit_path, result)
        return wire

    def distinct(self) -> list[Proc]:
        return list({id(p): p for p in self.procs.values()}.values())

    def stop_all(self) -> None:
        for proc in self.distinct():
            proc.stop()


# ----------------------------------------------------------------------------- report


def fmt_range(values: list[float], digits: int) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


Key = tuple[str, str, int]  # (workload, variant, connections)


def paired(results: dict[Key, list[Run]], a: Key, b: Key, attr: str = "rps") -> list[float]:
    """a / b repeat by repeat: both ran in the same repeat, a few seconds apart, so the ratio
    drifts less with the machine's load than either number."""
    runs_a, runs_b = results.get(a), results.get(b)
    if not runs_a or not runs_b:
        return []
    return [getattr(x, attr) / getattr(y, attr) for x, y in zip(runs_a, runs_b, strict=False)]


def report(
    results: dict[Key, list[Run]],
    workloads: list[Workload],
    connections: list[int],
    idle: dict[str, float],
    row_procs: dict[tuple[str, str], str],
) -> list[str]:
    lines = []
    header = (
        f"{'workload':<38} {'server':<8} {'conns':>5}  {'rps median (min-max)':<22} "
        f"{'p50 ms (min-max)':<19} {'p99 ms (min-max)':<21} {'idle MiB':>8} {'RSS MiB':>7} "
        f"{'CPU us/req':>10} {'loop us':>7} {'CPU %':>5}  {'x limit (min-max)':<17} "
        f"{'x SDK (min-max)':<17}"
    )
    lines += [header, "-" * len(header)]
    for workload in workloads:
        for conns in connections:
            for variant in VARIANTS:
                key = (workload.name, variant, conns)
                runs = results.get(key)
                if not runs:
                    continue
                x_limit = paired(results, key, (workload.name, LIMIT_NAME, conns))
                x_sdk = paired(results, key, (workload.name, SDK_NAME, conns))
                idle_mib = idle.get(row_procs.get((workload.name, variant), ""))
                lines.append(
                    f"{workload.title:<38} {variant:<8} {conns:>5}  "
                    f"{fmt_range([r.rps for r in runs], 0):<22} "
                    f"{fmt_range([r.p50_ms for r in runs], 2):<19} "
                    f"{fmt_range([r.p99_ms for r in runs], 2):<21} "
                    f"{'-' if idle_mib is None else f'{idle_mib:.1f}':>8} "
                    f"{statistics.median(r.rss_mib for r in runs):>7.1f} "
                    f"{statistics.median(r.cpu_us for r in runs):>10.1f} "
                    f"{statistics.median(r.loop_us for r in runs):>7.1f} "
                    f"{statistics.median(r.cpu_pct for r in runs):>5.0f}  "
                    f"{fmt_range(x_limit, 2) if x_limit else '-':<17} "
                    f"{fmt_range(x_sdk, 2) if x_sdk else '-':<17}"
                )
            lines.append("")
    lines.append(
        "idle RSS (VmRSS after start-up, the checks and the warm-up, before the measured runs; "
        "MiB): " + ", ".join(f"{name} {value:.1f}" for name, value in idle.items())
    )
    if any(variant == BASE_REC for _, variant, _ in results):
        lines.append(
            "A/B, this+rec / base+rec, repeat by repeat: rps (higher: this is faster), "
            "CPU us/req (lower: this is cheaper)"
        )
        for workload in workloads:
            for conns in connections:
                this, base = (workload.name, THIS_REC, conns), (workload.name, BASE_REC, conns)
                rps = paired(results, this, base)
                cpu = paired(results, this, base, "cpu_us")
                if rps:
                    lines.append(
                        f"  {workload.title:<38} {conns:>3} conns: rps {fmt_range(rps, 2)}, "
                        f"CPU/req {fmt_range(cpu, 2)}"
                    )

    return lines + target_lines(results, connections, idle)


def target_lines(
    results: dict[Key, list[Run]], connections: list[int], idle: dict[str, float]
) -> list[str]:
    """The issues' targets, each PASS or FAIL with its number."""
    lines: list[str] = []

    def verdict(values: list[float], target: float, above: bool) -> str:
        value = statistics.median(values)
        ok = value >= target if above else value < target
        spread = f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""
        return f"{value:.2f}{spread} {'PASS' if ok else 'FAIL'}"

    def check(
        label: str,
        values: list[float],
        target: float,
        above: bool = True,
        by_cpu: list[float] | None = None,
    ) -> None:
        if not values:
            lines.append(f"  {label}: not measured in this run")
            return
        line = f"  {label} ({'>=' if above else '<'} {target:g}): {verdict(values, target, above)}"
        if by_cpu:
            line += f"; by CPU/req {verdict(by_cpu, target, above)}"
        lines.append(line)

    def vs(name: str, a: str, b: str, conns: int, attr: str = "rps") -> list[float]:
        return paired(results, (name, a, conns), (name, b, conns), attr)

    def target(label: str, name: str, other: str, conns: int, goal: float) -> None:
        """this+rec against another server in rps, and in the CPU time per request (the
        other's over this one's: the rps ratio both would have with the CPU to themselves)."""
        by_cpu = vs(name, other, THIS_REC, conns, "cpu_us")
        check(label, vs(name, THIS_REC, other, conns), goal, by_cpu=by_cpu)

    lines.append("targets (issue 8):")
    check("tools/call, 16 conns, records on: x limit", vs("call", THIS_REC, LIMIT_NAME, 16), 0.5)
    check("tools/call, 16 conns, records on: x SDK", vs("call", THIS_REC, SDK_NAME, 16), 5)
    for variant in (THIS_REC, THIS_NOREC):
        for conns in connections:
            check(
                f"tools/list 100 tools, {conns} conns, {variant}: x limit",
                vs("list100", variant, LIMIT_NAME, conns),
                0.7,
            )
    for name in ("call", "list100", "legacy"):
        check(
            f"{name}, 64 conns, records on: SDK p99 / this p99",
            vs(name, SDK_NAME, THIS_REC, 64, "p99_ms"),
            5,
        )
    lines.append("targets (issue 19):")
    check(
        "tools/call, 16 conns: metrics on / metrics off", vs("call", THIS_REC, THIS_NOMET, 16), 0.95
    )
    idle_this = idle.get(f"{THIS_REC}/calls")
    check("idle RSS MiB, this+rec/calls", [] if idle_this is None else [idle_this], 60, False)
    lines.append(
        "targets (issue 22): this+rec, rps ratios repeat by repeat, median (min-max), the verdict "
        "on rps; by CPU/req: the other's CPU time per request over this one's"
    )
    target("modern tools/call async, 16 conns: x limit", "call", LIMIT_NAME, 16, 0.7)
    target("modern tools/call sync, 16 conns: x limit", "call_sync", LIMIT_NAME, 16, 0.5)
    target("modern tools/call sync, 16 conns: x SDK sync", "call_sync", SDK_NAME, 16, 5)
    target("legacy tools/call async on a session, 16 conns: x limit", "legacy", LIMIT_NAME, 16, 0.6)
    target(
        "legacy tools/call sync on a session, 16 conns: x limit", "legacy_sync", LIMIT_NAME, 16, 0.6
    )
    for name, title in (
        ("call", "modern tools/call async"),
        ("call_sync", "modern tools/call sync"),
        ("list100", "modern tools/list 100 tools (cached)"),
    ):
        for conns in (16, 64):
            target(f"{title}, {conns} conns: records on / off", name, THIS_NOREC, conns, 0.9)
    lines.append(
        "targets (issue 40): tools/list of 100 tools (cached) with a per-caller rule, two "
        "tokens alternating, against the SDK's tools/list of 100 tools"
    )
    for conns in connections:
        target(f"list100rule, {conns} conns: x SDK", "list100rule", SDK_NAME, conns, 20)
        with_rule = paired(results, ("list100rule", THIS_REC, conns), ("list100", THIS_REC, conns))
        if with_rule:
            lines.append(
                f"  list100rule / list100 (no rule, no auth), {conns} conns, this+rec: rps "
                f"{fmt_range(with_rule, 2)}"
            )
    return lines


# ----------------------------------------------------------------------------- main


@dataclass
class Cell:
    workload: Workload
    variant: str
    proc: Proc
    script: Path
    answer_bytes: int


class Measurement:
    """One benchmark run: start and check every server, warm up, then the interleaved repeats."""

    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.started = time.monotonic()
        self.connections = args.connections or ([16] if args.quick else [16, 64])
        self.seconds = args.seconds or (1 if args.quick else 2)
        self.seconds_16 = args.seconds or (1 if args.quick else 3)
        self.budget = args.budget or (210 if args.quick else 840)
        self.workloads = [WORKLOADS[name] for name in args.workloads]
        sdk_python = None if args.no_sdk else ensure_sdk_venv()
        base_root = Path(args.ab_root).resolve() if args.ab_root else None
        self.bench = Bench(directory, sdk_python, Path(args.server_root).resolve(), base_root)
        self.cells: list[Cell] = []
        self.results: dict[Key, list[Run]] = {}
        self.client_bound: Counter[Key] = Counter()
        self.idle: dict[str, float] = {}
        self.row_procs: dict[tuple[str, str], str] = {}  # (workload, variant) -> process name
        self.repeats_done = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def variants_for(self, workload: Workload) -> list[str]:
        variants = [THIS_REC]
        if self.bench.base_root is not None:
            variants.append(BASE_REC)
        variants.append(THIS_NOREC)
        if workload.metrics_row:
            variants.append(THIS_NOMET)
        variants.append(LIMIT_NAME)
        if self.bench.sdk_python is not None:
            variants.append(SDK_NAME)
        return variants

    def prepare(self) -> None:
        bench = self.bench
        roots = [bench.server_root] + ([bench.base_root] if bench.base_root else [])
        where = {str(root): bench.imported_from(root) for root in roots}
        needs = {(v, w.catalog) for w in self.workloads for v in self.variants_for(w)}
        bench.start_all(needs)
        if any(w.legacy for w in self.workloads):
            for variant in (THIS_REC, BASE_REC, THIS_NOREC):
                if (variant, "calls") in bench.procs:
                    bench.open_legacy_session(bench.procs[(variant, "calls")])
        sizes: dict[str, int] = {}
        # this server and the SDK first: the limit then serves this server's result bytes
        for limit_pass in (False, True):
            if limit_pass:
                bench.start_limit()
            for workload in self.workloads:
                for variant in self.variants_for(workload):
                    if (variant == LIMIT_NAME) != limit_pass:
                        continue
                    proc = bench.proc_for(variant, workload)
                    assert proc is not None
                    size = bench.verify(variant, workload, proc)
                    sizes[f"{variant}/{workload.name}"] = size
                    extra = proc.extra_headers if workload.legacy and variant != SDK_NAME else {}
                    script = bench.directory / f"{workload.name}-{variant.replace('+', 'p')}.lua"
                    script.write_text(lua_script(workload, extra, self.args.lua_check))
                    self.cells.append(Cell(workload, variant, proc, script, size))
                    self.row_procs[(workload.name, variant)] = proc.name
        print(f"measuring {describe_checkout(bench.server_root)}")
        if bench.base_root is not None:
            print(f"against (base+rec) {describe_checkout(bench.base_root)}")
        print(f"server package imported from: {where}")
        print(f"verified every server; answers on the wire (bytes): {sizes}")
        libraries = ", ".join(f"{p.name} [{p.loaded_libraries()}]" for p in bench.distinct())
        print(f"loaded in each server: {libraries}")
        print(
            f"servers {' '.join(bench.server_pin) or 'unpinned'}, "
            f"wrk {' '.join(bench.load_pin) or 'unpinned'}; connections {self.connections}; "
            f"{len(self.cells)} cells; {self.args.repeats} repeats; {self.seconds}s per run "
            f"({self.seconds_16}s at 16 conns); budget {self.budget}s",
            flush=True,
        )

    def one(self, cell: Cell, connections: int, seconds: int) -> Run:
        proc = cell.proc
        cpu_before, loop_before = proc.cpu_seconds(), proc.loop_cpu_seconds()
        requests, rps, p50, p99, wrk_cpu = run_wrk(
            proc,
            cell.script,
            connections=connections,
            seconds=seconds,
            pin=self.bench.load_pin,
            answer_bytes=cell.answer_bytes,
            check_bodies=self.args.lua_check,
        )
        cpu_during = proc.cpu_seconds() - cpu_before
        rss_mib = proc.rss_kib() / 1024
        if wrk_cpu > 90:
            self.client_bound[(cell.workload.name, cell.variant, connections)] += 1
        if proc.records_file is not None:
            # let the records writer catch up, so that it does not run during the next run
            deadline = time.monotonic() + 10
            while proc.records_queued()[0] and time.monotonic() < deadline:
                time.sleep(0.05)
        # the cost per request counts the writer's catching up too; the share does not
        cpu_us = (proc.cpu_seconds() - cpu_before) / requests * 1e6
        loop_us = (proc.loop_cpu_seconds() - loop_before) / requests * 1e6
        run = Run(rps, p50, p99, rss_mib, cpu_us, loop_us, cpu_during / seconds * 100)
        if self.args.verbose:
            print(
                f"  {cell.workload.name:<11} {cell.variant:<8} c{connections:<3} {rps:9.0f} rps "
                f"p50 {p50:.2f} p99 {p99:.2f} ms, wrk CPU {wrk_cpu:.0f}%",
                flush=True,
            )
        return run

    def run(self) -> None:
        for cell in self.cells:  # warm-up: one second each, at 16 connections
            self.one(cell, 16, 1)
        time.sleep(0.5)
        self.idle = {p.name: p.rss_kib() / 1024 for p in self.bench.distinct()}
        print(f"warm-up done at {self.elapsed():.0f}s", flush=True)
        self.foreign = ForeignLoad()  # what else ran on the machine during the measured runs
        per_run = {
            c: (self.seconds_16 if c == 16 else self.seconds) + 0.3 for c in self.connections
        }
        per_repeat = sum(per_run.values()) * len(self.cells)
        for repeat in range(self.args.repeats):
            if repeat and self.elapsed() + per_repeat > self.budget:
                print(f"budget: stopping after {repeat} repeats", flush=True)
                break
            for connections in self.connections:
                seconds = self.seconds_16 if connections == 16 else self.seconds
                for workload in self.workloads:
                    # every server in turn (A B C D), the order rotated with the repeat
                    group = [c for c in self.cells if c.workload is workload]
                    shift = repeat % len(group)
                    for cell in group[shift:] + group[:shift]:
                        key = (workload.name, cell.variant, connections)
                        self.results.setdefault(key, []).append(
                            self.one(cell, connections, seconds)
                        )
            self.repeats_done = repeat + 1
            print(f"repeat {repeat + 1} done at {self.elapsed():.0f}s", flush=True)
        dropped = {p.name: p.records_queued()[1] for p in self.bench.distinct() if p.records_file}
        print(f"records dropped (must be 0): {dropped}")
        print(self.foreign.summary())

    def print_report(self) -> None:
        print()
        lines = report(self.results, self.workloads, self.connections, self.idle, self.row_procs)
        print("\n".join(lines))
        for (name, variant, conns), count in sorted(self.client_bound.items()):
            print(
                f"note: {name} {variant} at {conns} conns: wrk used over 90% of its CPU in "
                f"{count} runs, so that row measures the client as much as the server"
            )
        if self.repeats_done < self.args.repeats:
            print(f"note: {self.repeats_done} repeats, not {self.args.repeats}: time budget")
        print(f"elapsed: {self.elapsed():.0f}s")


def measure(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="http-bench-") as temp:
        measurement = Measurement(args, Path(temp))
        try:
            measurement.prepare()
            measurement.run()
        finally:
            measurement.bench.stop_all()
    measurement.print_report()
    return 0


def profile(args: argparse.Namespace) -> int:
    """py-spy on this server (the calls catalog, records on unless --profile-records none)
    under modern tools/call of echo (or echo_sync: --profile-workload call_sync) at 16
    connections."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out_dir = Path(args.profile_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    workload = WORKLOADS[args.profile_workload]
    raw_file = out_dir / f"http-bench-{workload.name}-records-{args.profile_records}.txt"
    with tempfile.TemporaryDirectory(prefix="http-bench-") as temp:
        bench = Bench(Path(temp), None, Path(args.server_root).resolve())
        try:
            variant = THIS_REC if args.profile_records == "file" else THIS_NOREC
            bench.start_all({(variant, "calls")})
            proc = bench.procs[(variant, "calls")]
            script = Path(temp) / "call.lua"
            script.write_text(lua_script(workload, {}, False))
            wire = bench.verify(variant, workload, proc)
            print(f"profiling {describe_checkout(bench.server_root)}", flush=True)
            run_wrk(
                proc,
                script,
                connections=16,
                seconds=1,
                pin=bench.load_pin,
                answer_bytes=wire,
                check_bodies=False,
            )
            load = subprocess.Popen(
                [
                    *bench.load_pin,
                    "wrk",
                    "-t1",
                    "-c16",
                    f"-d{args.profile_seconds + 3}s",
                    "-s",
                    str(script),
                    f"http://127.0.0.1:{proc.port}/mcp",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            time.sleep(1)
            subprocess.run(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--duration",
                    str(args.profile_seconds),
                    "--rate",
                    "500",
                    # blocking mode (stopping the process for every sample) piles samples onto
                    # frames next to syscalls, e.g. asyncio.current_task (getpid) at ~20%
                    *([] if args.profile_blocking else ["--nonblocking"]),
                    "--format",
                    "raw",
                    "-o",
                    str(raw_file),
                ],
                check=True,
                capture_output=True,
            )
            out, _ = load.communicate(timeout=30)
            rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
            print(
                f"load during the profile: {rate.group(1) if rate else '?'} requests/s "
                "(while sampled)"
            )
        finally:
            bench.stop_all()
    print(f"raw stacks (collapsed, flamegraph input): {raw_file}")
    print("\n".join(profile_summary(raw_file.read_text(), args.top)))
    return 0


def frame_parts(frame: str) -> tuple[str, str]:
    """('function', 'file:line') of a py-spy raw frame 'function (file:line)'."""
    found = re.match(r"(.*) \((.*)\)$", frame)
    return (found.group(1), found.group(2)) if found else (frame, "")


def short_file(path: str) -> str:
    path = path.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/main/", "python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def is_server_code(location: str) -> bool:
    return location.startswith("server/") or "/main/server/" in location


IDLE_LEAVES = {"Condition.wait", "Event.wait", "Thread._wait_for_tstate_lock", "select", "poll"}


def profile_summary(raw: str, top: int) -> list[str]:
    """Tables from py-spy's collapsed stacks. Samples of a thread waiting (a lock, a condition,
    select) are left out; the event loop's thread and the other threads (the records writer)
    are counted apart, both share the server's one CPU."""
    leaf: Counter[str] = Counter()
    server_self: Counter[str] = Counter()
    server_attributed: Counter[str] = Counter()
    server_inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    idle = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_parts(f) for f in stack.split(";")]
        frames = [(fn, loc) for fn, loc in frames if loc]  # drop the thread/process label
        if not frames:
            continue
        fn, loc = frames[-1]
        if fn in IDLE_LEAVES:
            idle += count
            continue
        worker = any(name == "Thread._bootstrap" for name, _ in frames)
        threads[
            "other threads (records writer, tool threads)" if worker else "event loop thread"
        ] += count
        leaf[f"{fn} ({short_file(loc)})"] += count
        if is_server_code(loc):
            server_self[f"{fn} ({short_file(loc)})"] += count
        ours = [(name, where) for name, where in frames if is_server_code(where)]
        if ours:
            name, where = ours[-1]
            server_attributed[f"{name} ({short_file(where)})"] += count
        for name, where in {(name, short_file(where)) for name, where in ours}:
            server_inclusive[f"{name} ({where})"] += count
    total = sum(threads.values()) or 1

    def table(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{title} (% of {total} busy samples)"]
        rows += [f"  {100 * n / total:5.1f}%  {name}" for name, n in counter.most_common(top)]
        return rows

    split = ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in threads.most_common())
    return [
        f"busy samples: {total} ({split}); {idle} waiting samples left out",
        *table("self time, any code (leaf frames)", leaf),
        *table("self time in server/ code (leaf frame in server/)", server_self),
        *table(
            "time by innermost server/ frame (its own code + the library calls it makes)",
            server_attributed,
        ),
        *table("inclusive time of server/ functions", server_inclusive),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 connections only, 1 s runs")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per cell (>= 3)")
    parser.add_argument("--seconds", type=int, default=0, help="seconds per wrk run")
    parser.add_argument(
        "--connections",
        type=int,
        nargs="+",
        default=None,
        help="connection counts (default 16 64, or 16 with --quick; add 1 for the 1-conn rows)",
    )
    parser.add_argument("--budget", type=int, default=0, help="stop new repeats past this (s)")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--no-sdk", action="store_true", help="skip the official SDK")
    parser.add_argument("--verbose", action="store_true", help="print every run")
    parser.add_argument(
        "--lua-check",
        action="store_true",
        help="also look into every answer body in Lua (costs the client)",
    )
    parser.add_argument(
        "--server-root", default=str(ROOT), help="the checkout whose server/ to measure"
    )
    parser.add_argument(
        "--ab-root",
        default=None,
        help="a second checkout, served with records on as base+rec in the same run",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy this server under load")
    parser.add_argument("--profile-seconds", type=int, default=10)
    parser.add_argument("--profile-records", choices=["file", "none"], default="file")
    parser.add_argument("--profile-workload", choices=["call", "call_sync"], default="call")
    parser.add_argument("--profile-blocking", action="store_true", help="py-spy stops the server")
    parser.add_argument("--profile-dir", default=str(ROOT / ".cache" / "bench-profile"))
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    args.repeats = max(3, args.repeats)
    if args.profile:
        return profile(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
