"""``MCP_SCOPED_ITEMS=hidden`` over real uvicorn: three replicas sharing Redis behind
round-robin nginx, two named tokens with different scopes and tenants. Their ``tools/list``
differ in both eras and never hold a hidden tool, across pages (``MCP_PAGE_SIZE=2``), with the
cached pages warm on every replica, and after a list change; a hidden tool's call answers as a
tool never declared."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_nginx import NGINX
from tests.support.deploy_helpers import legacy_headers, modern, modern_headers
from tests.support.mcp_client import initialize, legacy, notification
from tests.support.redis_server import RedisServer
from tests.support.replicas import Replicas

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed"),
]

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"
ALICE_SEES = ["open_a", "write_a", "read_a", "write_b", "acme_only", "open_b", "grow"]
BOB_SEES = ["open_a", "read_a", "open_b", "grow"]


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    tokens = (
        f"{digest(ALICE)};name=alice;tenant=acme;scopes=mcp:read mcp:write,"
        f"{digest(BOB)};name=bob;tenant=globex;scopes=mcp:read"
    )
    with Replicas(
        3,
        catalog="tests.support.scoped_catalog:catalog",
        extra_env={
            "MCP_AUTH": "tokens",
            "MCP_AUTH_TOKENS": tokens,
            "MCP_SCOPED_ITEMS": "hidden",
            "MCP_PAGE_SIZE": "2",
        },
        redis=redis_server,
        workdir=tmp_path_factory.mktemp("scoped"),
    ) as running:
        yield running


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def modern_list(client: httpx.AsyncClient, url: str, token: str) -> list[str]:
    names, cursor = [], None
    while True:
        message = modern("tools/list", {"cursor": cursor} if cursor else {})
        answer = await client.post(
            url, json=message, headers={**modern_headers(message), **bearer(token)}
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert result["cacheScope"] == "private"
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            return names


async def legacy_list(client: httpx.AsyncClient, url: str, token: str) -> list[str]:
    opened = await client.post(
        url, json=initialize(), headers={**legacy_headers(), **bearer(token)}
    )
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    headers = {**legacy_headers(session), **bearer(token)}
    done = await client.post(url, json=notification("notifications/initialized"), headers=headers)
    assert done.status_code == 202, done.text
    names: list[str] = []
    cursor: Any = None
    while True:
        answer = await client.post(
            url, json=legacy("tools/list", {"cursor": cursor} if cursor else {}), headers=headers
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            return names


async def test_two_tokens_see_their_own_lists_through_nginx(replicas: Replicas) -> None:
    url = f"{replicas.url}/mcp"
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(3):  # round robin: every replica answers, its cached pages then warm
            assert await modern_list(client, url, ALICE) == ALICE_SEES
            assert await modern_list(client, url, BOB) == BOB_SEES
            assert await legacy_list(client, url, ALICE) == ALICE_SEES
            assert await legacy_list(client, url, BOB) == BOB_SEES

        # A hidden tool answers as a tool never declared (the name is the only difference).
        answers = []
        for name in ("write_a", "never_declared"):
            message = modern("tools/call", {"name": name, "arguments": {}})
            answer = await client.post(
                url, json=message, headers={**modern_headers(message), **bearer(BOB)}
            )
            answers.append((answer.status_code, answer.content.replace(name.encode(), b"NAME")))
        assert answers[0] == answers[1]
        assert b"Unknown tool: NAME" in answers[0][1]

        # A list change on every replica: each caller sees it as its view says.
        for base in replicas.replica_urls:
            message = modern("tools/call", {"name": "grow", "arguments": {}})
            grown = await client.post(
                f"{base}/mcp", json=message, headers={**modern_headers(message), **bearer(ALICE)}
            )
            assert grown.status_code == 200, grown.text
        for _ in range(3):
            assert await modern_list(client, url, ALICE) == [*ALICE_SEES, "write_c", "open_c"]
            assert await modern_list(client, url, BOB) == [*BOB_SEES, "open_c"]
            assert await legacy_list(client, url, BOB) == [*BOB_SEES, "open_c"]
