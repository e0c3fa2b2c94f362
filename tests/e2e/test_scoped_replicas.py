"""Issue 40's end-to-end: ``MCP_SCOPED_ITEMS=hidden`` over real uvicorn, three replicas sharing
Redis behind round-robin nginx, once with two named tokens and once with two JWT tenants (a
JWKS file, ``MCP_AUTH_TENANT_CLAIM``); tenant ``acme`` holds ``mcp:write``, ``globex`` not.

Their ``tools/list`` differ in both eras and never hold a hidden tool, across pages
(``MCP_PAGE_SIZE=2``), through nginx and on each replica twice (the second answer from its
cached pages), after tools are added and removed on every replica; a hidden tool's call (and one
failing its schema), prompt, completion and template read answer byte for byte as unknown ones;
a quota of 5 calls a minute of ``open_b`` for ``acme`` refuses the 6th with ``Retry-After`` on
every replica while ``globex`` calls on; then ``python -m server report --by-tenant`` over the
replicas' record files counts each tenant's requests and calls."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

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
A_SEES = ["open_a", "write_a", "read_a", "write_b", "acme_only", "open_b", "grow", "shrink"]
B_SEES = ["open_a", "read_a", "open_b", "grow", "shrink"]
QUOTAS = [{"tenant": "acme", "tool": "open_b", "limit": 5, "per": "1m"}]
ISSUER, AUDIENCE = "https://id.example.com", "https://mcp.example.com/mcp"


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Who:
    credential: str  # the bearer token: a static token or a signed JWT
    subject: str
    tenant: str


class Cluster:
    """The replicas, the two callers (``a`` in acme, ``b`` in globex), and every request sent
    to the MCP endpoint counted by tenant (what the report must find), and its tool calls by
    name."""

    def __init__(self, replicas: Replicas, a: Who, b: Who) -> None:
        self.replicas, self.a, self.b = replicas, a, b
        self.requests: Counter[str] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()

    async def post(
        self,
        client: httpx.AsyncClient,
        who: Who,
        message: dict[str, Any],
        *,
        session: str | None = None,
        base: str | None = None,
    ) -> httpx.Response:
        """POST one message (modern unless ``session`` is given, or it is an initialize)."""
        is_legacy = session is not None or message.get("method") == "initialize"
        headers = legacy_headers(session) if is_legacy else modern_headers(message)
        headers["Authorization"] = f"Bearer {who.credential}"
        self.requests[who.tenant] += 1
        answer = await client.post(
            f"{base or self.replicas.url}/mcp", json=message, headers=headers
        )
        if message.get("method") == "tools/call":
            # Answered or refused (429, an unknown name): its record names the tool it asked.
            self.calls[(who.tenant, message["params"]["name"])] += 1
        return answer

    async def open_session(self, client: httpx.AsyncClient, who: Who, base: str | None) -> str:
        opened = await self.post(client, who, initialize(), base=base)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        done = await self.post(
            client, who, notification("notifications/initialized"), session=session, base=base
        )
        assert done.status_code == 202, done.text
        return session

    async def close_session(
        self, client: httpx.AsyncClient, who: Who, session: str, base: str | None
    ) -> None:
        self.requests[who.tenant] += 1
        headers = {**legacy_headers(session), "Authorization": f"Bearer {who.credential}"}
        closed = await client.delete(f"{base or self.replicas.url}/mcp", headers=headers)
        assert closed.status_code in (200, 204), closed.text

    async def tools(
        self, client: httpx.AsyncClient, who: Who, *, era: str, base: str | None = None
    ) -> list[str]:
        """Every page of ``tools/list`` as ``who`` sees it, following the cursors."""
        session = await self.open_session(client, who, base) if era == "legacy" else None
        names: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"cursor": cursor} if cursor else {}
            message = legacy("tools/list", params) if session else modern("tools/list", params)
            answer = await self.post(client, who, message, session=session, base=base)
            assert answer.status_code == 200, answer.text
            result = answer.json()["result"]
            if session is None:
                assert result["cacheScope"] == "private"
            names += [tool["name"] for tool in result["tools"]]
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        if session is not None:
            await self.close_session(client, who, session, base)
        return names

    async def call(
        self, client: httpx.AsyncClient, who: Who, name: str, *, base: str | None = None
    ) -> httpx.Response:
        return await self.post(
            client, who, modern("tools/call", {"name": name, "arguments": {}}), base=base
        )


def sign(key: rsa.RSAPrivateKey, subject: str, tenant: str, scope: str) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject,
        "org": tenant,
        "scope": scope,
        "iat": now,
        "exp": now + 3600,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module", params=["tokens", "jwt"])
def cluster(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp(f"scoped-{request.param}")
    env: dict[str, str]
    if request.param == "tokens":
        env = {
            "MCP_AUTH": "tokens",
            "MCP_AUTH_TOKENS": f"{digest(ALICE)};name=alice;tenant=acme;scopes=mcp:read mcp:write,"
            f"{digest(BOB)};name=bob;tenant=globex;scopes=mcp:read",
        }
        a, b = Who(ALICE, "alice", "acme"), Who(BOB, "bob", "globex")
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        jwks = workdir / "jwks.json"
        jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig"}]}))
        env = {
            "MCP_AUTH": "jwt",
            "MCP_AUTH_ISSUER": ISSUER,
            "MCP_AUTH_AUDIENCE": AUDIENCE,
            "MCP_AUTH_JWKS_FILE": str(jwks),
            "MCP_AUTH_TENANT_CLAIM": "org",
        }
        a = Who(sign(key, "carol", "acme", "mcp:read mcp:write"), "carol", "acme")
        b = Who(sign(key, "dave", "globex", "mcp:read"), "dave", "globex")
    with Replicas(
        3,
        catalog="tests.support.scoped_catalog:catalog",
        extra_env={
            **env,
            "MCP_SCOPED_ITEMS": "hidden",
            "MCP_PAGE_SIZE": "2",
            "MCP_QUOTAS": json.dumps(QUOTAS),
            "MCP_RATE_LIMIT_RPS": "0",  # this test sends fast; quotas are what it checks
        },
        redis=redis_server,
        workdir=workdir,
    ) as running:
        yield Cluster(running, a, b)


async def test_each_caller_is_listed_its_own_tools_warm_and_after_changes(
    cluster: Cluster,
) -> None:
    replicas = cluster.replicas
    # Through nginx (round robin), then each replica twice: its second answers are cached bytes.
    bases: list[str | None] = [None, None, None, *replicas.replica_urls, *replicas.replica_urls]

    async def check(client: httpx.AsyncClient, a_sees: list[str], b_sees: list[str]) -> None:
        for base in bases:
            for era in ("modern", "legacy"):
                assert await cluster.tools(client, cluster.a, era=era, base=base) == a_sees
                assert await cluster.tools(client, cluster.b, era=era, base=base) == b_sees

    async def on_every_replica(client: httpx.AsyncClient, tool: str) -> None:
        for base in replicas.replica_urls:
            answer = await cluster.call(client, cluster.a, tool, base=base)
            assert answer.status_code == 200, answer.text

    async with httpx.AsyncClient(timeout=10) as client:
        await check(client, A_SEES, B_SEES)
        await on_every_replica(client, "grow")  # adds write_c (mcp:write) and open_c
        await check(client, [*A_SEES, "write_c", "open_c"], [*B_SEES, "open_c"])
        await on_every_replica(client, "shrink")  # removes them
        await check(client, A_SEES, B_SEES)


# Each: a method and params naming something hidden from b, and the same naming nothing.
HIDDEN_AND_UNKNOWN = [
    ("tools/call", {"name": "write_a", "arguments": {}}, {"name": "nothing", "arguments": {}}),
    (  # a schema failure: count must be an integer
        "tools/call",
        {"name": "write_a", "arguments": {"count": "many"}},
        {"name": "nothing", "arguments": {"count": "many"}},
    ),
    ("prompts/get", {"name": "write_prompt"}, {"name": "nothing"}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "write_prompt"}, "argument": {"name": "style"}},
        {"ref": {"type": "ref/prompt", "name": "nothing"}, "argument": {"name": "style"}},
    ),
    (
        "completion/complete",
        {"ref": {"type": "ref/resource", "uri": "notes://{x}"}, "argument": {"name": "x"}},
        {"ref": {"type": "ref/resource", "uri": "nothing://{x}"}, "argument": {"name": "x"}},
    ),
    ("resources/read", {"uri": "notes://one"}, {"uri": "nothing://one"}),
]


def blind(answer: httpx.Response, *names: str) -> tuple[int, str, bytes]:
    """Status, challenge and body with the names asked for replaced (the one difference)."""
    body = answer.content
    for name in sorted(names, key=len, reverse=True):  # nothing://{x} before nothing
        body = body.replace(name.encode(), b"NAME")
    return answer.status_code, answer.headers.get("www-authenticate", ""), body


@pytest.mark.parametrize(("method", "hidden", "unknown"), HIDDEN_AND_UNKNOWN)
async def test_what_is_hidden_answers_byte_for_byte_as_unknown_through_nginx(
    cluster: Cluster, method: str, hidden: dict[str, Any], unknown: dict[str, Any]
) -> None:
    names = ["write_a", "write_prompt", "notes://{x}", "notes://one"]
    names += ["nothing", "nothing://{x}", "nothing://one"]
    if method == "completion/complete":
        for params in (hidden, unknown):
            params["argument"] = {**params["argument"], "value": ""}
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(3):  # round robin: each replica answers once
            answers = [
                blind(await cluster.post(client, cluster.b, modern(method, p)), *names)
                for p in (hidden, unknown)
            ]
            assert answers[0] == answers[1]
            assert answers[0][0] != 403
            session = await cluster.open_session(client, cluster.b, None)
            legacy_answers = [
                blind(
                    await cluster.post(client, cluster.b, legacy(method, p), session=session),
                    *names,
                )
                for p in (hidden, unknown)
            ]
            await cluster.close_session(client, cluster.b, session, None)
            assert legacy_answers[0] == legacy_answers[1]
        # a may use it: its answer is another one.
        seen = blind(await cluster.post(client, cluster.a, modern(method, hidden)), *names)
        assert seen != answers[0]


async def quota_window_fresh() -> None:
    """Wait for a new minute if this one is nearly over: the quota's windows are aligned on
    the epoch, and the calls below must fall in one."""
    left = 60 - time.time() % 60
    if left < 20:
        await anyio.sleep(left + 0.5)


async def test_a_tenants_quota_holds_on_every_replica_and_spares_the_other(
    cluster: Cluster,
) -> None:
    await quota_window_fresh()
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(5):  # round robin over the 3 replicas: counted in Redis
            answer = await cluster.call(client, cluster.a, "open_b")
            assert answer.status_code == 200, answer.text
        sixth = await cluster.call(client, cluster.a, "open_b")
        assert sixth.status_code == 429, sixth.text
        assert 0 < int(sixth.headers["retry-after"]) <= 60
        assert sixth.json()["error"]["data"]["tenant"] == "acme"
        for base in cluster.replicas.replica_urls:  # whichever replica serves it
            refused = await cluster.call(client, cluster.a, "open_b", base=base)
            assert refused.status_code == 429, refused.text
            assert "retry-after" in refused.headers
        session = await cluster.open_session(client, cluster.a, None)
        message = legacy("tools/call", {"name": "open_b", "arguments": {}})
        refused = await cluster.post(client, cluster.a, message, session=session)
        assert refused.status_code == 429, refused.text
        assert "retry-after" in refused.headers
        await cluster.close_session(client, cluster.a, session, None)
        # Another tool of a's, and every call of b's, go on.
        assert (await cluster.call(client, cluster.a, "open_a")).status_code == 200
        for _ in range(8):
            answer = await cluster.call(client, cluster.b, "open_b")
            assert answer.status_code == 200, answer.text


def test_the_report_splits_the_traffic_by_tenant(cluster: Cluster) -> None:
    cluster.replicas.stop_replicas()  # a graceful drain: every record is written
    files = [str(path) for path in cluster.replicas.records_files]
    run = subprocess.run(
        [sys.executable, "-m", "server", "report", *files, "--by-tenant", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    view = {row["tenant"]: row for row in json.loads(run.stdout)["tenants"]}
    # Every request reached a replica, and each named its caller's tenant.
    assert {tenant: row["requests"] for tenant, row in view.items()} == dict(cluster.requests)
    for tenant in ("acme", "globex"):
        calls = {tool: n for (who, tool), n in cluster.calls.items() if who == tenant}
        assert view[tenant]["tools"] == calls
    assert view["acme"]["errors"] >= 5  # the quota's refusals, at least
    assert view["globex"]["callers"] == [cluster.b.subject]
