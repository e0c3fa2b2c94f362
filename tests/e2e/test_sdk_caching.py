"""The official SDK client's cache against our caching hints: a write is seen on the next read.

The SDK client (``mcp``, default ``auto`` mode, so 2026-07-28) keeps results for their
``ttlMs``. A resource a tool writes must not come back stale from that cache, and under
authentication nothing may be declared shareable across callers by default
(docs/decisions.md#resource-cache-hints).
"""

from __future__ import annotations

import hashlib

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.e2e.test_sdk_clients import serving
from tests.support.mcp_client import modern, modern_headers

TOKEN = "caching-test-token-0123456789abcdef"


def counter_catalog() -> Catalog:
    catalog = Catalog("counter", "1.0.0")
    count = [3]

    @catalog.resource("counter://value", mime_type="text/plain")
    def value() -> str:
        return str(count[0])

    @catalog.resource("counter://cached", ttl_ms=60_000)
    def cached() -> str:
        return str(count[0])

    @catalog.tool
    def bump() -> int:
        """Adds one to the counter."""
        count[0] += 1
        return count[0]

    return catalog


async def read_bump_read(url: str, uri: str, token: str = "") -> tuple[str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(timeout=10, headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        first = (await client.read_resource(uri)).contents[0]
        await client.call_tool("bump", {})
        second = (await client.read_resource(uri)).contents[0]
    assert hasattr(first, "text")
    assert hasattr(second, "text")
    return first.text, second.text


@pytest.mark.anyio
async def test_the_sdk_client_sees_a_write_on_the_next_read() -> None:
    settings = Settings(_env_file=None)
    with serving(create_app(settings, counter_catalog())) as live:
        assert await read_bump_read(live.url, "counter://value") == ("3", "4")
        # The author's explicit TTL still holds: that read is served from the client's cache.
        assert await read_bump_read(live.url, "counter://cached") == ("4", "4")


@pytest.mark.anyio
async def test_under_authentication_results_are_private_by_default() -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    settings = Settings(_env_file=None, auth="tokens", auth_tokens=[f"sha256:{digest}"])
    with serving(create_app(settings, counter_catalog())) as live:
        async with httpx2.AsyncClient(timeout=10) as http:
            message = modern("server/discover")
            headers = {**modern_headers(message), "Authorization": f"Bearer {TOKEN}"}
            answer = await http.post(live.url, headers=headers, json=message)
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["cacheScope"] == "private"
        assert await read_bump_read(live.url, "counter://value", TOKEN) == ("3", "4")
