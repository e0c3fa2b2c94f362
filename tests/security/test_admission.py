"""Admission before authentication: header sizes (431), refusals charged to the address (IPv6
by its /64), and a proxy this server does not trust (no loopback exemption, one WARNING)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.security.limits import client_key
from server.settings import Settings
from tests.support.app import serving

pytestmark = pytest.mark.anyio

BASE_URL = "http://127.0.0.1:8000"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
LEGACY = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)


serve = serving(lambda: Catalog("admission"))


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    error: dict[str, Any] = body["error"]
    return error


# -- header sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"X-Big": "v" * (8 * 1024 + 1)}, "a header value is larger than 8192 bytes"),
        ({f"X-H{n}": "v" for n in range(100)}, "more than 100 headers"),
        ({f"X-H{n}": "v" * 8000 for n in range(9)}, "headers larger than 65536 bytes in all"),
    ],
)
async def test_headers_past_the_limits_are_431_and_recorded(
    tmp_path: Path, headers: dict[str, str], why: str
) -> None:
    path = tmp_path / "records.jsonl"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        ok = await client.post("/mcp", json=PING, headers=LEGACY | {"X-Fine": "v" * 8192})
        assert ok.status_code == 200, ok.text
        refused = await client.post("/mcp", json=PING, headers=LEGACY | headers)
        error = error_of(refused, 431)
        assert error["code"] == -32600
        assert why in error["message"]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    statuses = [record.get("status") for record in records if record["kind"] == "request"]
    assert statuses == [200, 431]


async def test_the_header_limits_are_settings() -> None:
    async with serve(max_header_value_bytes=32 * 1024) as (client, _):
        response = await client.post("/mcp", json=PING, headers=LEGACY | {"X-Big": "v" * 20000})
        assert response.status_code == 200, response.text


# -- refusals before authentication are rate limited -----------------------------------------


async def test_bad_host_refusals_are_charged_to_the_address() -> None:
    async with serve(address="203.0.113.9", rate_limit_rps=0.001, rate_limit_burst=3) as (
        client,
        _,
    ):
        statuses = [
            (await client.post("/mcp", json=PING, headers=LEGACY | {"Host": "evil.example"}))
            for _ in range(5)
        ]
        assert [response.status_code for response in statuses] == [403, 403, 403, 429, 429]
        assert error_of(statuses[-1], 429)["data"]["limit"] == "rate"
        assert int(statuses[-1].headers["retry-after"]) >= 1
        # The address spent its burst on refusals: a good request is limited too.
        good = await client.post("/mcp", json=PING, headers=LEGACY)
        assert good.status_code == 429


async def test_oversized_headers_and_bad_origins_are_charged_too() -> None:
    async with serve(address="203.0.113.9", rate_limit_rps=0.001, rate_limit_burst=2) as (
        client,
        _,
    ):
        big = await client.post("/mcp", json=PING, headers=LEGACY | {"X-Big": "v" * 9000})
        origin = await client.post("/mcp", json=PING, headers=LEGACY | {"Origin": "http://e.x"})
        third = await client.post("/mcp", json=PING, headers=LEGACY | {"Origin": "http://e.x"})
        assert [big.status_code, origin.status_code, third.status_code] == [431, 403, 429]


async def test_loopback_refusals_stay_exempt() -> None:
    async with serve(rate_limit_rps=0.001, rate_limit_burst=1) as (client, _):
        for _ in range(4):
            response = await client.post("/mcp", json=PING, headers=LEGACY | {"Host": "e.x"})
            assert response.status_code == 403


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("2001:db8:1:2:aaaa::1", "addr:2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "addr:2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", "addr:2001:db8:1:3::/64"),
        ("::ffff:198.51.100.7", "addr:198.51.100.7"),
        ("198.51.100.7", "addr:198.51.100.7"),
        ("not-an-address:" + "x" * 1000, "addr:not-an-address:" + "x" * 49),
    ],
)
def test_ipv6_clients_are_keyed_by_their_64(address: str, key: str) -> None:
    assert client_key(None, address) == key


async def test_one_ipv6_64_shares_one_rate() -> None:
    statuses = []
    app = create_app(
        Settings(_env_file=None, records=["none"], rate_limit_rps=0.001, rate_limit_burst=3),
        Catalog("admission"),
    )
    async with app.starlette.router.lifespan_context(app.starlette):
        for host in range(1, 6):
            transport = httpx.ASGITransport(app=app, client=(f"2001:db8:1:2::{host:x}", 1))
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                response = await client.post("/mcp", json=PING, headers=LEGACY)
                statuses.append(response.status_code)
        transport = httpx.ASGITransport(app=app, client=("2001:db8:9:9::1", 1))
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            other = await client.post("/mcp", json=PING, headers=LEGACY)
    assert statuses == [200, 200, 200, 429, 429]
    assert other.status_code == 200


# -- a proxy this server does not trust ----------------------------------------------------------


async def test_forwarded_requests_from_an_untrusted_loopback_proxy_are_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server.security.gate")
    proxied = LEGACY | {"X-Forwarded-For": "198.51.100.7"}
    async with serve(rate_limit_rps=0.001, rate_limit_burst=2) as (client, _):
        statuses = [(await client.post("/mcp", json=PING, headers=proxied)).status_code]
        statuses += [(await client.post("/mcp", json=PING, headers=proxied)).status_code]
        statuses += [(await client.post("/mcp", json=PING, headers=proxied)).status_code]
        # Without the header, loopback is exempt as before.
        direct = await client.post("/mcp", json=PING, headers=LEGACY)
    assert statuses == [200, 200, 429]
    assert direct.status_code == 200
    warnings = [r for r in caplog.records if "MCP_TRUSTED_PROXIES" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING


async def test_a_trusted_loopback_proxy_keeps_nothing_from_the_exemption_it_should_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server.security.gate")
    async with serve(rate_limit_rps=0.001, rate_limit_burst=1, trusted_proxies="127.0.0.1/32") as (
        client,
        _,
    ):
        # The forwarded client is limited by its own address; the proxy itself stays exempt.
        headers = LEGACY | {"X-Forwarded-For": "198.51.100.7"}
        first = await client.post("/mcp", json=PING, headers=headers)
        second = await client.post("/mcp", json=PING, headers=headers)
        local = [
            (await client.post("/mcp", json=PING, headers=LEGACY)).status_code for _ in range(3)
        ]
    assert [first.status_code, second.status_code] == [200, 429]
    assert local == [200, 200, 200]
    assert not [r for r in caplog.records if "MCP_TRUSTED_PROXIES" in r.getMessage()]
