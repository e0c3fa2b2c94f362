"""The chaos and rollout run: faults one at a time under mixed load from every client generation.

    python tests/chaos/run.py [--short | --long] [--replicas 3] [--keep]

Starts (all on 127.0.0.1, free ports, stopped by PID at the end) one redis-server, N
``python -m server`` replicas (``tests.chaos.catalog``) sharing it, and nginx with the shipped
``deploy/nginx/mcp.conf`` balancing round robin with no affinity
(:class:`tests.support.replicas.Replicas`). Then the load, all through nginx:

- 2026-07-28: two callers (``tools/call`` + ``tools/list``), a ``subscriptions/listen`` stream
  re-opened whenever it ends, a task client (create, poll ``tasks/get``), and a client of calls
  silent for 10-30 s (3-8 s with ``--short``);
- ``initialize`` era: two raw sessions and one through the official SDK, each with its GET
  stream (resumed by ``Last-Event-ID``), progress calls and a subscription to its own URI that
  it touches (each touch must arrive exactly once on the GET stream);
- 2024-11-05 HTTP+SSE: one raw session and one through the SDK's ``sse_client``.

After a steady phase (its p99 is the yardstick), six faults one at a time, each followed by a
settle time (``tests/chaos/faults.py``): Redis stalled 10 s, Redis restarted empty, a replica
stalled 5 s, a replica SIGKILLed, a SIGTERM drain, a rolling restart of every replica (before
each, the SDK clients open a new session: the SDK does not recover some losses by itself, and
one fault's must not count against the next). Prints a line per fault (errors by kind, time to
recover, records exact, promise held), the rollout's per-client lines, and ``N/M promises
held``; exits 1 if a promise failed. The short run takes about 2 minutes, the long one about 5.
Everything is bounded: the whole run gives up after ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests` (and `server`) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.chaos.clients import (
    Client,
    LegacyClient,
    ModernCaller,
    ModernListener,
    ReadinessProbe,
)
from tests.chaos.faults import the_faults
from tests.chaos.http_sse import HttpSseClient
from tests.chaos.ledger import Ledger, watch_loop
from tests.chaos.sdk_clients import SdkSession
from tests.chaos.verdict import (
    Window,
    judge,
    orphans,
    p99_of,
    per_client,
    record_counts,
    timeline,
)
from tests.support.replicas import Replicas

CATALOG = "tests.chaos.catalog:catalog"
PROFILES = {
    # steady s, settle s after each fault, silent call range, drain deadline
    "short": {"steady": 10.0, "settle": 6.0, "silent": (3.0, 8.0), "drain": 5.0},
    "long": {"steady": 45.0, "settle": 20.0, "silent": (10.0, 30.0), "drain": 20.0},
}


def probe(replicas: Replicas, ledger: Ledger, stop: asyncio.Event) -> ReadinessProbe:
    return ReadinessProbe("readyz", "", ledger, stop, replicas=replicas.replica_urls)


def clients(
    base: str, ledger: Ledger, stop: asyncio.Event, touching: asyncio.Event, silent: Any
) -> list[Client]:
    made: list[Client] = [
        ModernCaller("modern-1", base, ledger, stop),
        ModernCaller("modern-2", base, ledger, stop),
        ModernListener("modern-listen", base, ledger, stop),
        ModernCaller("modern-tasks", base, ledger, stop, tasks=True),
        ModernCaller("modern-silent", base, ledger, stop, silent=silent),
        LegacyClient("legacy-1", base, ledger, stop, touching=touching),
        LegacyClient("legacy-2", base, ledger, stop, touching=touching),
        SdkSession("legacy-sdk", base, ledger, stop, touching=touching),
        HttpSseClient("sse-1", base, ledger, stop),
        SdkSession("sse-sdk", base, ledger, stop, touching=touching, sse=True),
    ]
    return made


class Counts:
    """Touches answered and updates received by every GET stream, between two quiet moments."""

    def __init__(self, made: list[Client]) -> None:
        self.made = [
            c for c in made if isinstance(c, (LegacyClient, SdkSession)) and c.era == "initialize"
        ]
        self.last = {c.name: (c.touches_ok, c.updates) for c in self.made}

    def since(self) -> dict[str, int]:
        """Per client: touches answered minus updates received since the last call (more than
        0: updates lost; less: updates that came twice, or for a touch whose answer was lost)."""
        missing = {}
        for c in self.made:
            touched, updated = c.touches_ok, c.updates
            before = self.last[c.name]
            missing[c.name] = (touched - before[0]) - (updated - before[1])
            self.last[c.name] = (touched, updated)
        return missing


async def renew(made: list[Client]) -> None:
    """A new SDK session for each SDK client, before the next fault (bounded: 20 s)."""
    sdk = [c for c in made if isinstance(c, SdkSession)]
    before = {c.name: c.sessions for c in sdk}
    for c in sdk:
        c.renew.set()
    for _ in range(200):
        if all(c.sessions > before[c.name] for c in sdk):
            return
        await asyncio.sleep(0.1)


async def quiet(touching: asyncio.Event, seconds: float = 2.0) -> None:
    """Hold touches until every update in flight has arrived."""
    touching.clear()
    await asyncio.sleep(seconds)


async def scenario(
    replicas: Replicas, profile: dict[str, Any], ledger: Ledger
) -> tuple[list[Window], float]:
    stop, touching = asyncio.Event(), asyncio.Event()
    touching.set()
    made = clients(replicas.url, ledger, stop, touching, profile["silent"])
    tasks = [asyncio.ensure_future(c.run()) for c in [*made, probe(replicas, ledger, stop)]]
    tasks.append(asyncio.ensure_future(watch_loop(ledger, stop)))
    try:
        begun = ledger.now()
        await asyncio.sleep(profile["steady"])
        await quiet(touching)
        counts = Counts(made)
        # Steady state once every client is connected (its first third is the start-up).
        steady_ops = ledger.in_window(begun + profile["steady"] / 3, ledger.now())
        steady_p99 = p99_of(steady_ops)
        windows: list[Window] = []
        for fault in the_faults(replicas.n, profile["drain"]):
            await renew(made)
            touching.set()
            window = Window(fault, ledger.now())
            resumes_before = sum(1 for m in ledger.marks if m.what == "GET resumed")
            print(f"-- {fault.name}", flush=True)
            await asyncio.to_thread(fault.act, replicas, fault)
            window.acted = ledger.now()
            await asyncio.sleep(profile["settle"])
            await quiet(touching)
            window.end = ledger.now()
            window.missing = counts.since()
            window.get_resumes = (
                sum(1 for m in ledger.marks if m.what == "GET resumed") - resumes_before
            )
            windows.append(window)
        return windows, steady_p99
    finally:
        stop.set()
        _done, pending = await asyncio.wait(tasks, timeout=30)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def epoch(record: dict[str, Any]) -> float | None:
    with contextlib.suppress(Exception):
        return datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()
    return None


def keep(ledger: Ledger, workdir: Path) -> None:
    """What the clients saw, beside the replicas' records and logs."""
    with (workdir / "ledger.jsonl").open("w") as out:
        for op in ledger.ops:
            out.write(json.dumps({**dataclasses.asdict(op), "seconds": op.seconds}) + "\n")
    with (workdir / "answered.jsonl").open("w") as out:
        for at, rid in ledger.answered:
            out.write(json.dumps({"at": at, "id": rid, "what": ledger.described[rid]}) + "\n")


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--short", action="store_true", help="about 2 minutes (CI)")
    length.add_argument("--long", action="store_true", help="about 5 minutes")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the replicas' records and logs")
    parser.add_argument("--limit", type=float, default=None, help="give up after this many s")
    args = parser.parse_args(argv)
    profile = PROFILES["long" if args.long else "short"]
    # SIGTERM (CI giving up) as Ctrl-C: the finally below stops what the run started.
    signal.signal(signal.SIGTERM, interrupted)
    # The SDK logs every failed POST with its traceback; the ledger counts them instead.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    limit = args.limit or (900.0 if args.long else 360.0)
    settings = {
        "MCP_DRAIN_TIMEOUT_S": f"{profile['drain']:g}",
        "MCP_SHUTDOWN_GRACE_S": "2",
        "MCP_REDIS_TIMEOUT_S": "2.0",
        "MCP_RECORDS_FLUSH_MS": "50",
        "MCP_TASK_LEASE_S": "3",
        "MCP_KEEPALIVE_S": "5" if not args.long else "15",
        "MCP_LOG_LEVEL": "warning",
        # Every client of the run reaches the replicas from 127.0.0.1 through nginx: one
        # "client" for the per-client caps, which are not what this run is about.
        "MCP_MAX_STREAMS_PER_CLIENT": "0",
        "MCP_MAX_SESSIONS_PER_CLIENT": "0",
        "MCP_MAX_TASKS_PER_CLIENT": "10000",
    }
    ledger = Ledger()
    wall = time.time() - ledger.now()  # monotonic + wall = the records' clock
    replicas = Replicas(args.replicas, CATALOG, settings)
    started = time.monotonic()
    try:
        replicas.start()
        print(f"{args.replicas} replicas, redis, nginx (shipped mcp.conf): {replicas.url}/mcp")
        windows, steady_p99 = asyncio.run(
            asyncio.wait_for(scenario(replicas, profile, ledger), limit)
        )
    finally:
        replicas.stop()  # SIGTERM: the records are complete once this returns
    records = replicas.records(kind=None)
    for rs in records:
        for record in rs:
            record["epoch"] = epoch(record)
    counts = record_counts(records)
    verdicts = []
    steady_ops = len(ledger.in_window(0, windows[0].start))
    print(f"steady state: p99 {steady_p99 * 1000:.0f} ms ({steady_ops} ops before the first fault)")
    for window in windows:
        rollout = window.fault.name == "rolling restart"
        verdict = judge(window, ledger, counts, steady_p99 if rollout else None)
        verdicts.append(verdict)
        print(verdict.line(), flush=True)
        if verdict.records[0] < verdict.records[1]:
            print("answered without exactly one record (as the client saw it; its records):")
            print("\n".join(orphans(window, ledger, records, wall)))
        if rollout:
            print("rolling restart per client (as the client saw it; as the records say):")
            print("\n".join(per_client(ledger, window, records, wall)))
            print("\n".join(timeline(window, ledger)))
    held = sum(v.held for v in verdicts)
    took = time.monotonic() - started
    print(f"total: {len(ledger.ops)} ops, {len(ledger.answered)} answered requests, {took:.0f} s")
    print(f"{held}/{len(verdicts)} promises held")
    if args.keep:
        keep(ledger, replicas.workdir)
        print(f"records, logs, the clients' ledger.jsonl and answered.jsonl: {replicas.workdir}")
    else:
        replicas.cleanup()
    return 0 if held == len(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
