"""Benchmark: ``python -m server report`` over a million realistic records in under 10 s.

Writes N records (default 1,000,000) the way the server's record writer does: several clients
in both eras (sessions in the ``initialize`` era, ``server/discover`` and listen streams in
2026-07-28, unidentified curl and bot traffic), mixed methods with parameters, tool, prompt
and resource targets with their outcomes (ok, isError, crash, protocol errors), errors, stream
records with their time to first message and client answers. Then it times the whole command
as a user runs it, process start included, three times: ``python -m server report FILE --format json
--output /dev/null``, and the same with every filter (``--since``, ``--until``, ``--client``,
``--method``), and ``--retire initialize`` (who still speaks that era); it prints records/s
and the elapsed time of each, and exits 1 if any is above the limit.

    python tests/bench/report_speed.py [--records N] [--gzip] [--limit SECONDS] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
MODERN_ADVERTISED = [
    "server/discover",
    "subscriptions/listen",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
]
LEGACY_ADVERTISED = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    *MODERN_ADVERTISED[2:],
]
TOOLS = ["echo", "add", "count_slowly", "ask_name", "weather", "search_documents"]

# (name, version, user agent, era, protocol version, capabilities, weighted methods)
Client = tuple[str | None, str | None, str, str, str, dict[str, Any], dict[str, int]]
CLIENTS: list[Client] = [
    (
        "claude-code",
        "2.1.0",
        "claude-code/2.1.0 (cli)",
        "legacy",
        "2025-11-25",
        {"roots": {"listChanged": True}, "elicitation": {}},
        {"tools/call": 60, "tools/list": 8, "ping": 10, "(response)": 3, "resources/read": 4},
    ),
    (
        "Cursor",
        "1.5.11",
        "Cursor/1.5.11 node",
        "legacy",
        "2025-06-18",
        {"roots": {}, "sampling": {}},
        {"tools/call": 50, "tools/list": 15, "prompts/list": 3, "notifications/cancelled": 1},
    ),
    (
        "mcp-inspector",
        "0.17.0",
        "node-fetch",
        "modern",
        MODERN,
        {"elicitation": {"form": {}}, "sampling": {}},
        {
            "server/discover": 5,
            "tools/list": 10,
            "tools/call": 40,
            "resources/read": 10,
            "resources/templates/list": 2,
            "subscriptions/listen": 1,
            "completion/complete": 2,
        },
    ),
    (
        "mcp-python-sdk",
        "2.0.0",
        "python-httpx/0.28.1",
        "modern",
        MODERN,
        {},
        {"server/discover": 2, "tools/call": 70, "tools/list": 5, "prompts/get": 3},
    ),
    (None, None, "curl/8.5.0", "modern", MODERN, {}, {"tools/call": 5, "tools/list": 5}),
    (None, None, "Mozilla/5.0 (compatible; scanner/1.0)", "legacy", "", {}, {"GET": 1}),
]
CLIENT_WEIGHTS = [35, 25, 15, 15, 6, 4]


def stamp_table(seconds: int) -> list[str]:
    start = time.mktime((2026, 11, 30, 0, 0, 0, 0, 0, 0)) - time.timezone
    return [
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start + second)) for second in range(seconds)
    ]


def generate(path: Path, count: int, *, compress: bool) -> int:
    """Write ``count`` records (request and stream records together) to ``path``."""
    rng = random.Random(1)
    stamps = stamp_table(86_400)
    methods = [list(client[6].items()) for client in CLIENTS]
    sessions = [[f"s{index}{n:030d}" for n in range(200)] for index in range(len(CLIENTS))]
    opener: Any = gzip.open if compress else open
    written = 0
    batch: list[bytes] = []
    dumps = orjson.dumps
    with opener(path, "wb") as out:
        while written < count:
            index = rng.choices(range(len(CLIENTS)), CLIENT_WEIGHTS)[0]
            client = CLIENTS[index]
            method = rng.choices([m for m, _ in methods[index]], [w for _, w in methods[index]])[0]
            when = f"{stamps[written * 86_400 // count]}.{written % 1000:03d}Z"
            record = request_record(rng, when, client, method)
            if client[3] == "legacy" and client[0] is not None:
                record["session_id"] = rng.choice(sessions[index])
            batch.append(dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            written += 1
            if record["streaming"] and written < count:
                batch.append(dumps(stream_record(rng, record), option=orjson.OPT_APPEND_NEWLINE))
                written += 1
            if len(batch) >= 4096:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))
    return written


def request_record(  # noqa: PLR0915 - one branch per method, as they come
    rng: random.Random, when: str, client: Client, drawn: str
) -> dict[str, Any]:
    name, version, agent, era, protocol, capabilities, _ = client
    method: str | None = drawn
    verb = "POST"
    status, error, params, streaming = 200, None, None, False
    advertised: list[str] | None = None
    target: str | None = None
    outcome: str | None = None
    if name is not None and era == "legacy" and rng.random() < 0.002:
        method, advertised = "initialize", LEGACY_ADVERTISED
        params = {
            "protocolVersion": protocol,
            "capabilities": capabilities,
            "clientInfo": {"name": name, "version": version},
        }
    elif method == "GET":  # a scanner probing the legacy GET stream without a session
        verb, method, status = "GET", None, 400
        error = {"code": -32600, "message": "Bad Request: the Mcp-Session-Id header is required"}
    elif method == "tools/call":
        tool = rng.choice(TOOLS)
        params = {"name": tool, "arguments": {"text": "hello " * rng.randint(1, 20), "n": 3}}
        streaming = tool == "count_slowly"
        target, outcome = tool, None if streaming else "ok"
        if tool == "weather":
            status = 200
            error = {"code": -32602, "message": "Unknown tool: weather"}
            outcome = "error"
        elif tool == "search_documents" and rng.random() < 0.2:
            outcome = "is_error" if rng.random() < 0.8 else "crash"
    elif method == "prompts/get":
        params = {"name": "plan_trip", "arguments": {"destination": "Oslo"}}
        target, outcome = "plan_trip", "ok"
    elif method == "server/discover":
        advertised = MODERN_ADVERTISED
    elif method == "resources/read":
        params = {"uri": f"probe://doc/{rng.randint(1, 50)}"}
        target, outcome = "probe://doc/{id}", "ok"
        if rng.random() < 0.05:
            target, outcome = None, "error"
            error = {"code": -32602, "message": "Resource not found"}
    elif method == "subscriptions/listen":
        params = {"notifications": {"toolsListChanged": True}}
        streaming = True
    elif method == "(response)":
        params = None
    if era == "modern":
        meta = {
            "io.modelcontextprotocol/protocolVersion": protocol,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
        params = {**(params or {}), "_meta": meta}
        if name is None and rng.random() < 0.3:
            status = 400
            error = {"code": -32020, "message": "Mcp-Method header does not match the body"}
    notification = method is not None and method.startswith("notifications/")
    record: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": when,
        "request_id": f"{rng.getrandbits(64):016x}",
        "verb": verb,
        "path": "/mcp",
        "status": 202 if notification or method == "(response)" else status,
        "era": era,
        "protocol_version": {
            "header": protocol if method != "initialize" else None,
            "body": protocol or None,
        },
        "method": method,
        "jsonrpc_id": None if notification else rng.randint(1, 10_000),
        "notification": notification if method else None,
        "client": {"name": name, "version": version, "capabilities": capabilities},
        "session_id": None,
        "subject": None,
        "user_agent": agent,
        "client_address": f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}",
        "error": error,
        "duration_ms": round(rng.random() * 40, 3),
        "bytes_in": rng.randint(80, 900),
        "bytes_out": rng.randint(60, 4000),
        "streaming": streaming,
        "params": params,
    }
    if advertised is not None:
        record["advertised"] = advertised
    if method in ("tools/call", "prompts/get", "resources/read"):
        if target is not None:
            record["target"] = target
        if outcome is not None:
            record["outcome"] = outcome
    return record


def stream_record(rng: random.Random, request: dict[str, Any]) -> dict[str, Any]:
    calls = request["method"] == "tools/call"
    return {
        "v": 1,
        "kind": "stream",
        "time": request["time"],
        "request_id": request["request_id"],
        "verb": request["verb"],
        "era": request["era"],
        "method": request["method"],
        "session_id": request["session_id"],
        "client": {"name": request["client"]["name"], "version": request["client"]["version"]},
        "user_agent": request["user_agent"],
        "opened": request["time"],
        "open_ms": round(rng.random() * 5000, 3),
        "events": rng.randint(1, 12),
        "bytes_out": rng.randint(200, 9000),
        "end": rng.choice(["complete", "complete", "complete", "client_closed"]),
        "error": None,
        "outcome": "ok" if calls else None,
        "target": request.get("target"),
        "ttfb_ms": round(rng.random() * 200, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--gzip", action="store_true", help="write the records gzipped")
    parser.add_argument("--limit", type=float, default=10.0, help="seconds allowed")
    parser.add_argument("--keep", type=Path, help="write the records here and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / ("records.jsonl.1.gz" if args.gzip else "records.jsonl")
        started = time.perf_counter()
        count = generate(path, args.records, compress=args.gzip)
        size = path.stat().st_size
        print(
            f"generated {count:,} records, {size / 1e6:.1f} MB ({path.name}) "
            f"in {time.perf_counter() - started:.1f} s"
        )
        base = [sys.executable, "-m", "server", "report", str(path), "--format", "json"]
        base += ["--output", os.devnull]
        # A window of the day, two clients, the calls: every filter, each one cutting.
        filters = ["--since", "2026-11-30T02:00", "--until", "2026-11-30T20:00"]
        filters += ["--client", "claude", "--client", "inspector", "--method", "tools/*"]
        # Who still speaks the initialize era (most of these clients): the report beside it.
        retire = [*base, "--retire", "initialize", "--since", "2026-11-30T02:00"]
        timings = []
        for command in (base, base + filters, retire):
            started = time.perf_counter()
            # --retire exits 1 while anyone used the item: that is its answer, not a failure.
            done = subprocess.run(command, cwd=ROOT, check=False)
            if done.returncode not in ((0, 1) if "--retire" in command else (0,)):
                raise SystemExit(f"failed: {' '.join(command)}")
            timings.append((command, time.perf_counter() - started))
    failed = False
    for command, elapsed in timings:
        print(f"report: {count / elapsed:,.0f} records/s, {elapsed:.2f} s elapsed")
        print(f"command: {' '.join(command)}")
        if elapsed > args.limit:
            print(f"FAIL: over the {args.limit:g} s limit")
            failed = True
    if failed:
        return 1
    print(f"ok: under the {args.limit:g} s limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
