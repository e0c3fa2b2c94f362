"""What resource subscriptions cost Redis: bytes in and out per ``resources/subscribe``.

Run from the repository root (not collected by pytest: ``addopts`` ignores ``tests/bench``)::

    python tests/bench/subscriptions_redis.py                     # 250, 500, 1,000 subscribes
    python tests/bench/subscriptions_redis.py --counts 1000 --uri-bytes 100

It starts its own ``redis-server`` (tests/redis_server.py: a free loopback port, no
persistence, stopped by its PID on exit) and one replica of the app under uvicorn in a thread
of this process (tests/live_server.py; the probe catalog, whose resources can be subscribed to;
request records off), then for each count
N opens a fresh legacy session and sends N ``resources/subscribe`` of distinct URIs of about
``--uri-bytes`` bytes, one after another, then one ``ping`` and a GET stream opening (which
reads the session's subscriptions once). Around each phase it reads Redis's ``INFO stats``
(``total_net_input_bytes``, ``total_net_output_bytes``): everything Redis took in and sent out
for that phase, the replica's bus listener included (it receives what the replica publishes).

It prints, per N, the bytes in and out for the N subscribes and per subscribe, and for the
ping and the GET afterwards. Linear cost shows as a constant per-subscribe figure across N
(about a few times the URI size); a session rewritten and re-read whole on every request shows
as a per-subscribe figure growing with N (the total growing with N squared).

Bounded: counts up to 1,000 (the per-session cap) and URIs up to 2,000 bytes (the server
accepts 2,048 characters); 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio

# Appended, not prepended: with PYTHONPATH naming another checkout, its ``server`` is measured
# (how the old figures are taken), and ``tests`` still comes from here.
sys.path.append(str(Path(__file__).resolve().parents[2]))

from server.app import Application, load_catalog
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.redis_server import RedisServer

LEGACY = "2025-11-25"
MAX_COUNT = 1000
MAX_URI_BYTES = 2000
BOTH = "application/json, text/event-stream"


def headers(session_id: str | None = None, accept: str = BOTH) -> dict[str, str]:
    found = {"Content-Type": "application/json", "Accept": accept}
    if session_id is not None:
        found["Mcp-Session-Id"] = session_id
        found["MCP-Protocol-Version"] = LEGACY
    return found


async def net_bytes(client: redis.asyncio.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = await client.info("stats")
    return int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


async def open_session(http: httpx.AsyncClient) -> str:
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "subscriptions-bench", "version": "1"},
        },
    }
    answer = await http.post("/mcp", json=initialize, headers=headers())
    answer.raise_for_status()
    session_id: str = answer.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=done, headers=headers(session_id))).status_code == 202
    return session_id


def uri(number: int, size: int) -> str:
    head = f"probe://bench/{number}/"
    return head + "x" * max(0, size - len(head))


async def measure(
    http: httpx.AsyncClient, client: redis.asyncio.Redis, count: int, uri_bytes: int
) -> dict[str, Any]:
    session_id = await open_session(http)
    await asyncio.sleep(0.2)  # the bus publisher and listener settle
    before = await net_bytes(client)
    started = time.monotonic()
    for number in range(count):
        message = {
            "jsonrpc": "2.0",
            "id": number + 1,
            "method": "resources/subscribe",
            "params": {"uri": uri(number, uri_bytes)},
        }
        answer = await http.post("/mcp", json=message, headers=headers(session_id))
        assert answer.status_code == 200, answer.text
        assert "error" not in answer.json(), answer.text
    elapsed = time.monotonic() - started
    await asyncio.sleep(0.3)  # the last announcements reach the listener
    after = await net_bytes(client)
    ping = {"jsonrpc": "2.0", "id": "p", "method": "ping"}
    assert (await http.post("/mcp", json=ping, headers=headers(session_id))).status_code == 200
    after_ping = await net_bytes(client)
    get_headers = headers(session_id, accept="text/event-stream")
    async with http.stream("GET", "/mcp", headers=get_headers) as stream:
        assert stream.status_code == 200
        after_get = await net_bytes(client)
    return {
        "count": count,
        "in": after[0] - before[0],
        "out": after[1] - before[1],
        "ping": (after_ping[0] - after[0], after_ping[1] - after[1]),
        "get": (after_get[0] - after_ping[0], after_get[1] - after_ping[1]),
        "seconds": elapsed,
    }


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="250,500,1000", help="subscribes per session")
    parser.add_argument("--uri-bytes", type=int, default=2000, help="the size of each URI")
    options = parser.parse_args()
    counts = [int(count) for count in options.counts.split(",")]
    if not all(0 < count <= MAX_COUNT for count in counts):
        parser.error(f"counts must be within 1..{MAX_COUNT}")
    if not 20 <= options.uri_bytes <= MAX_URI_BYTES:
        parser.error(f"--uri-bytes must be within 20..{MAX_URI_BYTES}")

    redis_server = RedisServer().start()
    client = redis.asyncio.Redis.from_url(redis_server.url)
    try:
        settings = Settings(
            _env_file=None,
            redis_url=redis_server.url,
            redis_prefix="bench",
            state_secret="a shared secret for the benchmark",
            records=["none"],
        )
        replica = ServerThread(Application(settings, load_catalog("probe"))).start()
        try:
            async with httpx.AsyncClient(base_url=replica.url, timeout=60) as http:
                print(f"server code: {Path(sys.modules['server'].__file__ or '').parent}")
                print(f"URIs of {options.uri_bytes} bytes; Redis bytes in / out:")
                for count in counts:
                    found = await measure(http, client, count, options.uri_bytes)
                    print(
                        f"  {count:>5} subscribes: in {human(found['in']):>10}"
                        f" ({found['in'] / count:>9,.0f} B each),"
                        f" out {human(found['out']):>10} ({found['out'] / count:>9,.0f} B each),"
                        f" {found['seconds']:.1f} s;"
                        f" then a ping: in {found['ping'][0]:,} B, out {found['ping'][1]:,} B;"
                        f" a GET stream: in {found['get'][0]:,} B, out {found['get'][1]:,} B"
                    )
        finally:
            replica.stop()
    finally:
        await client.aclose()
        redis_server.close()


if __name__ == "__main__":
    asyncio.run(main())
