"""Fan-out across replicas: list changes made on one replica, delivered through Redis.

    python tests/bench/fanout_replicas.py [--streams 1000] [--changes 20] [--replicas 2]
                                          [--gap 0.25] [--records none|file]

Starts (with :class:`tests.support.replicas.Replicas`, no nginx) one redis-server and ``--replicas``
``python -m server`` processes (probe catalog, one ``MCP_STATE_SECRET``/``MCP_REDIS_URL``,
``MCP_MAX_STREAMS_PER_CLIENT=0``: one client opens every stream; rate limits do not apply,
loopback is exempt). The streams are opened **directly on the replicas, not through nginx**, so
each stream's replica is known: stream ``i`` goes to replica ``i % replicas`` (500 + 500 by
default), each a ``subscriptions/listen`` (``toolsListChanged``) on its own raw socket (the
lean client of ``streams_bench.py``), counted once acknowledged.

Then ``--changes`` list changes, one at a time and ``--gap`` seconds apart: a ``tools/call``
of ``toggle_extra_tool`` on replica A (the first), the clock started just before the request
is written; for each change, the time until ``notifications/tools/list_changed`` arrives on
every stream (waiting up to 5 s). Streams on A get it from A's own hub ("same replica"); the
others only through Redis ("other replica").

Prints, per change and over all of them: p50, p99 and max latency, split same-replica /
other-replica, and how many streams got each change. Times are taken in this client's event
loop as it reads each socket (so they include its own time to go through ready sockets); the
replicas, Redis and this client share the machine's CPUs. Asserts nothing about time; exits 1
if a stream missed a change (after 5 s) or got one twice. Bounded: the measurement gives up
after 100 s. Only what it started is stopped, by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests` (and `server`) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.streams_bench import (
    OPEN_CONCURRENCY,
    ROOT,
    ListenStream,
    describe_checkout,
    listen_request,
    percentile,
    raise_fd_limit,
    trigger_request,
)
from tests.support.replicas import Replicas

DELIVERY_WAIT_S = 5.0
OVERALL_LIMIT_S = 100.0


async def open_streams(ports: list[int], count: int) -> list[tuple[int, ListenStream]]:
    """``count`` acknowledged listen streams, stream ``i`` on replica ``i % len(ports)``."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    opened: list[tuple[int, ListenStream]] = []

    async def one(number: int) -> None:
        replica = number % len(ports)
        async with gate:
            acked: asyncio.Future[None] = loop.create_future()
            stream = ListenStream(listen_request(ports[replica], number), acked)
            await loop.create_connection(lambda: stream, "127.0.0.1", ports[replica])
            opened.append((replica, stream))
            await asyncio.wait_for(acked, 30)

    await asyncio.gather(*(one(number) for number in range(count)))
    return opened


