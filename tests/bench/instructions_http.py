"""Instructions per request over real HTTP, by layer: a whole served process under callgrind.

    python tests/bench/instructions_http.py [--n1 64] [--n2 640] [--servers this uvicorn limit]
        [--no-layers] [--plain] [--records file|none] [--server-root TREE] [--keep DIR]
        [--sync-on-loop]

Serves the bench catalog of ``http_bench.py`` (``async def echo`` and ``def echo_sync``) on
127.0.0.1 with ``python -m server`` under ``valgrind --tool=callgrind``: ``this`` on this
server's own HTTP protocol, ``uvicorn`` on uvicorn's (``MCP_COALESCE_WRITES=false``), and
``limit``, the bare ASGI app ``http_bench.py`` compares with. A client outside valgrind sends
modern ``tools/call`` requests one after another on one keep-alive connection per phase:
after a warm-up the counters are zeroed (``callgrind_control``), then N1 calls, a dump, N2
calls, a dump, for the async tool and then the sync one. (N2 - N1) divides the difference of
the two dumps, so start-up and each phase's connection cancel out, as in ``instructions.sh``.

Layers: callgrind sees every Python function as the interpreter's loop, so the process runs
with a C extension built here (``layer_hook.c``; gcc, CPython 3.11) that installs a frame
evaluation hook (PEP 523): each Python frame is classed once by its file (``RULES``), and a
frame whose layer differs from its caller's runs through a C function named for the pair. The
inclusive costs callgrind records for those calls give each layer's own instructions (C code
such as orjson, httptools or uvloop's writes counts for the Python code that called it). The
hook costs instructions and turns off 3.11's inlined Python calls: ``--plain`` adds a run
without it, whose total is printed beside. ``--sync-on-loop`` declares ``echo_sync`` with
``blocking=False`` (run on the event loop, not in a worker thread). Needs valgrind; about
1.5 min per run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from http_bench import (  # noqa: E402
    LIMIT_APP,
    Workload,
    bench_catalog_source,
    free_port,
    modern_call,
)

# (name, what of the code it is): the first matching rule in RULES wins, else "rest".
LAYERS = [
    ("rest", "interpreter, asyncio, uvloop's loop, logging, start-up"),
    ("HTTP protocol", "uvicorn, httptools, server/serving/"),
    ("admission", "server/app/, asgi, transport endpoint and guards, security/ (gate, rate)"),
    ("era and dispatch", "server/modern/, transport/modern, dispatch, jsonrpc, catalog, ..."),
    ("handler hop", "catalog/offload (the worker pool), concurrent.futures, asyncio threads"),
    ("the tool", "bench_catalog.py: echo / echo_sync"),
    ("records", "server/records/: the draft, the line and the writer thread"),
    ("metrics", "server/observe/"),
    ("response write", "server/transport/response_writer, send, sse"),
    ("timers and watches", "transport/disconnect, serving/idle_sweep and stalled_clients"),
    ("bare app", "limit_app.py: http_bench's bare ASGI limit"),
]
# "inherit": the caller's layer (a lock or a queue counts for whoever waits on it)
INDEX = {"inherit": -1} | {name: i for i, (name, _) in enumerate(LAYERS)}
RULES = [
    ("{root}/server/cli/", "rest"),
    ("{root}/server/__main__.py", "rest"),
    ("{root}/server/records/", "records"),
    ("{root}/server/observe/", "metrics"),
    ("/prometheus_client/", "metrics"),
    ("{root}/server/catalog/offload.py", "handler hop"),
    ("{root}/server/aio.py", "inherit"),  # loop and task helpers, for whoever calls them
    ("{root}/server/transport/disconnect.py", "timers and watches"),
    ("{root}/server/serving/idle_sweep.py", "timers and watches"),
    ("{root}/server/serving/stalled_clients.py", "timers and watches"),
    ("{root}/server/transport/response_writer.py", "response write"),
    ("{root}/server/transport/send.py", "response write"),
    ("{root}/server/transport/sse.py", "response write"),
    ("{root}/server/serving/", "HTTP protocol"),
    ("/uvicorn/", "HTTP protocol"),
    ("/httptools/", "HTTP protocol"),
    ("/h11/", "HTTP protocol"),
    ("{root}/server/app/", "admission"),
    ("{root}/server/asgi.py", "admission"),
    ("{root}/server/transport/endpoint.py", "admission"),
    ("{root}/server/transport/guards.py", "admission"),
    ("{root}/server/security/", "admission"),
    ("/starlette/", "admission"),
    ("{root}/server/", "era and dispatch"),
    ("bench_catalog.py", "the tool"),
    ("/concurrent/futures/", "handler hop"),
    ("/threading.py", "inherit"),
    ("/queue.py", "inherit"),
    ("/asyncio/threads.py", "handler hop"),
    ("limit_app.py", "bare app"),
]

# --sync-on-loop: the bench's two tools, the sync one promised not to block (blocking=False).
SYNC_ON_LOOP_CATALOG = """
from bench_catalog import echo, echo_sync


