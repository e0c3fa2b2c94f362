"""The server card and its catalog (SEP-2127): valid against the extension's own schema
(``tests/support/schemas/server-card.schema.json``, vendored from
modelcontextprotocol/experimental-ext-server-card at 8924e08682b4a936e6464b57845ec2ff17dc8776),
in agreement with ``server/discover`` field by field, cached with an ETag (304), public (CORS),
under a trusted proxy's forwarded identity, refused for a Host not allowed, and off with
``MCP_SERVER_CARD=false``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from server.app import create_app
from server.builtin.probe import catalog as probe_catalog
from server.protocol import LEGACY_VERSIONS, META_SERVER_INFO
from server.security.auth import token_digest
from server.settings import Settings
from tests.support import mcp_client as mcp

pytestmark = pytest.mark.anyio

SCHEMA = json.loads(
    (Path(__file__).parents[1] / "support" / "schemas" / "server-card.schema.json").read_text()
)
CARD_SCHEMA = {**SCHEMA, "$ref": "#/$defs/ServerCard"}
# The catalog's shape as docs/discovery.md of the same commit gives it (it has no schema file).
CATALOG_SCHEMA = {
    "type": "object",
    "required": ["specVersion", "entries"],
    "properties": {
        "specVersion": {"type": "string"},
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["identifier", "type", "url"],
                "properties": {
                    "identifier": {"type": "string", "pattern": "^urn:air:[^:]+:[^:]+:[^:]+$"},
                    "type": {"const": "application/mcp-server-card+json"},
                    "url": {"type": "string", "format": "uri"},
                },
            },
        },
    },
}
TOKEN = "card-test-token"


def valid(document: dict[str, Any], schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [error.message for error in validator.iter_errors(document)]
    assert not errors, errors


@contextlib.asynccontextmanager
async def serve(address: str = "127.0.0.1", **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    settings: dict[str, Any] = {
        "records": ["none"],
        "allowed_hosts": ["mcp.example.com", "a.example"],
        "trusted_proxies": ["127.0.0.1"],
        **overrides,
    }
    app = create_app(Settings(_env_file=None, **settings), probe_catalog)
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(transport=transport, base_url="https://mcp.example.com") as client,
    ):
        yield client


async def discover(client: httpx.AsyncClient, **headers: str) -> dict[str, Any]:
    message = mcp.modern("server/discover", {}, 1)
    answer = await client.post(
        "/mcp", json=message, headers={**mcp.modern_headers(message), **headers}
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"sse_transport": False},
        {"auth": "tokens", "auth_tokens": [token_digest(TOKEN)]},
        {"server_card_name": "com.example/probe"},
    ],
)
async def test_the_card_is_valid_and_agrees_with_discover(settings: dict[str, Any]) -> None:
    authenticated = "auth" in settings
    auth = {"Authorization": f"Bearer {TOKEN}"} if authenticated else {}
    async with serve(**settings) as client:
        answer = await client.get("/mcp/server-card")
        catalog = await client.get("/.well-known/mcp/catalog.json")
        ai_catalog = await client.get("/.well-known/ai-catalog.json")
        result = await discover(client, **auth)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/mcp-server-card+json"
    card = answer.json()
    valid(card, CARD_SCHEMA)
    info = result["_meta"][META_SERVER_INFO]
    # Field by field: what a connected client sees must not contradict what it read first.
    assert card["version"] == info["version"]
    assert card["title"] == info["title"]
    assert card["description"] == info["description"]
    assert card["name"] == settings.get("server_card_name", "com.example.mcp/" + info["name"])
    for field in ("websiteUrl", "icons"):
        assert card.get(field) == info.get(field)
    remotes = {remote["type"]: remote for remote in card["remotes"]}
    streamable = remotes["streamable-http"]
    assert streamable["url"] == "https://mcp.example.com/mcp"
    versions = streamable["supportedProtocolVersions"]
    assert versions[: len(result["supportedVersions"])] == result["supportedVersions"]
    assert versions[len(result["supportedVersions"]) :] == list(LEGACY_VERSIONS)
    if settings.get("sse_transport", True):
        assert remotes["sse"]["url"] == "https://mcp.example.com/sse"
        assert remotes["sse"]["supportedProtocolVersions"] == ["2024-11-05"]
    else:
        assert "sse" not in remotes
    for remote in card["remotes"]:
        names = [header["name"] for header in remote.get("headers", [])]
        assert names == (["Authorization"] if authenticated else [])
    for listing in (catalog, ai_catalog):
        assert listing.status_code == 200
        valid(listing.json(), CATALOG_SCHEMA)
        (entry,) = listing.json()["entries"]
        assert entry["url"] == "https://mcp.example.com/mcp/server-card"
        assert entry["identifier"].endswith(":mcp:" + card["name"].split("/")[1])


async def test_a_matching_etag_is_answered_304_and_caching_is_public() -> None:
    async with serve() as client:
        first = await client.get("/mcp/server-card")
        etag = first.headers["etag"]
        again = await client.get("/mcp/server-card", headers={"If-None-Match": etag})
        weak = await client.get("/mcp/server-card", headers={"If-None-Match": f'"x", W/{etag}'})
        star = await client.get("/.well-known/mcp/catalog.json", headers={"If-None-Match": "*"})
        other = await client.get("/mcp/server-card", headers={"If-None-Match": '"other"'})
        catalog = await client.get("/.well-known/mcp/catalog.json")
    assert first.headers["cache-control"] == "public, max-age=3600"
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    assert weak.status_code == 304
    assert star.status_code == 304
    assert other.status_code == 200
    assert other.json() == first.json()
    assert catalog.headers["etag"] != etag


async def test_a_version_retired_through_mcp_retire_leaves_the_card_and_its_etag_at_once() -> None:
    """Modern or legacy, a version (or the whole initialize era) past its sunset or in a
    brownout is refused with 410: the card stops advertising it as it is retired, not after
    the version list it was cached under changes."""
    plan = json.dumps(
        [
            {"item": "version:2026-07-28", "sunset": "2027-06-01"},
            {"item": "initialize", "sunset": "2027-09-01"},
        ]
    )
    clock = [datetime(2027, 1, 1, tzinfo=UTC)]
    async with serve(retire=plan) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        assert app.retiring is not None
        app.retiring.now = lambda: clock[0]
        cards = []
        for moment in (
            datetime(2027, 1, 1, tzinfo=UTC),  # both deprecated: everything still on it
            datetime(2027, 7, 1, tzinfo=UTC),  # 2026-07-28 retired
            datetime(2027, 10, 1, tzinfo=UTC),  # and the initialize era too
        ):
            clock[0] = moment
            answer = await client.get("/mcp/server-card")
            remotes = {remote["type"]: remote for remote in answer.json()["remotes"]}
            cards.append((answer.headers["etag"], remotes))
    (first, everything), (second, no_modern), (third, nothing) = cards
    assert everything["streamable-http"]["supportedProtocolVersions"] == [
        "2026-07-28",
        *LEGACY_VERSIONS,
    ]
    assert no_modern["streamable-http"]["supportedProtocolVersions"] == list(LEGACY_VERSIONS)
    assert no_modern["sse"]["supportedProtocolVersions"] == ["2024-11-05"]
    assert nothing["streamable-http"]["supportedProtocolVersions"] == []
    assert "sse" not in nothing  # its only version is gone with the era
    assert len({first, second, third}) == 3


async def test_cors_lets_any_page_read_it() -> None:
    async with serve() as client:
        answer = await client.get("/mcp/server-card", headers={"Origin": "https://x.example"})
        preflight = await client.options(
            "/mcp/server-card",
            headers={"Origin": "https://x.example", "Access-Control-Request-Method": "GET"},
        )
    assert answer.headers["access-control-allow-origin"] == "*"
    assert answer.headers["access-control-expose-headers"] == "ETag"
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "If-None-Match" in preflight.headers["access-control-allow-headers"]


async def test_under_a_trusted_proxys_forwarded_identity() -> None:
    forwarded = {"X-Forwarded-Host": "a.example:8443", "X-Forwarded-Prefix": "/api"}
    async with serve() as client:
        card = (await client.get("/mcp/server-card", headers=forwarded)).json()
        catalog = (await client.get("/.well-known/mcp/catalog.json", headers=forwarded)).json()
        plain = (await client.get("/mcp/server-card")).json()
    assert card["remotes"][0]["url"] == "https://a.example:8443/api/mcp"
    assert card["remotes"][1]["url"] == "https://a.example:8443/api/sse"
    assert catalog["entries"][0]["url"] == "https://a.example:8443/api/mcp/server-card"
    assert plain["remotes"][0]["url"] == "https://mcp.example.com/mcp"


async def test_an_untrusted_peer_cannot_move_it_and_a_host_must_be_allowed() -> None:
    async with serve(address="198.51.100.7") as client:
        card = (
            await client.get("/mcp/server-card", headers={"X-Forwarded-Host": "evil.example"})
        ).json()
        refused = await client.get("/mcp/server-card", headers={"Host": "evil.example"})
    assert card["remotes"][0]["url"] == "https://mcp.example.com/mcp"
    assert refused.status_code == 403


async def test_off_switch() -> None:
    async with serve(server_card=False) as client:
        for path in ("/mcp/server-card", "/.well-known/mcp/catalog.json"):
            assert (await client.get(path)).status_code == 404


def test_a_card_named_from_an_address_host_names_no_reversed_digits() -> None:
    from server.transport.server_card import default_name

    assert default_name("mcp.example.com:443", "probe") == "com.example.mcp/probe"
    assert default_name("127.0.0.1:8000", "probe") == "localhost/probe"
    assert default_name("[::1]:8000", "probe") == "localhost/probe"
    assert default_name("10.1.2.3", "probe") == "ip-10-1-2-3/probe"
