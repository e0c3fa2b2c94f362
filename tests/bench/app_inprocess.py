"""Benchmark: the app's own time per request, in process, without HTTP or sockets.

    python tests/bench/app_inprocess.py [--requests 30000] [--concurrency 1]
        [--workload call|call-sync|call-on-loop|list|legacy] [--records none|file] [--profile]

Calls the ASGI app directly on a uvloop loop with a prepared scope and body, one request after
another (``--concurrency N``: N at a time): modern ``tools/call`` of ``echo`` (the default),
modern ``tools/list`` of the probe catalog, or a legacy ``tools/call`` on an open session.
``call-sync`` calls ``def echo_sync``, which runs in a worker thread: one request at a time pays
the whole round trip to the thread and back, wake-ups included, which requests in flight
together share; ``call-on-loop`` calls the same declared ``blocking=False`` (run on the loop).
What it measures is the app's code alone (endpoint, era, dispatch, tool, records hand-over): no
uvicorn, no kernel, no client. Use it to compare changes to the hot path quickly; the HTTP
benchmark (``http_bench.py``) is the one that says what a client sees. Under real load each
microsecond here costs more (caches are colder, and a slower server wakes its clients more
often: see docs/benchmarks.md). Besides the time per request it prints the process's CPU time
per request (the worker threads' included).

The collector is tuned as ``python -m server`` tunes it. ``--profile`` adds a cProfile table
(its own overhead inflates every number, so read it for proportions).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# The same requests the HTTP benchmark sends (this directory is on sys.path when run).
from http_bench import LEGACY, META, MODERN, call_params  # noqa: E402

from server.app import Application  # noqa: E402
from server.builtin.probe import catalog as probe_catalog  # noqa: E402
from server.catalog import Catalog  # noqa: E402
from server.serving import tune_collector  # noqa: E402
from server.settings import Settings  # noqa: E402

CALL = call_params("echo")

BASE_HEADERS = [
    (b"host", b"127.0.0.1:8000"),
    (b"user-agent", b"app-bench"),
    (b"content-type", b"application/json"),
    (b"accept", b"application/json, text/event-stream"),
]


def sync_catalog(*, on_loop: bool) -> Catalog:
    """One ``def`` echo, as most authors write a tool."""
    catalog = Catalog("app-bench")

    def echo_sync(text: str) -> str:
        """Return the given text unchanged."""
        return text

    if on_loop:
        catalog.tool(blocking=False)(echo_sync)  # a tree without the option fails here
    else:
        catalog.tool(echo_sync)
    return catalog


class Harness:
    def __init__(self, app: Application) -> None:
        self.app = app
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.body = b""

    async def post(self, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        headers = [*BASE_HEADERS, (b"content-length", str(len(body)).encode()), *extra]
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        message = {"type": "http.request", "body": body, "more_body": False}

        unread = [message]

        async def receive() -> dict[str, Any]:
            if unread:
                return unread.pop()
            # The body was read: from here on a server waits until the client goes away. (A
            # receive that answered at once would spin the disconnect watcher, which starts
            # for any request slower than 20 ms, forever without yielding: a hung bench.)
            await asyncio.get_running_loop().create_future()
            raise AssertionError("unreachable")

        async def send(event: MutableMapping[str, Any]) -> None:
            if event["type"] == "http.response.start":
                self.status = event["status"]
                self.headers = dict(event.get("headers", []))
            else:
                self.body = event.get("body", b"")  # keep only the last: no growing heap

        await self.app(scope, receive, send)


def modern_request(method: str, params: dict[str, Any], name: str | None) -> tuple[bytes, list]:
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    )
    extra = [(b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", method.encode())]
    if name is not None:
        extra.append((b"mcp-name", name.encode()))
    return body, extra


async def legacy_request(harness: Harness) -> tuple[bytes, list]:
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "app-bench", "version": "1"},
        },
    }
    await harness.post(orjson.dumps(initialize), [])
    extra = [
        (b"mcp-protocol-version", LEGACY.encode()),
        (b"mcp-session-id", harness.headers[b"mcp-session-id"]),
    ]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await harness.post(orjson.dumps(initialized), extra)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call_params("echo")}
    return orjson.dumps(call), extra


async def measure(args: argparse.Namespace, app: Application) -> None:
    harness = Harness(app)
    if args.workload in ("call", "call-sync", "call-on-loop"):
        tool = "echo" if args.workload == "call" else "echo_sync"
        body, extra = modern_request("tools/call", call_params(tool), tool)
    elif args.workload == "list":
        body, extra = modern_request("tools/list", {}, None)
    else:
        body, extra = await legacy_request(harness)
    for _ in range(500):  # warm-up: caches, lazily built pages, the records writer
        await harness.post(body, extra)
    if harness.status != 200 or b'"result"' not in harness.body:
        raise SystemExit(f"unexpected answer {harness.status}: {harness.body[:300]!r}")
    tune_collector()
    harnesses = [harness, *(Harness(app) for _ in range(args.concurrency - 1))]
    each = args.requests // args.concurrency
    total = each * args.concurrency

    async def serve(harness: Harness) -> None:
        for _ in range(each):
            await harness.post(body, extra)

    rounds, cpu = [], []
    for _ in range(args.rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        if args.concurrency == 1:
            await serve(harness)
        else:
            await asyncio.gather(*(serve(one) for one in harnesses))
        rounds.append((time.perf_counter() - started) / total * 1e6)
        cpu.append((time.process_time() - started_cpu) / total * 1e6)
    rounds.sort()
    cpu.sort()
    # CPU time (every thread of the process: the records writer's and the handler pool's too)
    # is the steadier number on a shared machine; wall time is what one request waits.
    print(
        f"{args.workload}, records {args.records}, concurrency {args.concurrency}: "
        f"{rounds[len(rounds) // 2]:.1f} us per request (median of {args.rounds} rounds of "
        f"{total}; min {rounds[0]:.1f}, max {rounds[-1]:.1f}); process CPU "
        f"{cpu[len(cpu) // 2]:.1f} us (min {cpu[0]:.1f}, max {cpu[-1]:.1f})"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(min(args.requests, 5000)):
            await harness.post(body, extra)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workload",
        choices=["call", "call-sync", "call-on-loop", "list", "legacy"],
        default="call",
    )
    parser.add_argument("--records", choices=["none", "file"], default="none")
    parser.add_argument(
        "--concurrency", type=int, default=1, help="requests in flight at once (default 1)"
    )
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    import uvloop

    with tempfile.TemporaryDirectory(prefix="app-bench-") as temp:
        settings = Settings(
            _env_file=None,
            records=[args.records],
            records_file=str(Path(temp) / "records.jsonl"),
            rate_limit_rps=1e9,
            rate_limit_burst=1_000_000_000,
        )
        catalog = (
            sync_catalog(on_loop=args.workload == "call-on-loop")
            if args.workload in ("call-sync", "call-on-loop")
            else probe_catalog
        )
        app = Application(settings, catalog)
        try:
            uvloop.new_event_loop().run_until_complete(started(args, app))
        finally:
            gc.unfreeze()
    return 0


async def started(args: argparse.Namespace, app: Application) -> None:
    # Served as a server serves it: within its lifespan (an app that was never started
    # answers 503 to a scope that carries a server's "state").
    async with app.lifespan():
        await measure(args, app)


if __name__ == "__main__":
    sys.exit(main())
