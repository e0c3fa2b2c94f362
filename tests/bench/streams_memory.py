"""Where an idle listen stream's memory goes: tracemalloc over N streams, by allocation site.

    python tests/bench/streams_memory.py [--streams 2000] [--top 45] [--tracebacks 0]
                                         [--server-root DIR]

Runs the server in this process (``server_for``, the same uvicorn protocol and app as
``python -m server``; probe catalog, records off, uvloop) so that tracemalloc sees it, and
streams_bench.py's lean client in a subprocess (its allocations are not counted). After the
client's warm-up (a few streams opened, notified and closed), tracing starts; then
``--streams`` listen streams are opened and acknowledged, and the snapshot difference is
printed per allocation site (the innermost Python line: memory that C code allocates for a
line, uvloop's transports, shows as the loop's ``run_until_complete``), in bytes and blocks per
stream. The total is about 4% below what streams_bench.py reads from the RSS (the allocator's
own overhead). ``--tracebacks N`` adds the N largest sites with their callers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import linecache
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import streams_bench  # noqa: E402 (next to this script)

CLIENT = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import streams_bench

async def main(port: int, count: int) -> None:
    client = streams_bench.Client(port)
    await client.open_streams(50, 30)
    await client.trigger(client.streams, 10)
    for stream in client.streams:
        stream.close()
    client.streams.clear()
    print("warm", flush=True)
    sys.stdin.readline()
    await client.open_streams(count, 60)
    print("open", flush=True)
    sys.stdin.readline()
    for stream in client.streams:
        stream.close()

asyncio.run(main(int(sys.argv[2]), int(sys.argv[3])))
"""


def where(frame: tracemalloc.Frame, root: Path) -> str:
    name = frame.filename.replace(str(root), ".").split("site-packages/")[-1]
    line = linecache.getline(frame.filename, frame.lineno).strip()[:90]
    return f"{name}:{frame.lineno}  {line}"


async def measure(args: argparse.Namespace, root: Path) -> None:
    from server.app import create_app
    from server.serving import server_for
    from server.settings import load_settings

    port = streams_bench.free_port()
    server = server_for(create_app(load_settings(port=port)), port=port)
    serving = asyncio.ensure_future(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn's flag, no event to await)
        await asyncio.sleep(0.05)
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        str(BENCH),
        str(port),
        str(args.streams),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert client.stdin is not None
    assert client.stdout is not None
    said = client.stdout

    async def client_says(word: bytes) -> None:
        while (line := await said.readline()) and line.strip() != word:
            pass

    await client_says(b"warm")
    await asyncio.sleep(1)
    gc.collect()
    tracemalloc.start(30)
    before = tracemalloc.take_snapshot()
    client.stdin.write(b"go\n")
    await client_says(b"open")
    await asyncio.sleep(2)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    count = args.streams
    sites = after.compare_to(before, "lineno")
    total = sum(site.size_diff for site in sites)
    print(f"{total / count:.0f} bytes traced per idle listen stream ({count} streams)")
    for site in sites[: args.top]:
        print(
            f"{site.size_diff / count:8.0f} B {site.count_diff / count:6.2f} blocks  "
            f"{where(site.traceback[0], root)}"
        )
    for site in after.compare_to(before, "traceback")[: args.tracebacks]:
        print(f"---- {site.size_diff / count:.0f} B, {site.count_diff / count:.2f} blocks")
        for frame in list(site.traceback)[-12:]:
            print(f"     {where(frame, root)}")
    client.stdin.write(b"go\n")
    await client.wait()
    server.should_exit = True
    await serving


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000, help="idle streams to open")
    parser.add_argument("--top", type=int, default=45, help="allocation sites to print")
    parser.add_argument("--tracebacks", type=int, default=0, help="sites to print with callers")
    parser.add_argument(
        "--server-root", default=str(BENCH.parents[1]), help="the checkout whose server/ to trace"
    )
    args = parser.parse_args()
    root = Path(args.server_root).resolve()
    sys.path.insert(0, str(root))
    for name in [key for key in os.environ if key.startswith("MCP_")]:
        del os.environ[name]
    os.environ.update(
        {
            "MCP_HOST": "127.0.0.1",
            "MCP_CATALOG": "probe",
            "MCP_LOG_LEVEL": "error",
            "MCP_RECORDS": "none",
            "MCP_MAX_STREAMS_PER_CLIENT": "1000000",
            "MCP_RATE_LIMIT_RPS": "1000000000",
            "MCP_RATE_LIMIT_BURST": "1000000000",
        }
    )
    # the server's and the client's connections, the client inheriting the limit
    streams_bench.raise_fd_limit(2 * args.streams + 1024)
    try:
        import uvloop
    except ImportError:
        asyncio.run(measure(args, root))
    else:
        uvloop.run(measure(args, root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
