"""The per-client limits counted across replicas: with Redis, a client's rate holds in total
over three replicas (each counted it alone before), in one store call per request, also with a
quota charge; where Redis cannot count, open (per process) or closed (503), logged once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from server import Catalog, create_app
from server.app import Application
from server.records.draft import Draft
from server.security.limits import StreamCounter, TooManyStreams
from server.security.shared_limits import RateAsk, Settled, SharedLimits, SlotAsk
from server.settings import Settings
from tests.support.deploy_helpers import free_port
from tests.support.mcp_client import initialize, legacy_headers, modern, modern_headers
from tests.support.redis_server import fresh_prefix

pytestmark = pytest.mark.anyio

TOKEN = "shared-limits-token-0123456789"
DIGEST = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()


def catalog() -> Catalog:
    made = Catalog("limits", "1.0.0")

    @made.tool()
    async def search(q: str = "") -> str:
        return f"found {q}"

    return made


def settings(redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "auth": "tokens",
        "auth_tokens": [f"{DIGEST};name=bot;tenant=acme"],
        "rate_limit_rps": 0.01,  # nothing refills during the test
        "rate_limit_burst": 4,
        "redis_url": redis_url,
        "redis_prefix": fresh_prefix(),
        "records": [],
        "state_secret": "x" * 32,
        **overrides,
    }
    return Settings(**values)


@asynccontextmanager
async def replicas(config: Settings, count: int = 3) -> AsyncIterator[list[httpx.AsyncClient]]:
    apps = [create_app(config, catalog=catalog()) for _ in range(count)]
    async with AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.lifespan(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
            )
            stack.push_async_callback(client.aclose)
            clients.append(client)
        yield clients


async def call(client: httpx.AsyncClient, n: int = 1) -> httpx.Response:
    message = modern("tools/call", {"name": "search", "arguments": {}}, id=n)
    headers = {**modern_headers(message), "Authorization": f"Bearer {TOKEN}"}
    return await client.post("/mcp", json=message, headers=headers)


async def test_a_clients_rate_holds_in_total_across_three_replicas(redis_server) -> None:
    async with replicas(settings(redis_server.url)) as clients:
        answers = [await call(clients[n % 3], n) for n in range(12)]
        # The legacy era's requests count into the same rate: initialize takes its session
        # slot and its rate in one call, and is refused too.
        headers = {**legacy_headers(), "Authorization": f"Bearer {TOKEN}"}
        opened = await clients[1].post("/mcp", json=initialize(), headers=headers)
        assert opened.status_code == 429
        assert opened.json()["error"]["data"]["limit"] == "rate"
    statuses = [answer.status_code for answer in answers]
    # A burst of 4 for the client, whichever replica serves: not 4 per replica (12).
    assert statuses == [200] * 4 + [429] * 8
    refused = answers[-1]
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["data"]["limit"] == "rate"


class Counting:
    """A store that counts its calls, around the real one."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls: list[tuple[RateAsk | None, int, int]] = []

    async def settle(
        self, rate: RateAsk | None, quotas: Sequence[tuple[str, int]], slots: Sequence[SlotAsk]
    ) -> Settled:
        self.calls.append((rate, len(quotas), len(slots)))
        settled: Settled = await self.store.settle(rate, quotas, slots)
        return settled

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def shared_of(client: httpx.AsyncClient) -> SharedLimits:
    app = client._transport.app  # type: ignore[attr-defined]
    assert isinstance(app, Application)
    limits = app.shared.limits
    assert limits is not None
    return limits


