"""Quotas per tenant and tool: counted before the call, refused with 429 and Retry-After past
the limit, the same whichever replica serves (Redis), open or closed when Redis cannot count."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import httpx
import pytest

from server import Catalog, create_app
from server.errors import ConfigurationError, ServiceUnavailable, retry_after_header
from server.records.draft import Draft
from server.security.quotas import Quota, QuotaExceeded, Quotas
from server.security.shared_limits import RateAsk, Settled, SharedLimits, SlotAsk
from server.settings import Settings, load_settings
from tests.support.mcp_client import (
    LegacySession,
    initialize,
    legacy,
    legacy_headers,
    modern,
    modern_headers,
)
from tests.support.redis_server import fresh_prefix

pytestmark = pytest.mark.anyio


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


A, B = "tenant-a-token-0123456789", "tenant-b-token-0123456789"
TOKENS = [f"{digest(A)};name=a;tenant=acme", f"{digest(B)};name=b;tenant=globex"]
QUOTA = json.dumps([{"tenant": "acme", "tool": "search", "limit": 5, "per": "1m"}])


def catalog() -> Catalog:
    made = Catalog("quotas", "1.0.0")

    @made.tool()
    async def search(q: str = "") -> str:
        return f"found {q}"

    @made.tool()
    async def other() -> str:
        return "ok"

    return made


def draft() -> Draft:
    return Draft("POST", "/mcp", None, "192.0.2.1", None)


async def test_only_the_matching_quota_counts_and_the_sixth_call_is_refused() -> None:
    quotas = Quotas([Quota("acme", "search", 5, 60), Quota("*", "*", 100, 60)])
    for _ in range(5):
        await quotas.charge("acme", "search", draft())
    with pytest.raises(QuotaExceeded) as refused:
        await quotas.charge("acme", "search", draft())
    assert refused.value.data["tenant"] == "acme"
    assert refused.value.retry_after is not None
    assert 0 < refused.value.retry_after <= 60
    await quotas.charge("globex", "search", draft())  # another tenant
    await quotas.charge("acme", "other", draft())  # another tool


class Down:
    """A shared store (Redis) that does not answer."""

    available = True

    async def settle(
        self, rate: RateAsk | None, quotas: Sequence[tuple[str, int]], slots: Sequence[SlotAsk]
    ) -> Settled:
        raise ServiceUnavailable("Redis does not answer")

    async def renew(self, held: Sequence[tuple[str, str]], lease_us: int) -> None:
        raise AssertionError("nothing is held")

    async def release(self, key: str, member: str) -> None:
        raise AssertionError("nothing is held")


async def test_a_counter_that_fails_lets_calls_through_or_refuses_them_as_configured() -> None:
    def shared(fail_open: bool) -> SharedLimits:
        return SharedLimits(Down(), rate=0, burst=1, lease_s=30, fail_open=fail_open)

    await Quotas([Quota("*", "*", 1, 60)], shared(True)).charge("acme", "search", draft())
    with pytest.raises(ServiceUnavailable):
        await Quotas([Quota("*", "*", 1, 60)], shared(False)).charge("acme", "x", draft())


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[{"tenant": "acme", "tool": "search", "limit": 0}]', "limit must be a whole number"),
        ('[{"tenant": "acme", "limit": 5, "per": "a minute"}]', "per must be like 30s"),
        ('[{"tenant": "acme", "limit": 5, "every": "1m"}]', "is not"),
        ("[{", "MCP_QUOTAS is not JSON"),
    ],
)
def test_a_quota_that_cannot_parse_stops_the_start_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(quotas=text)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


async def call(client: httpx.AsyncClient, token: str, tool: str) -> httpx.Response:
    message = modern("tools/call", {"name": tool, "arguments": {}})
    headers = {**modern_headers(message), "Authorization": f"Bearer {token}"}
    return await client.post("/mcp", json=message, headers=headers)


async def test_a_tenants_quota_holds_across_replicas_sharing_redis(redis_server) -> None:
    prefix = fresh_prefix()
    settings = Settings(
        auth="tokens",
        auth_tokens=TOKENS,
        quotas=QUOTA,
        redis_url=redis_server.url,
        redis_prefix=prefix,
        records=[],
        state_secret="x" * 32,
    )
    replicas = [create_app(settings, catalog=catalog()) for _ in range(3)]
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
        for app in replicas
    ]
    try:
        async with (
            replicas[0].lifespan(replicas[0]),
            replicas[1].lifespan(replicas[1]),
            replicas[2].lifespan(replicas[2]),
        ):
            answers = [await call(clients[n % 3], A, "search") for n in range(5)]
            assert [a.status_code for a in answers] == [200] * 5
            sixth = await call(clients[2], A, "search")  # a replica that served one of them
            assert sixth.status_code == 429
            assert int(sixth.headers["retry-after"]) >= 1
            assert sixth.json()["error"]["data"]["limit"] == "quota"
            assert (await call(clients[1], B, "search")).status_code == 200  # B unaffected
            assert (await call(clients[0], A, "other")).status_code == 200  # another tool
            # The legacy era counts into the same quota.
            headers = {
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {A}",
            }
            opened = await clients[1].post("/mcp", json=initialize(), headers=headers)
            session = legacy_headers(opened.headers["mcp-session-id"], version=None)
            session["Authorization"] = f"Bearer {A}"
            refused = await clients[1].post(
                "/mcp",
                json=legacy("tools/call", {"name": "search", "arguments": {}}),
                headers=session,
            )
            assert refused.status_code == 429
    finally:
        for client in clients:
            await client.aclose()


async def test_a_wildcard_quota_counts_every_tenant_and_tool_apart() -> None:
    quotas = Quotas([Quota("*", "*", 1, 60)])
    await quotas.charge("acme", "search", draft())
    await quotas.charge("globex", "search", draft())  # another tenant: its own count
    await quotas.charge("acme", "other", draft())  # another tool: its own count
    await quotas.charge(None, "search", draft())  # no tenant: "(none)"
    with pytest.raises(QuotaExceeded):
        await quotas.charge("acme", "search", draft())


@pytest.mark.parametrize("seconds", [0.0004, 2.0001, 2.5, 3.0])
def test_the_message_and_data_name_the_retry_after_header_s_seconds(seconds: float) -> None:
    refused = QuotaExceeded(Quota("acme", "search", 5, 60), "acme", "search", seconds)
    header = int(retry_after_header(seconds))
    assert refused.message.endswith(f"retry after {header} s")
    assert refused.data["retryAfter"] == header


async def test_a_refused_calls_record_names_the_tool_it_refused(tmp_path) -> None:
    """A call refused before it runs (the quota's 429, a scope's 403) is still a call of its
    tool in the records, so ``report --by-tenant`` counts it under that tool."""
    records = tmp_path / "records.jsonl"
    quota = json.dumps([{"tenant": "acme", "tool": "search", "limit": 1, "per": "1m"}])
    settings = Settings(
        auth="tokens", auth_tokens=TOKENS, quotas=quota, records=["file"], records_file=str(records)
    )
    app = create_app(settings, catalog=catalog())
    async with (
        app.lifespan(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        assert (await call(client, A, "search")).status_code == 200
        assert (await call(client, A, "search")).status_code == 429
        session = await LegacySession(client, headers={"Authorization": f"Bearer {A}"}).initialize()
        refused = await session.post(legacy("tools/call", {"name": "search", "arguments": {}}, 9))
        assert refused.status_code == 429
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    refusals = [(r["era"], r.get("target")) for r in lines if r.get("status") == 429]
    assert refusals == [("modern", "search"), ("legacy", "search")]