def catalog_calls_loop():
    from server import Catalog

    catalog = Catalog("bench-tools", "1.0.0")
    catalog.tool(echo)
    catalog.tool(echo_sync, blocking=False)
    return catalog
"""

HOOK_C = HERE / "layer_hook.c"  # @PAIRS@, @TABLE@ and @N@ filled in by build_hook

BOOT = """
import os, runpy, sys
RULES = {rules!r}
def classify(code):
    name = code.co_filename
    for part, layer in RULES:
        if part in name:
            return layer
    return 0
kind, target = sys.argv[1], sys.argv[2]
if os.environ.get("MCP_BENCH_LAYERS") == "1":
    import _mcplayers
    _mcplayers.install(classify)
if kind == "module":
    # The disconnect watch starts on a request slower than 20 ms: under callgrind's slowdown
    # every sync call would be; scaled, as the other timers are not (they are per second).
    try:
        from server.transport.disconnect import DisconnectWatch
        DisconnectWatch.WATCH_AFTER_S *= 50
    except (ImportError, AttributeError):  # a tree without it
        pass

sys.argv = sys.argv[2:]
if kind == "module":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    runpy.run_path(target, run_name="__main__")
"""


def build_hook(directory: Path, root: Path) -> None:
    n = len(LAYERS)
    pairs = "\n".join(f"PAIR({i}, {j})" for i in range(n) for j in range(n))
    table = ",".join(
        "{" + ",".join(f"mcplayer_t_{i}_{j}" for j in range(n)) + "}" for i in range(n)
    )
    source = (
        HOOK_C.read_text()
        .replace("@PAIRS@", pairs)
        .replace("@TABLE@", table)
        .replace("@N@", str(n))
    )
    (directory / "mcplayers.c").write_text(source)
    include = sysconfig.get_paths()["include"]
    output = f"_mcplayers{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(
        # -fno-ipa-icf: the pairs' functions are identical, and must not be folded into one
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-fno-ipa-icf",
            f"-I{include}",
            "mcplayers.c",
            "-o",
            output,
        ],
        cwd=directory,
        check=True,
    )
    rules = [(part.format(root=root), INDEX[layer]) for part, layer in RULES]
    (directory / "layer_boot.py").write_text(BOOT.format(rules=rules))


def parse(path: Path) -> tuple[int, list[int]]:
    """(total Ir, each layer's own Ir) of one callgrind dump (uncompressed names)."""
    n = len(LAYERS)
    into = [[0] * n for _ in range(n)]
    total = 0
    target: tuple[int, int] | None = None
    pending = False
    pair = re.compile(r"^cfn=mcplayer_t_(\d+)_(\d+)(?:'\d+)?$")
    with path.open() as lines:
        for line in lines:
            if pending:
                if target is not None:
                    into[target[0]][target[1]] += int(line.split()[-1])
                pending = False
            elif line.startswith("cfn="):
                match = pair.match(line.strip())
                target = (int(match[1]), int(match[2])) if match else None
            elif line.startswith("calls="):
                pending = True
            elif line.startswith("summary:"):  # this dump's period ("totals:" may hold more)
                total = int(line.split()[1])
    own = []
    for j in range(n):
        # Everything starts in "rest": outside any pair's call (start-up, the C loop).
        entered = sum(into[i][j] for i in range(n)) + (total if j == 0 else 0)
        own.append(entered - sum(into[j][k] for k in range(n)))
    return total, own


class Served:
    """One process under callgrind; its dumps are taken with callgrind_control."""

    def __init__(
        self, work: Path, root: Path, name: str, command: list[str], env: dict[str, str]
    ) -> None:
        self.work, self.name, self.port = work, name, free_port()
        self.out = work / f"{name}.cg"
        self.dumps = 0
        env = {**env, "PYTHONHASHSEED": "0", "PYTHONPATH": f"{root}{os.pathsep}{work}"}
        with (work / f"{name}.log").open("wb") as log:
            self.process = subprocess.Popen(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--compress-strings=no",
                    "--compress-pos=no",
                    # a pair entered again within itself (the loop's callbacks under the
                    # start-up's pairs) gets its own name per depth, so each call's inclusive
                    # cost is recorded whole (callgrind counts a recursion's cost once)
                    "--separate-recs=50",
                    f"--callgrind-out-file={self.out}",
                    sys.executable,
                    "layer_boot.py",
                    *[part.replace("@PORT@", str(self.port)) for part in command],
                ],
                cwd=work,
                env={k: v.replace("@PORT@", str(self.port)) for k, v in env.items()},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait(self, workload: Workload, path: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited: see {self.work / (self.name + '.log')}")
            try:
                self.send(workload, path, 1)
                return
            except OSError:
                time.sleep(1)
        raise SystemExit(f"{self.name} did not answer within {seconds:.0f} s")

    def send(self, workload: Workload, path: str, count: int) -> dict[str, object]:
        """``count`` requests on one keep-alive connection; the last answer's result."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        result: dict[str, object] = {}
        try:
            for _ in range(count):
                connection.request("POST", path, workload.body.encode(), workload.headers)
                response = connection.getresponse()
                answer = json.loads(response.read())
                if response.status != 200 or "result" not in answer:
                    raise SystemExit(f"{self.name}: {response.status} {answer}")
                result = answer["result"]
        finally:
            connection.close()
        return result

    def control(self, *options: str) -> None:
        subprocess.run(
            ["callgrind_control", *options, str(self.process.pid)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def dump(self) -> Path:
        self.dumps += 1
        self.control(f"--dump=phase{self.dumps}")
        dumped = Path(f"{self.out}.{self.dumps}")
        deadline = time.monotonic() + 120
        while not dumped.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1)  # written by then: callgrind writes a dump at once
        return dumped

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def measure(served: Served, workload: Workload, path: str, n1: int, n2: int) -> list[list[int]]:
    """(total, own per layer) per request: the N2 phase's dump less the N1 phase's."""
    served.send(workload, path, n1)
    first = parse(served.dump())
    served.send(workload, path, n2)
    second = parse(served.dump())
    span = n2 - n1
    return [
        [(second[0] - first[0]) // span],
        [(b - a) // span for a, b in zip(first[1], second[1], strict=True)],
    ]


def table(title: str, total: int, own: list[int], plain: int | None) -> list[str]:
    lines = [f"\n{title}", "| layer | instructions per request | share |", "| --- | ---: | ---: |"]
    for (name, _), value in sorted(zip(LAYERS, own, strict=True), key=lambda p: -p[1]):
        if value:
            lines.append(f"| {name} | {value:,} | {value / total:.1%} |")
    lines.append(f"| **sum of the lines** | {sum(own):,} | {sum(own) / total:.1%} |")
    lines.append(f"| measured total (with the layer hook) | {total:,} | 100% |")
    if plain is not None:
        lines.append(f"| measured total, plain run (no hook) | {plain:,} | {plain / total:.1%} |")
    return lines


def run_server(
    server: str, args: argparse.Namespace, work: Path, result: dict[str, object]
) -> tuple[dict[tuple[str, bool], list[list[int]]], dict[str, object]]:
    """Serve one server, layered and/or plain; its numbers per (tool kind, layered)."""
    calls = {
        "async": modern_call("call", "async", "echo"),
        "sync": modern_call("call_sync", "sync", "echo_sync"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    if server == "limit":
        (work / "limit.json").write_text(json.dumps({"/call": result}))
        command, path = ["path", "limit_app.py", "@PORT@", "limit.json"], "/call"
        calls.pop("sync")
    else:
        command, path = ["module", "server"], "/mcp"
        env |= {
            "MCP_HOST": "127.0.0.1",
            "MCP_PORT": "@PORT@",
            "MCP_LOG_LEVEL": "warning",
            "MCP_CATALOG": "layer_boot_catalog:catalog_calls_loop"
            if args.sync_on_loop
            else "bench_catalog:catalog_calls",
            "MCP_RECORDS": args.records,
            "MCP_RECORDS_FILE": str(work / "records.jsonl"),
            "MCP_RECORDS_COMPRESS": "false",
            # The writer writes full batches of 64, as under load: on its 200 ms timer,
            # valgrind's slowdown (more so on a loaded machine) made batches of 1 to 20, and
            # their fixed cost moved totals by 5% from run to run.
            "MCP_RECORDS_FLUSH_MS": "10000",
            "MCP_RATE_LIMIT_RPS": "1000000000",  # its cost counted, never refusing
            "MCP_RATE_LIMIT_BURST": "1000000000",
            "MCP_DRAIN_TIMEOUT_S": "2",
            "MCP_COALESCE_WRITES": str(server == "this").lower(),
        }
    modes = [False] if args.no_layers else ([True, False] if args.plain else [True])
    numbers: dict[tuple[str, bool], list[list[int]]] = {}
    for layered in modes:
        name = f"{server}-{'layers' if layered else 'plain'}"
        served = Served(
            work, args.server_root, name, command, {**env, "MCP_BENCH_LAYERS": "01"[layered]}
        )
        try:
            served.wait(calls["async"], path, 600)
            for workload in calls.values():
                answer = served.send(workload, path, args.warmup)
                result = result or answer
            served.control("--zero")
            for kind, workload in calls.items():
                numbers[(kind, layered)] = measure(served, workload, path, args.n1, args.n2)
        finally:
            served.stop()
    return numbers, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Multiples of the records writer's batch (64): with 50 and 250 a phase held a part of a
    # batch more or less from run to run, which moved two runs of one tree by 30 thousand.
    parser.add_argument("--n1", type=int, default=64)
    parser.add_argument("--n2", type=int, default=640)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--servers", nargs="+", default=["this", "uvicorn", "limit"])
    parser.add_argument("--no-layers", action="store_true", help="plain totals only")
    parser.add_argument("--records", choices=["file", "none"], default="file")
    parser.add_argument("--plain", action="store_true", help="also a plain run for each total")
    parser.add_argument(
        "--server-root", type=Path, default=ROOT, help="the checkout whose server/ is served"
    )
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this folder")
    parser.add_argument(
        "--sync-on-loop", action="store_true", help="echo_sync declared with blocking=False"
    )
    args = parser.parse_args()
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("the layer hook reads CPython 3.11's frames: run it with Python 3.11")
    work = args.keep or Path(tempfile.mkdtemp(prefix="instructions-http-"))
    work.mkdir(parents=True, exist_ok=True)
    args.server_root = args.server_root.resolve()
    build_hook(work, args.server_root)
    (work / "bench_catalog.py").write_text(bench_catalog_source())
    (work / "layer_boot_catalog.py").write_text(SYNC_ON_LOOP_CATALOG)
    (work / "limit_app.py").write_text(LIMIT_APP)
    result: dict[str, object] = {}  # this server's answer: the limit answers the same bytes
    out: list[str] = []
    for server in args.servers:
        numbers, result = run_server(server, args, work, result)
        for kind in ("async", "sync"):
            plain = numbers.get((kind, False))
            if (kind, True) in numbers:
                total, own = numbers[(kind, True)][0][0], numbers[(kind, True)][1]
                title = f"{server}: modern tools/call, {kind} tool"
                out += table(title, total, own, plain[0][0] if plain else None)
            elif plain:
                out.append(f"{server}, {kind} tool: {plain[0][0]:,} instructions per request")
        print(f"{server} done", flush=True)
    print(f"{args.server_root}: N1={args.n1} N2={args.n2}; files in {work}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