async def test_a_tool_call_with_a_quota_counts_rate_and_quota_in_one_store_call(
    redis_server,
) -> None:
    quota = json.dumps([{"tenant": "acme", "tool": "search", "limit": 2, "per": "1m"}])
    async with replicas(settings(redis_server.url, quotas=quota, rate_limit_burst=10)) as clients:
        counters = []
        for client in clients:
            limits = shared_of(client)
            limits.store = counting = Counting(limits.store)
            counters.append(counting)
        statuses = [(await call(clients[n % 3], n)).status_code for n in range(3)]
        assert statuses == [200, 200, 429]  # the quota, counted across replicas
        calls = [each for counter in counters for each in counter.calls]
        assert len(calls) == 3  # one store call per request
        assert all(rate is not None and quotas == 1 for rate, quotas, _ in calls)
        # A request with no quota (discover) settles its rate alone, once.
        discover = modern("server/discover")
        headers = {**modern_headers(discover), "Authorization": f"Bearer {TOKEN}"}
        assert (await clients[0].post("/mcp", json=discover, headers=headers)).status_code == 200
        assert len(counters[0].calls) == 2
        assert counters[0].calls[-1][1:] == (0, 0)


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_where_redis_cannot_count_limits_fail_as_configured_and_say_so_once(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    config = settings(unreachable, quota_on_redis_failure=mode, redis_timeout_s=0.5)
    caplog.set_level(logging.WARNING, logger="server.security.shared_limits")
    async with replicas(config, count=1) as (client,):
        answers = [await call(client, n) for n in range(6)]
        statuses = [answer.status_code for answer in answers]
        refused = answers[0]
        if mode == "open":
            # Counted in this process alone: its own burst of 4, then 429.
            assert statuses == [200] * 4 + [429] * 2
        else:
            # 503 while it owes Redis a count; past its burst here, 429 as before.
            assert statuses == [503] * 4 + [429] * 2
            assert int(refused.headers["retry-after"]) >= 1
    said = [r.getMessage() for r in caplog.records if r.name == "server.security.shared_limits"]
    assert len(said) == 1, said
    assert f"MCP_QUOTA_ON_REDIS_FAILURE={mode}" in said[0]


class Refusing:
    """A store that refuses the first slot it is asked for."""

    available = True

    async def settle(
        self, rate: RateAsk | None, quotas: Sequence[tuple[str, int]], slots: Sequence[SlotAsk]
    ) -> Settled:
        return Settled(None, [], 0 if slots else None)

    async def renew(self, held: Sequence[tuple[str, str]], lease_us: int) -> None:
        raise AssertionError("nothing is held")

    async def release(self, key: str, member: str) -> None:
        raise AssertionError("nothing is held")


async def test_a_slot_refused_across_replicas_is_the_counters_429() -> None:
    limits = SharedLimits(Refusing(), rate=1, burst=1, lease_s=30, fail_open=True)
    counter = StreamCounter(2)
    slot = counter.acquire("addr:192.0.2.1")
    with pytest.raises(TooManyStreams) as refused:
        await limits.settle(Draft("GET", "/mcp", None, "192.0.2.1", None), slots=[slot])
    assert refused.value.data == {"limit": "streams", "max": 2}
    assert not limits.held


async def test_a_clients_session_cap_holds_across_replicas_and_a_deleted_one_frees_its_slot(
    redis_server,
) -> None:
    config = settings(redis_server.url, rate_limit_burst=100, max_sessions_per_client=2)
    headers = {**legacy_headers(), "Authorization": f"Bearer {TOKEN}"}
    async with replicas(config) as clients:
        first = await clients[0].post("/mcp", json=initialize(), headers=headers)
        second = await clients[1].post("/mcp", json=initialize(), headers=headers)
        assert (first.status_code, second.status_code) == (200, 200)
        third = await clients[2].post("/mcp", json=initialize(), headers=headers)
        assert third.status_code == 429
        assert third.json()["error"]["data"] == {"limit": "sessions", "max": 2}
        session = legacy_headers(first.headers["mcp-session-id"])
        ended = await clients[0].delete("/mcp", headers={**session, **auth()})
        assert ended.status_code in (200, 204)
        for _ in range(50):  # its slot is given back in Redis just after the answer
            again = await clients[2].post("/mcp", json=initialize(), headers=headers)
            if again.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert again.status_code == 200


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}
