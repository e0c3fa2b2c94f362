"""Benchmark: the server's CPU time per notification delivered on a listen stream.

    python tests/bench/fanout_cpu.py [--streams 1000] [--triggers 40] [--server-root DIR ...]

With streams_bench.py's server and client (the server pinned to one CPU, this client to the
other), opens ``--streams`` listen streams, then makes ``--triggers`` list changes one at a time;
for each, the server's CPU time (user + system, from /proc) from just before the change until
every stream has it and 0.2 s more. Prints that total divided by the notifications delivered
(streams x changes), and the arrival latencies. CPU time is steadier than the latencies on a
shared machine (a fan-out's p99 there moves by 3x between runs of the same code), so it is the
figure to compare two versions of ``server/`` by: give several ``--server-root`` checkouts and
they are measured in turn, ``--rounds`` times over.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams_bench as bench


async def measure(server: bench.Server, streams: int, triggers: int) -> str:
    client = bench.Client(server.port)
    await client.open_streams(50, 30)  # warm-up, as streams_bench does
    await client.trigger(client.streams, 10)
    for stream in client.streams:
        stream.close()
    client.streams.clear()
    await server.quiet()
    await client.open_streams(streams, 60)
    await server.quiet()
    cpu = 0.0
    latencies: list[float] = []
    for _ in range(triggers):
        before = server.cpu_seconds()
        latencies.extend(await client.trigger(client.streams, 30))
        await asyncio.sleep(0.2)
        cpu += server.cpu_seconds() - before
        await server.quiet()
    for stream in client.streams:
        stream.close()
    await asyncio.sleep(0.5)
    p50, p99 = bench.percentile(latencies, 0.5), bench.percentile(latencies, 0.99)
    return (
        f"server CPU {cpu:.2f} s over {triggers} changes to {streams} streams: "
        f"{cpu / (streams * triggers) * 1e6:.1f} us per delivered notification; "
        f"latency p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000, help="listen streams")
    parser.add_argument("--triggers", type=int, default=40, help="list changes")
    parser.add_argument("--rounds", type=int, default=1, help="times to measure each root")
    parser.add_argument(
        "--server-root",
        action="append",
        help="a checkout whose server/ to measure (repeatable; default: this one)",
    )
    args = parser.parse_args()
    roots = [Path(root).resolve() for root in args.server_root or [str(bench.ROOT)]]
    bench.raise_fd_limit(args.streams + 1024)
    cpus = sorted(os.sched_getaffinity(0))
    pin: list[str] = []
    if shutil.which("taskset") and len(cpus) >= 2:
        pin = ["taskset", "-c", str(cpus[1])]
        os.sched_setaffinity(0, {cpus[0]})
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    for _ in range(args.rounds):
        for root in roots:
            with tempfile.TemporaryDirectory(prefix="fanout-cpu-") as temp:
                server = bench.Server(bench.free_port(), Path(temp), "none", pin, root)
                try:
                    server.wait_ready()
                    line = runner(measure(server, args.streams, args.triggers))
                finally:
                    server.stop()
            print(f"{bench.describe_checkout(root)}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
