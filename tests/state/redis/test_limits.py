"""server.state.redis.limits: the rate, quota keys and slot leases in one script, and, over three
``python -m server`` replicas sharing Redis, a client's stream cap held in total, a stream's
slot given back when it closes, and a killed replica's slots freed within the lease."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from server.security.shared_limits import RateAsk, SlotAsk
from server.state.redis.limits import RedisLimits
from server.state.redis.link import RedisLink
from tests.support.deploy_helpers import ServerProcess, listen, modern_headers
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@contextlib.asynccontextmanager
async def store(redis_server: RedisServer) -> AsyncIterator[RedisLimits]:
    link = RedisLink(redis_server.url, prefix=fresh_prefix(), timeout_s=1.0)
    try:
        yield RedisLimits(link)
    finally:
        await link.close()


async def test_the_rate_allows_its_burst_then_says_how_long_to_wait(
    redis_server: RedisServer,
) -> None:
    async with store(redis_server) as limits:
        ask = RateAsk("sub:a", interval_us=10_000_000, tolerance_us=30_000_000, cost=1)
        allowed = [(await limits.settle(ask, (), ())).rate_wait_s for _ in range(3)]
        assert allowed == [None, None, None]
        refused = await limits.settle(ask, [("q", 60)], ())
        assert refused.rate_wait_s is not None
        assert 9 < refused.rate_wait_s <= 10
        assert refused.counts == []  # a refused request counts nothing else
        other = RateAsk("sub:b", 10_000_000, 30_000_000, 1)
        assert (await limits.settle(other, [("q", 60)], ())).counts == [1]


async def test_slots_are_capped_undone_together_and_run_out_unless_renewed(
    redis_server: RedisServer,
) -> None:
    async with store(redis_server) as limits:
        lease = 1_000_000

        def slot(member: str, key: str = "streams:a") -> SlotAsk:
            return SlotAsk(key, member, 2, lease)

        assert (await limits.settle(None, (), [slot("1")])).refused_slot is None
        # The second slot of this call is over its cap: the first is given back too.
        both = await limits.settle(None, (), [slot("2", "sessions:a"), slot("3")])
        assert both.refused_slot is None
        third = await limits.settle(None, (), [slot("4", "sessions:a"), slot("5")])
        assert third.refused_slot == 1
        assert await limits.link.client.zcard(limits.link.key("limit", "sessions:a")) == 1
        # Renewed, "1" outlives its lease; "3" is not, and runs out.
        await asyncio.sleep(0.6)
        await limits.renew([("streams:a", "1")], lease)
        await asyncio.sleep(0.6)
        assert (await limits.settle(None, (), [slot("6")])).refused_slot is None
        assert (await limits.settle(None, (), [slot("7")])).refused_slot == 0
        await limits.release("streams:a", "1")
        assert (await limits.settle(None, (), [slot("8")])).refused_slot is None


async def open_listen(url: str, client: httpx.AsyncClient, stack: contextlib.AsyncExitStack) -> int:
    """A listen stream on ``url``, held open by ``stack``: its status (200 once its ack came)."""
    message = listen(1)
    response = await stack.enter_async_context(
        client.stream("POST", f"{url}/mcp", json=message, headers=modern_headers(message))
    )
    if response.status_code == 200:
        chunks = response.aiter_bytes()
        stack.push_async_callback(chunks.aclose)  # type: ignore[attr-defined]
        await anext(chunks)  # the ack: the stream is open and its slot held
    return response.status_code


async def opens_within(
    url: str, client: httpx.AsyncClient, stack: contextlib.AsyncExitStack, limit: float
) -> float:
    """Seconds until a stream opens on ``url`` (then held open by ``stack``)."""
    started = time.monotonic()
    while True:
        async with contextlib.AsyncExitStack() as attempt:
            if await open_listen(url, client, attempt) == 200:
                stack.push_async_exit(attempt.pop_all())
                return time.monotonic() - started
        assert time.monotonic() - started < limit, f"no stream opened within {limit} s"
        await asyncio.sleep(0.1)


@pytest.mark.timeout(90)
async def test_a_clients_stream_cap_holds_across_three_replicas_and_a_dead_ones_run_out(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = {
        "MCP_REDIS_URL": redis_server.url,
        "MCP_REDIS_PREFIX": fresh_prefix(),
        "MCP_STATE_SECRET": "s" * 32,
        "MCP_MAX_STREAMS_PER_CLIENT": "2",
        "MCP_LIMITS_LEASE_S": "2",
        "MCP_RECORDS": "",
    }
    servers = []
    for n in range(3):
        workdir = tmp_path / str(n)
        workdir.mkdir()
        servers.append(ServerProcess(workdir, **settings))
    try:
        for server in servers:
            server.start()
        a, b, c = (server.url for server in servers)
        async with (
            httpx.AsyncClient(timeout=10) as client,
            contextlib.AsyncExitStack() as first,
            contextlib.AsyncExitStack() as second,
        ):
            assert await open_listen(a, client, first) == 200
            assert await open_listen(b, client, second) == 200
            async with contextlib.AsyncExitStack() as third:
                # Two open (one on each of two replicas): the third replica refuses a third.
                assert await open_listen(c, client, third) == 429
            # Held past two leases: renewed while open.
            await asyncio.sleep(4.5)
            async with contextlib.AsyncExitStack() as third:
                assert await open_listen(c, client, third) == 429
            await first.aclose()  # a stream that ends gives its slot back
            async with contextlib.AsyncExitStack() as held:
                await opens_within(c, client, held, limit=5)
                async with contextlib.AsyncExitStack() as third:
                    assert await open_listen(a, client, third) == 429  # b's still held
                # b dies holding its stream: its slot runs out within the lease, not never.
                servers[1].process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
                servers[1].process.wait(5)  # type: ignore[union-attr]
                # The lease (2 s), the last renewal's head start, and a margin.
                assert await opens_within(a, client, held, limit=2 + 3) >= 0.5
    finally:
        for server in servers:
            server.stop()
