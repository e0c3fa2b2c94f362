"""Named tokens with scopes and a tenant of their own: read from MCP_AUTH_TOKENS and a file,
checked at start-up, carried into ``ctx.caller`` and the records; plain digests as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from server import Catalog, Context, create_app
from server.errors import ConfigurationError
from server.security.auth import StaticTokens
from server.security.gate import check_auth_mode
from server.settings import Settings, load_settings
from tests.support.mcp_client import modern, modern_headers


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


pytestmark = pytest.mark.anyio

ALICE, BOB, PLAIN = "alice-token-0123456789", "bob-token-0123456789", "plain-token-0123456789"


async def test_a_named_entry_gives_its_subject_tenant_and_scopes() -> None:
    tokens = StaticTokens(
        [
            f"{digest(ALICE)};name=alice;tenant=acme;scopes=mcp:read mcp:write",
            f"{digest(BOB)};tenant=globex",
            digest(PLAIN),
        ],
        scopes=["mcp:read"],
    )
    alice = await tokens.verify(ALICE)
    assert (alice.subject, alice.tenant) == ("alice", "acme")
    assert alice.scopes == frozenset({"mcp:read", "mcp:write"})
    bob = await tokens.verify(BOB)
    assert bob.subject == "token:" + digest(BOB)[7:15]
    assert (bob.tenant, bob.scopes) == ("globex", frozenset({"mcp:read"}))
    plain = await tokens.verify(PLAIN)
    assert (plain.tenant, plain.scopes) == (
        None,
        frozenset({"mcp:read"}),
    )  # today's digests unchanged


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("name=alice;tenant=acme", "an entry must start with sha256:<64 hex digits>"),
        (f"{digest(ALICE)};team=acme", "'team=acme' after a digest is not name="),
        (f'{digest(ALICE)};scopes=mcp:read bad"scope', "not valid OAuth scope names"),
        (f"{digest(ALICE)};tenant=a b", "tenant='a b' must be"),
        (f"{digest(ALICE)};name=x;name=y", "is not name=, tenant= or scopes= (once)"),
    ],
)
def test_a_bad_entry_stops_the_start_in_one_line(entry: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        load_settings(auth="tokens", auth_tokens=[entry])
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_token_file_adds_entries_and_names_the_line_of_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "tokens"
    good.write_text(f"# the bots\n{digest(ALICE)};name=alice;tenant=acme\n\n{digest(BOB)}\n")
    check_auth_mode(Settings(auth="tokens", auth_tokens_file=str(good)))
    bad = tmp_path / "bad"
    bad.write_text(f"{digest(ALICE)}\nnot-a-digest\n")
    with pytest.raises(ConfigurationError, match=f"{bad}:2: an entry must start with sha256"):
        check_auth_mode(Settings(auth="tokens", auth_tokens_file=str(bad)))
    twice = tmp_path / "twice"
    twice.write_text(f"{digest(ALICE)}\n")
    with pytest.raises(ConfigurationError, match="the same digest twice"):
        check_auth_mode(
            Settings(auth="tokens", auth_tokens=[digest(ALICE)], auth_tokens_file=str(twice))
        )


async def test_ctx_caller_and_the_records_carry_the_tenant(tmp_path: Path) -> None:
    catalog = Catalog("tenants", "1.0.0")

    @catalog.tool()
    async def whoami(ctx: Context) -> str:
        caller = ctx.caller
        assert caller is not None
        return f"{caller.subject}@{caller.tenant}"

    records = tmp_path / "records.jsonl"
    settings = Settings(
        auth="tokens",
        auth_tokens=[f"{digest(ALICE)};name=alice;tenant=acme", f"{digest(BOB)};name=bob"],
        records=["file"],
        records_file=str(records),
    )
    app = create_app(settings, catalog=catalog)
    async with (
        app.lifespan(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        answers = []
        for token in (ALICE, BOB):
            message = modern("tools/call", {"name": "whoami", "arguments": {}})
            headers = {**modern_headers(message), "Authorization": f"Bearer {token}"}
            answer = await client.post("/mcp", json=message, headers=headers)
            answers.append(answer.json()["result"]["content"][0]["text"])
    assert answers == ["alice@acme", "bob@None"]
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    calls = [r for r in lines if r.get("method") == "tools/call"]
    assert [(r["subject"], r.get("tenant")) for r in calls] == [("alice", "acme"), ("bob", None)]
