"""HTTP benchmark: this server against a bare ASGI limit and the official Python SDK.

    python tests/bench/http_bench.py            # full: 1, 16 and 64 connections (< 10 min)
    python tests/bench/http_bench.py --quick    # 16 connections, shorter runs (< 3 min)
    python tests/bench/http_bench.py --profile  # py-spy on this server under tools/call load

Starts every server once, all pinned to one CPU (``taskset``), and drives them one at a time
with ``wrk`` (one thread, pinned to another CPU, a Lua script for the POST body and the MCP
headers), interleaved: for each repeat, for each connection count, for each workload, every
server in turn (A B C D A B C D ..., the order rotated per repeat), so drift on a shared
machine spreads over all of them. The servers:

- ``this+rec`` / ``this-rec``: ``python -m server`` with request records on (``MCP_RECORDS=file``
  into a temp dir; no gzip on rotation, so no compression burst lands in another server's run)
  and off (``MCP_RECORDS=none``); the probe catalog for ``tools/call`` of ``echo``, and a
  catalog module this script writes for ``tools/list`` with 1 and 100 tools;
- ``limit``: a bare ASGI callable (uvicorn, uvloop, httptools, orjson) that parses the body for
  the id and answers a fixed result spliced from cached bytes, no validation: the ceiling;
- ``sdk``: the official SDK (``mcp==2.3.0``, installed by this script into
  ``.cache/bench-sdk-venv``) as ``MCPServer`` with ``streamable_http_app(stateless_http=True,
  json_response=True)``, its fastest mode, under the same uvicorn settings, serving the same
  ``echo`` tool (unstructured, so both answer the same content) and the same generated tools.

Workloads: modern (2026-07-28) ``tools/call`` of ``echo``; modern ``tools/list`` with 1 and with
100 tools (~44 KB); legacy (2025-11-25) ``tools/call`` of ``echo`` on an open session (this
server: initialize once, the session id in the Lua headers; the SDK: its stateless mode has no
sessions, so it answers each legacy call on its own; the limit row is the ``tools/call`` one).
Every server is checked first with one real request per workload (the JSON-RPC result must be
the expected one); during the runs the Lua script counts non-200 answers and error bodies, and
any makes the run fail. Prints rps, p50, p99 (wrk ``--latency``), the server's RSS after the
run (VmRSS) and its CPU time per request, as medians of the repeats with min-max, and the
ratios of the medians to the limit and to the SDK; then the issue's targets.

Only the processes this script started are stopped, by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
VARIANTS = (THIS_REC, THIS_NOREC, LIMIT_NAME, SDK_NAME)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# ----------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    body: str
    headers: dict[str, str]
    catalog: str  # which catalog the servers need: probe, list1, list100
    legacy: bool = False


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


CALL_PARAMS = {"name": "echo", "arguments": {"text": "hello"}}
WORKLOADS = {
    "call": Workload(
        "call",
        "modern tools/call echo",
        compact(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**CALL_PARAMS, "_meta": META}}
        ),
        modern_headers("tools/call", "echo"),
        "probe",
    ),
    "list1": Workload(
        "list1",
        "modern tools/list, 1 tool",
        compact({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}),
        modern_headers("tools/list"),
        "list1",
    ),
    "list100": Workload(
        "list100",
        "modern tools/list, 100 tools",
        compact({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}),
        modern_headers("tools/list"),
        "list100",
    ),
    "legacy": Workload(
        "legacy",
        "legacy tools/call echo (session)",
        compact({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL_PARAMS}),
        {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY},
        "probe",
        legacy=True,
    ),
}


# ----------------------------------------------------------------------------- generated files

VERBS = [
    ("search", "Search {p} by free text and filters; returns matching {p} newest first as a compact list with ids, titles and status."),
    ("get", "Fetch one {s} by id with every field, its history and linked records; use search_{p} first when you only know a name."),
    ("create", "Create a new {s} from the given fields and return its id; fails when a {s} with the same external reference exists."),
    ("update", "Change fields of an existing {s}; only the fields given are written, the rest stay as they are. Returns the new version."),
    ("delete", "Delete a {s} by id. Deleted {p} stay recoverable for 30 days; pass hard=true to remove the {s} at once for good."),
    ("list", "List {p} page by page in a stable order; pass the cursor from the previous page to continue, until none is returned."),
    ("export", "Export {p} matching the filters to a CSV or JSON file and return a download link that stays valid for one hour."),
    ("summarize", "Summarize recent activity on {p}: counts by status, the largest changes and anything overdue, as short text."),
    ("validate", "Check a {s} against the business rules and return every problem found with the field it concerns and a fix."),
    ("archive", "Move {p} older than the given date to the archive, where they are read-only and excluded from search results."),
]
NOUNS = [
    ("order", "orders"), ("invoice", "invoices"), ("customer", "customers"), ("ticket", "tickets"),
    ("shipment", "shipments"), ("product", "products"), ("contract", "contracts"),
    ("payment", "payments"), ("report", "reports"), ("user", "users"),
]  # fmt: skip


def bench_tools_source() -> str:
    """A module of 100 plain async functions with typed, described parameters (both servers
    derive the same schemas from them)."""
    lines = [
        '"""100 realistic tools for the tools/list benchmark (generated by http_bench.py)."""',
        "from typing import Annotated, Literal",
        "from pydantic import Field",
        "",
    ]
    names = []
    for verb, description in VERBS:
        for singular, plural in NOUNS:
            name = f"{verb}_{plural}"
            names.append(name)
            doc = description.format(s=singular, p=plural)
            lines += [
                f"async def {name}(",
                f'    query: Annotated[str, Field(description="Text or id of the {singular} to work on")],',
                '    status: Annotated[Literal["open", "closed", "pending"], Field(description="Only in this state")] = "open",',
                '    limit: Annotated[int, Field(ge=1, le=100, description="Largest number of results")] = 20,',
                ") -> str:",
                f"    {doc!r}",
                f'    return "{name} ok"',
                "",
            ]
    lines.append(f"TOOLS = [{', '.join(names)}]")
    return "\n".join(lines) + "\n"


BENCH_CATALOG = '''"""Catalogs of 1 and 100 generated tools for this server (written by http_bench.py)."""
from server.catalog import Catalog
import bench_tools


def _catalog(count):
    catalog = Catalog("bench-tools", "1.0.0")
    for function in bench_tools.TOOLS[:count]:
        catalog.tool(function)
    return catalog


def catalog_1():
    return _catalog(1)


def catalog_100():
    return _catalog(100)
'''

LIMIT_APP = '''"""The limit: a bare ASGI callable, orjson, a fixed result per path, no validation."""
import sys

import orjson
import uvicorn

RESULTS = {path: orjson.dumps(result) for path, result in orjson.loads(open(sys.argv[2], "rb").read()).items()}
HEAD = b'{"jsonrpc":"2.0","id":'


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    payload = HEAD + orjson.dumps(orjson.loads(body)["id"]) + b',"result":' + RESULTS[scope["path"]] + b"}"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", loop="uvloop", http="httptools", lifespan="off")
'''

SDK_APP = '''"""The official SDK in its fastest mode: MCPServer, stateless HTTP, JSON responses."""
import sys
from typing import Annotated

import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import Field

import bench_tools

kind, port = sys.argv[1], int(sys.argv[2])
mcp = MCPServer("bench-sdk", version="1.0.0", log_level="WARNING")
if kind == "probe":

    async def echo(text: Annotated[str, Field(description="Text to send back")]) -> str:
        """Return the given text unchanged."""
        return text

    mcp.add_tool(echo, structured_output=False)
else:
    for function in bench_tools.TOOLS[: {"list1": 1, "list100": 100}[kind]]:
        mcp.add_tool(function)
app = mcp.streamable_http_app(stateless_http=True, json_response=True, host="127.0.0.1")
config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools")
uvicorn.Server(config).run()
'''


def lua_script(workload: Workload, extra_headers: dict[str, str]) -> str:
    headers = {**workload.headers, **extra_headers}
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(workload.body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    # Count what is not a success, so an error path can never pass for a fast server.
    lines += [
        "local bad, failed = 0, 0",
        "function response(status, headers, body)",
        "  if status ~= 200 then bad = bad + 1",
        "  elseif string.find(body, '\"error\"', 1, true) or string.find(body, '\"isError\":true', 1, true) then",
        "    failed = failed + 1",
        "  end",
        "end",
        "function done(summary, latency, requests)",
        '  io.write(string.format("bad-status: %d\\nerror-bodies: %d\\n", bad, failed))',
        "end",
    ]
    return "\n".join(lines) + "\n"


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


def post(port: int, path: str, body: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", path, body=body.encode(), headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
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
    name: str  # e.g. this+rec/probe
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
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

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
        [str(python), "-m", "pip", "install", "-q", *pins], capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"pip install failed:\n{done.stdout}\n{done.stderr}")
    marker.write_text("\n".join(pins))
    return python


# ----------------------------------------------------------------------------- wrk


@dataclass
class Run:
    rps: float
    p50_ms: float
    p99_ms: float
    rss_mib: float
    cpu_us: float


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def parse_latency(text: str, percentile: str) -> float:
    found = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
    if found is None:
        raise RuntimeError(f"no {percentile}% latency in wrk output:\n{text}")
    return float(found.group(1)) * UNITS[found.group(2)]


def run_wrk(
    proc: Proc, script: Path, connections: int, seconds: int, pin: list[str]
) -> tuple[int, float, float, float]:
    """(requests, requests/s, p50 ms, p99 ms); raises on any failed request."""
    command = [
        *pin, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
        "--latency", "-s", str(script), f"http://127.0.0.1:{proc.port}{proc.path}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    out = done.stdout
    bad = re.search(r"bad-status: (\d+)", out)
    failed = re.search(r"error-bodies: (\d+)", out)
    if (
        done.returncode
        or bad is None
        or failed is None
        or int(bad.group(1))
        or int(failed.group(1))
        or "Non-2xx" in out
        or "Socket errors" in out
    ):
        raise RuntimeError(f"wrk against {proc.name} saw failures:\n{out}\n{done.stderr}")
    requests = re.search(r"(\d+) requests in ", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if requests is None or rate is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    return (
        int(requests.group(1)),
        float(rate.group(1)),
        parse_latency(out, "50"),
        parse_latency(out, "99"),
    )


# ----------------------------------------------------------------------------- setup


class Bench:
    def __init__(self, directory: Path, sdk_python: Path | None) -> None:
        self.directory = directory
        self.server_pin, self.load_pin = pinning()
        (directory / "bench_tools.py").write_text(bench_tools_source())
        (directory / "bench_catalog.py").write_text(BENCH_CATALOG)
        (directory / "limit_app.py").write_text(LIMIT_APP)
        (directory / "sdk_app.py").write_text(SDK_APP)
        self.procs: dict[tuple[str, str], Proc] = {}  # (variant, catalog) -> process
        self.sdk_python = sdk_python
        self.limit_results: dict[str, Any] = {}

    def this_proc(self, variant: str, catalog: str) -> Proc:
        records = variant == THIS_REC
        name = f"{variant}/{catalog}"
        slug = name.replace("/", "-").replace("+", "p")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        port = free_port()
        spec = {"probe": "probe", "list1": "bench_catalog:catalog_1", "list100": "bench_catalog:catalog_100"}
        records_file = self.directory / f"{slug}.jsonl"
        env.update(
            {
                "MCP_HOST": "127.0.0.1",
                "MCP_PORT": str(port),
                "MCP_LOG_LEVEL": "warning",
                "MCP_CATALOG": spec[catalog],
                "MCP_RECORDS": "file" if records else "none",
                "MCP_RECORDS_FILE": str(records_file),
                "MCP_RECORDS_COMPRESS": "false",
                "MCP_RECORDS_BACKUPS": "1",
                "MCP_DRAIN_TIMEOUT_S": "2",
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(self.directory)]),
            }
        )
        return Proc(
            name, "this", [*self.server_pin, sys.executable, "-m", "server"], env, "/mcp",
            self.directory / f"{slug}.log", port=port,
            records_file=records_file if records else None,
        )  # fmt: skip

    def start_all(self, catalogs: list[str], with_sdk: bool) -> None:
        for catalog in catalogs:
            for variant in (THIS_REC, THIS_NOREC):
                self.procs[(variant, catalog)] = self.this_proc(variant, catalog)
            if with_sdk:
                assert self.sdk_python is not None
                port = free_port()
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                env["PYTHONPATH"] = str(self.directory)
                self.procs[(SDK_NAME, catalog)] = Proc(
                    f"{SDK_NAME}/{catalog}",
                    SDK_NAME,
                    [*self.server_pin, str(self.sdk_python), "sdk_app.py", catalog, str(port)],
                    env, "/mcp", self.directory / f"sdk-{catalog}.log", port=port,
                )  # fmt: skip
        for proc in self.procs.values():
            proc.start()
        deadline = time.monotonic() + 60
        for (variant, catalog), proc in self.procs.items():
            workload = next(w for w in WORKLOADS.values() if w.catalog == catalog)
            proc.wait_ready(workload, deadline)

    def start_limit(self) -> None:
        """Started after the others: it serves the very result bytes this server answers."""
        results = self.directory / "limit_results.json"
        results.write_text(json.dumps(self.limit_results))
        port = free_port()
        proc = Proc(
            f"{LIMIT_NAME}", LIMIT_NAME,
            [*self.server_pin, sys.executable, "limit_app.py", str(port), str(results)],
            dict(os.environ), "/call", self.directory / "limit.log", port=port,
        )  # fmt: skip
        proc.start()
        proc.wait_ready(WORKLOADS["call"], time.monotonic() + 30)
        for catalog in ("probe", "list1", "list100"):
            self.procs[(LIMIT_NAME, catalog)] = proc

    def proc_for(self, variant: str, workload: Workload) -> Proc | None:
        if variant == LIMIT_NAME:
            limit = self.procs.get((LIMIT_NAME, workload.catalog))
            if limit is None or workload.legacy:
                return None  # the legacy row's limit is the tools/call limit
            path = {"call": "/call", "list1": "/list1", "list100": "/list100"}[workload.name]
            return Proc(limit.name, LIMIT_NAME, limit.command, limit.env, path, limit.log,
                        port=limit.port, process=limit.process)  # fmt: skip
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
        """One real request: the answer must be the right JSON-RPC result. Returns its size."""
        extra = dict(proc.extra_headers) if workload.legacy and variant != SDK_NAME else {}
        status, headers, raw = post(proc.port, proc.path, workload.body, {**workload.headers, **extra})
        message = jsonrpc_of(headers, raw)
        result = message.get("result")
        problem = None
        if status != 200 or not isinstance(result, dict) or "error" in message:
            problem = "not a result"
        elif workload.catalog == "probe":
            content = result.get("content") or [{}]
            if result.get("isError") or content[0].get("text") != "hello":
                problem = "not the echo"
        else:
            expected = {"list1": 1, "list100": 100}[workload.catalog]
            tools = result.get("tools") or []
            if len(tools) != expected or not all(t.get("inputSchema") for t in tools):
                problem = f"{len(tools)} tools, expected {expected}"
        if problem:
            raise RuntimeError(f"{proc.name} {workload.name}: {problem}: {status} {raw[:400]!r}")
        if variant == THIS_REC and workload.name != "legacy":
            key = {"call": "/call", "list1": "/list1", "list100": "/list100"}[workload.name]
            self.limit_results[key] = result
        return len(raw)

    def stop_all(self) -> None:
        for proc in {id(p): p for p in self.procs.values()}.values():
            proc.stop()


# ----------------------------------------------------------------------------- report


def fmt_range(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report(
    results: dict[tuple[str, str, int], list[Run]],
    workloads: list[Workload],
    connections: list[int],
    idle: dict[str, float],
) -> list[str]:
    lines = []
    med = {key: statistics.median(r.rps for r in runs) for key, runs in results.items() if runs}
    p99 = {key: statistics.median(r.p99_ms for r in runs) for key, runs in results.items() if runs}
    header = (
        f"{'workload':<34} {'server':<9} {'conns':>5}  {'rps median (min-max)':<24} "
        f"{'p50 ms (min-max)':<21} {'p99 ms (min-max)':<23} {'RSS MiB':>7} {'CPU us/req':>10}"
        f" {'x limit':>7} {'x SDK':>6} {'SDK p99/p99':>11}"
    )
    lines += [header, "-" * len(header)]
    for workload in workloads:
        for conns in connections:
            for variant in VARIANTS:
                runs = results.get((workload.name, variant, conns))
                if not runs:
                    continue
                limit_key = ("call" if workload.legacy else workload.name, LIMIT_NAME, conns)
                sdk_key = (workload.name, SDK_NAME, conns)
                key = (workload.name, variant, conns)
                x_limit = f"{med[key] / med[limit_key]:.2f}" if limit_key in med else "-"
                x_sdk = f"{med[key] / med[sdk_key]:.2f}" if sdk_key in med else "-"
                p99_ratio = f"{p99[sdk_key] / p99[key]:.2f}" if sdk_key in p99 else "-"
                lines.append(
                    f"{workload.title:<34} {variant:<9} {conns:>5}  "
                    f"{fmt_range([r.rps for r in runs], 0):<24} "
                    f"{fmt_range([r.p50_ms for r in runs], 2):<21} "
                    f"{fmt_range([r.p99_ms for r in runs], 2):<23} "
                    f"{statistics.median(r.rss_mib for r in runs):>7.1f} "
                    f"{statistics.median(r.cpu_us for r in runs):>10.1f} "
                    f"{x_limit:>7} {x_sdk:>6} {p99_ratio:>11}"
                )
            lines.append("")
    lines.append("idle RSS after start-up and one request (MiB): " + ", ".join(
        f"{name} {value:.1f}" for name, value in idle.items()
    ))  # fmt: skip

    def check(label: str, value: float | None, target: float, above: bool = True) -> None:
        if value is None:
            lines.append(f"  {label}: not measured in this run")
            return
        ok = value >= target if above else value < target
        lines.append(f"  {label}: {value:.2f} (target {'>=' if above else '<'} {target:g}) "
                     f"{'PASS' if ok else 'FAIL'}")  # fmt: skip

    def ratio(a: tuple[str, str, int], b: tuple[str, str, int], table: dict[Any, float]) -> float | None:
        return table[a] / table[b] if a in table and b in table else None

    lines.append("targets (issue 8):")
    check("tools/call, 16 conns, records on: x limit",
          ratio(("call", THIS_REC, 16), ("call", LIMIT_NAME, 16), med), 0.5)  # fmt: skip
    check("tools/call, 16 conns, records on: x SDK",
          ratio(("call", THIS_REC, 16), ("call", SDK_NAME, 16), med), 5)  # fmt: skip
    for variant in (THIS_REC, THIS_NOREC):
        for conns in connections:
            check(f"tools/list 100 tools, {conns} conns, {variant}: x limit",
                  ratio(("list100", variant, conns), ("list100", LIMIT_NAME, conns), med), 0.7)  # fmt: skip
    for name in ("call", "list100", "legacy"):
        check(f"{name}, 64 conns, records on: SDK p99 / this p99",
              ratio((name, SDK_NAME, 64), (name, THIS_REC, 64), p99), 5)  # fmt: skip
    idle_this = idle.get(f"{THIS_REC}/probe")
    check("idle RSS MiB, this+rec/probe", idle_this, 60, above=False)
    return lines


# ----------------------------------------------------------------------------- main


def measure(args: argparse.Namespace) -> int:
    started = time.monotonic()
    connections = [16] if args.quick else [1, 16, 64]
    seconds = args.seconds or (1 if args.quick else 2)
    seconds_16 = args.seconds or (1 if args.quick else 3)
    budget = args.budget or (170 if args.quick else 570)
    workloads = [WORKLOADS[name] for name in args.workloads]
    catalogs = sorted({w.catalog for w in workloads})
    sdk_python = None if args.no_sdk else ensure_sdk_venv()
    results: dict[tuple[str, str, int], list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="http-bench-") as temp:
        bench = Bench(Path(temp), sdk_python)
        try:
            bench.start_all(catalogs, with_sdk=sdk_python is not None)
            for (variant, catalog), proc in list(bench.procs.items()):
                if variant != SDK_NAME and catalog == "probe" and "legacy" in args.workloads:
                    bench.open_legacy_session(proc)
            sizes: dict[str, int] = {}
            for workload in workloads:
                for variant in (THIS_REC, THIS_NOREC, SDK_NAME):
                    proc = bench.proc_for(variant, workload)
                    if proc is not None:
                        sizes[f"{variant}/{workload.name}"] = bench.verify(variant, workload, proc)
            bench.start_limit()
            for workload in workloads:
                proc = bench.proc_for(LIMIT_NAME, workload)
                if proc is not None:
                    sizes[f"{LIMIT_NAME}/{workload.name}"] = bench.verify(LIMIT_NAME, workload, proc)
            distinct = {id(p): p for p in bench.procs.values()}.values()
            idle = {p.name: p.rss_kib() / 1024 for p in distinct}
            pins = f"servers {' '.join(bench.server_pin) or 'unpinned'}, wrk {' '.join(bench.load_pin) or 'unpinned'}"
            print(f"verified every server; answer sizes (bytes): {sizes}")
            print("loaded in each server: " + ", ".join(f"{p.name} [{p.loaded_libraries()}]" for p in distinct))
            print(f"{pins}; connections {connections}; {args.repeats} repeats; "
                  f"{seconds}s per run ({seconds_16}s at 16 conns); budget {budget}s", flush=True)  # fmt: skip

            scripts: dict[tuple[str, str], Path] = {}
            cells: list[tuple[Workload, str, Proc]] = []
            for workload in workloads:
                for variant in VARIANTS:
                    proc = bench.proc_for(variant, workload)
                    if proc is None:
                        continue
                    extra = proc.extra_headers if workload.legacy and variant != SDK_NAME else {}
                    script = Path(temp) / f"{workload.name}-{variant.replace('+', 'p')}.lua"
                    script.write_text(lua_script(workload, extra))
                    scripts[(workload.name, variant)] = script
                    cells.append((workload, variant, proc))
            # Warm-up: one second per server and workload, at 16 connections.
            for workload, variant, proc in cells:
                run_wrk(proc, scripts[(workload.name, variant)], 16, 1, bench.load_pin)
            # one repeat: every cell at every connection count, plus ~0.3 s of overhead a run
            per_repeat = sum((seconds_16 if c == 16 else seconds) + 0.3 for c in connections) * len(cells)
            stopped_early = False
            for repeat in range(args.repeats):
                if repeat and time.monotonic() - started + per_repeat > budget:
                    stopped_early = True
                    print(f"budget: stopping after {repeat} repeats", flush=True)
                    break
                for conns in connections:
                    duration = seconds_16 if conns == 16 else seconds
                    # per workload, every server in turn; the order rotates with the repeat
                    for workload in workloads:
                        group = [c for c in cells if c[0] is workload]
                        shift = repeat % len(group)
                        for _, variant, proc in group[shift:] + group[:shift]:
                            cpu_before = proc.cpu_seconds()
                            requests, rps, p50, p99 = run_wrk(
                                proc, scripts[(workload.name, variant)], conns, duration, bench.load_pin
                            )
                            cpu_us = (proc.cpu_seconds() - cpu_before) / max(1, requests) * 1e6
                            run = Run(rps, p50, p99, proc.rss_kib() / 1024, cpu_us)
                            results.setdefault((workload.name, variant, conns), []).append(run)
                            if proc.records_file is not None:
                                # let the writer catch up, so it does not run in the next run
                                deadline = time.monotonic() + 10
                                while proc.records_queued()[0] and time.monotonic() < deadline:
                                    time.sleep(0.05)
                            if args.verbose:
                                print(f"  r{repeat + 1} {workload.name:<8} {variant:<9} c{conns:<3} "
                                      f"{rps:9.0f} rps p50 {p50:.2f} p99 {p99:.2f} ms", flush=True)  # fmt: skip
                print(f"repeat {repeat + 1} done at {time.monotonic() - started:.0f}s", flush=True)
            dropped = {
                p.name: p.records_queued()[1] for p in distinct if p.records_file is not None
            }
            print(f"records dropped (must be 0): {dropped}")
        finally:
            bench.stop_all()
    print()
    print("\n".join(report(results, workloads, connections, idle)))
    if stopped_early:
        print("note: stopped early to stay in the time budget; fewer repeats than asked")
    print(f"elapsed: {time.monotonic() - started:.0f}s")
    return 0


def profile(args: argparse.Namespace) -> int:
    """py-spy on this server (probe catalog, records on) under modern tools/call at 16 conns."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out_dir = Path(args.profile_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    raw_file = out_dir / "http-bench-call.txt"
    with tempfile.TemporaryDirectory(prefix="http-bench-") as temp:
        bench = Bench(Path(temp), None)
        try:
            bench.start_all(["probe"], with_sdk=False)
            workload = WORKLOADS["call"]
            proc = bench.procs[(THIS_REC, "probe")]
            bench.verify(THIS_REC, workload, proc)
            script = Path(temp) / "call.lua"
            script.write_text(lua_script(workload, {}))
            run_wrk(proc, script, 16, 1, bench.load_pin)
            load = subprocess.Popen(
                [*bench.load_pin, "wrk", "-t1", "-c16", f"-d{args.profile_seconds + 3}s", "-s",
                 str(script), f"http://127.0.0.1:{proc.port}/mcp"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            time.sleep(1)
            subprocess.run(
                [py_spy, "record", "--pid", str(proc.pid), "--duration", str(args.profile_seconds),
                 "--rate", "500", "--format", "raw", "-o", str(raw_file)],
                check=True, capture_output=True,
            )  # fmt: skip
            out, _ = load.communicate(timeout=30)
            rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
            print(f"load during the profile: {rate.group(1) if rate else '?'} requests/s (slowed by sampling)")
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


def profile_summary(raw: str, top: int) -> list[str]:
    leaf: Counter[str] = Counter()
    server_self: Counter[str] = Counter()
    server_attributed: Counter[str] = Counter()
    server_inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_parts(f) for f in stack.split(";")]
        frames = [(fn, loc) for fn, loc in frames if loc]  # drop the thread/process label
        if not frames:
            continue
        total += count
        fn, loc = frames[-1]
        leaf[f"{fn} ({short_file(loc)})"] += count
        if is_server_code(loc):
            server_self[f"{fn} ({short_file(loc)})"] += count
        ours = [(f, l) for f, l in frames if is_server_code(l)]
        if ours:
            f, l = ours[-1]
            server_attributed[f"{f} ({short_file(l)})"] += count
        for f, l in {(f, short_file(l)) for f, l in ours}:
            server_inclusive[f"{f} ({l})"] += count

    def table(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{title} (% of {total} samples)"]
        rows += [f"  {100 * n / total:5.1f}%  {name}" for name, n in counter.most_common(top)]
        return rows

    return [
        *table("self time, any code (leaf frames)", leaf),
        *table("self time in server/ code (leaf frame in server/)", server_self),
        *table("time by innermost server/ frame (its own code + the library calls it makes)",
               server_attributed),  # fmt: skip
        *table("inclusive time of server/ functions", server_inclusive),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 connections only, 1 s runs")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per cell (>= 3)")
    parser.add_argument("--seconds", type=int, default=0, help="seconds per wrk run")
    parser.add_argument("--budget", type=int, default=0, help="stop new repeats past this (s)")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--no-sdk", action="store_true", help="skip the official SDK")
    parser.add_argument("--verbose", action="store_true", help="print every run")
    parser.add_argument("--profile", action="store_true", help="py-spy this server under load")
    parser.add_argument("--profile-seconds", type=int, default=10)
    parser.add_argument("--profile-dir", default=str(ROOT / ".cache" / "bench-profile"))
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    args.repeats = max(3, args.repeats)
    if args.profile:
        return profile(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