async def trigger(port: int, number: int) -> tuple[float, float]:
    """One list change on the replica at ``port``: (clock at the write, seconds to answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = trigger_request(port, number)
    started = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    answer = await reader.readexactly(length)
    answered = time.perf_counter() - started
    writer.close()
    if not head.startswith(b"HTTP/1.1 200") or b'"isError":true' in answer:
        raise RuntimeError(f"trigger failed: {head!r} {answer!r}")
    return started, answered


def describe(values_ms: list[float]) -> str:
    if not values_ms:
        return "no deliveries"
    return (
        f"p50 {percentile(values_ms, 0.50):7.2f} ms, p99 {percentile(values_ms, 0.99):7.2f} ms, "
        f"max {max(values_ms):7.2f} ms, mean {statistics.fmean(values_ms):7.2f} ms "
        f"({len(values_ms)} deliveries)"
    )


async def bench(args: argparse.Namespace, ports: list[int]) -> int:
    started = time.perf_counter()
    streams = await open_streams(ports, args.streams)
    per_replica = [sum(1 for replica, _ in streams if replica == r) for r in range(len(ports))]
    print(
        f"opened {len(streams)} listen streams ({', '.join(map(str, per_replica))} per replica) "
        f"in {time.perf_counter() - started:.1f} s, all acknowledged",
        flush=True,
    )
    await asyncio.sleep(0.5)
    same_all: list[float] = []
    other_all: list[float] = []
    missing_total = doubled_total = 0
    got_counts: list[int] = []
    on_a = sum(1 for replica, _ in streams if replica == 0)
    on_others = len(streams) - on_a
    for change in range(args.changes):
        before = [len(stream.arrivals) for _, stream in streams]
        clock, answered = await trigger(ports[0], change)
        deadline = time.monotonic() + DELIVERY_WAIT_S
        while time.monotonic() < deadline:
            if all(len(s.arrivals) > n for (_, s), n in zip(streams, before, strict=True)):
                break
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.02)  # a duplicate would come right behind
        same: list[float] = []
        other: list[float] = []
        missing = doubled = 0
        for (replica, stream), n in zip(streams, before, strict=True):
            if len(stream.arrivals) <= n:
                missing += 1
                continue
            if len(stream.arrivals) > n + 1:
                doubled += 1
            (same if replica == 0 else other).append((stream.arrivals[n] - clock) * 1000)
        got = len(streams) - missing
        got_counts.append(got)
        missing_total += missing
        doubled_total += doubled
        same_all.extend(same)
        other_all.extend(other)
        print(
            f"change {change + 1:3d}: answered {answered * 1000:6.2f} ms; same replica "
            f"p50 {percentile(same, 0.5) if same else float('nan'):7.2f} / max "
            f"{max(same, default=float('nan')):7.2f} ms ({len(same)}/{on_a}); other replica "
            f"p50 {percentile(other, 0.5) if other else float('nan'):7.2f} / max "
            f"{max(other, default=float('nan')):7.2f} ms ({len(other)}/{on_others})"
            + (f"; {doubled} got it twice" if doubled else ""),
            flush=True,
        )
        await asyncio.sleep(args.gap)
    for _, stream in streams:
        stream.close()
    closed_early = sum(1 for _, stream in streams if stream.closed)
    print()
    print(f"{args.changes} list changes on replica A, {len(streams)} streams:")
    print(f"  same replica  (A, {on_a} streams):  {describe(same_all)}")
    print(f"  other replica ({on_others} streams):    {describe(other_all)}")
    print(f"  all:                          {describe(same_all + other_all)}")
    print(
        f"  streams that got each change: min {min(got_counts)}, max {max(got_counts)} of "
        f"{len(streams)}; missed deliveries {missing_total}, duplicated {doubled_total}"
        + (f"; {closed_early} streams were closed by the server" if closed_early else "")
    )
    await asyncio.sleep(0.2)
    return 1 if missing_total or doubled_total else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000, help="listen streams in all")
    parser.add_argument("--changes", type=int, default=20, help="list changes made on replica A")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--gap", type=float, default=0.25, help="pause between changes (s)")
    parser.add_argument("--records", choices=["none", "file"], default="none")
    args = parser.parse_args()
    if args.replicas < 2:
        parser.error("--replicas must be at least 2")
    began = time.monotonic()
    limits = raise_fd_limit(args.streams + 1024)  # the replicas inherit it
    if limits[0] < args.streams + 100:
        print(f"file-descriptor limit {limits[0]} is too low for {args.streams} streams")
        return 2
    print(f"measuring {describe_checkout(ROOT)}", flush=True)
    extra = {
        "MCP_MAX_STREAMS_PER_CLIENT": "0",
        "MCP_RECORDS": args.records,
    }
    with Replicas(args.replicas, "probe", extra, nginx=False) as replicas:
        assert replicas.redis is not None
        ports = [server.port for server in replicas.servers]
        print(
            f"{args.replicas} replicas on ports {', '.join(map(str, ports))} sharing "
            f"{replicas.redis.url}; streams opened directly on the replicas (no nginx); "
            f"records {args.records}; fd limit {limits[0]}",
            flush=True,
        )

        async def bounded() -> int:
            async with asyncio.timeout(OVERALL_LIMIT_S):
                return await bench(args, ports)

        try:
            code = asyncio.run(bounded())
        except TimeoutError:
            print(f"gave up after {OVERALL_LIMIT_S:.0f} s")
            code = 1
    print(f"elapsed: {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
