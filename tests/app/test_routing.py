"""The router's forwarded identity, through a real uvicorn: every URL the server writes (the
401's resource_metadata, the metadata's resource, the HTTP+SSE endpoint event) is the one the
client used, whichever header style a trusted proxy speaks; nobody else's headers count, and a
malformed one is a 400. The test client stands in for the proxy (it connects from 127.0.0.1)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.builtin.probe import catalog as probe_catalog
from server.security.auth import token_digest
from server.settings import Settings
from tests.support.http_sse import sse_endpoint
from tests.support.live_server import ServerThread

# Each test starts a real uvicorn (the forwarded scope must be what uvicorn builds).
pytestmark = pytest.mark.slow

TOKEN = "routing-test-token"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
STYLES = {
    "x-forwarded": {
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "a.example",
        "X-Forwarded-Prefix": "/api",
    },
    "rfc7239": {
        "Forwarded": 'for=203.0.113.9;proto=https;host="a.example"',
        "X-Forwarded-Prefix": "/api",
    },
}


@contextlib.contextmanager
def running(**overrides: Any) -> Iterator[str]:
    settings: dict[str, Any] = {
        "records": ["none"],
        "auth": "tokens",
        "auth_tokens": [token_digest(TOKEN)],
        "auth_servers": ["https://as.example"],
        "trusted_proxies": ["127.0.0.1"],
        "allowed_hosts": ["a.example", "127.0.0.1"],
        **overrides,
    }
    app = create_app(Settings(_env_file=None, **settings), probe_catalog)
    # MCP_ROOT_PATH reaches uvicorn as its root_path, as `python -m server` passes it.
    server = ServerThread(app, root_path=settings.get("root_path", ""))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def challenge(url: str, headers: dict[str, str]) -> httpx.Response:
    accept = {"Accept": "application/json, text/event-stream"}
    return httpx.post(f"{url}/mcp", json=INIT, headers={**accept, **headers}, timeout=5)


def metadata_url(response: httpx.Response) -> str:
    value = response.headers["www-authenticate"]
    return value.split('resource_metadata="', 1)[1].split('"', 1)[0]


def endpoint_event(url: str, headers: dict[str, str]) -> str:
    return sse_endpoint(f"{url}/sse", {"Authorization": f"Bearer {TOKEN}", **headers}, timeout=5)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_url_is_the_one_the_client_used(style: str) -> None:
    headers = STYLES[style]
    with running() as url:
        refused = challenge(url, headers)
        meta = metadata_url(refused)
        # The proxy strips /api: what reaches the app is the path below it.
        below = meta.removeprefix("https://a.example/api")
        document = httpx.get(f"{url}{below}", headers=headers, timeout=5)
        endpoint = endpoint_event(url, headers)
    assert refused.status_code == 401
    assert meta == "https://a.example/api/.well-known/oauth-protected-resource/mcp"
    assert document.status_code == 200
    assert document.json()["resource"] == "https://a.example/api/mcp"
    assert endpoint.startswith("/api/messages?session_id=")


def test_a_forwarded_port_is_part_of_the_urls() -> None:
    headers = {"X-Forwarded-Host": "a.example", "X-Forwarded-Port": "8443"}
    with running() as url:
        meta = metadata_url(challenge(url, headers))
        document = httpx.get(
            f"{url}/.well-known/oauth-protected-resource/mcp", headers=headers, timeout=5
        ).json()
    assert meta == "http://a.example:8443/.well-known/oauth-protected-resource/mcp"
    assert document["resource"] == "http://a.example:8443/mcp"


def test_an_untrusted_peers_forwarding_headers_change_nothing() -> None:
    spoof = {
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Prefix": "/evil",
        "Forwarded": "host=evil.example;proto=https",
    }
    with running(trusted_proxies=["10.9.9.9"]) as url:
        meta = metadata_url(challenge(url, spoof))
        document = httpx.get(f"{url}/.well-known/oauth-protected-resource/mcp", headers=spoof)
        endpoint = endpoint_event(url, spoof)
    port = url.rsplit(":", 1)[1]
    assert meta == f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    assert document.json()["resource"] == f"http://127.0.0.1:{port}/mcp"
    assert endpoint.startswith("/messages?session_id=")


def test_a_trusted_proxy_forwarding_a_host_not_allowed_is_refused() -> None:
    with running() as url:
        refused = challenge(url, {"X-Forwarded-Host": "evil.example"})
        metadata = httpx.get(
            f"{url}/.well-known/oauth-protected-resource/mcp",
            headers={"Forwarded": "host=evil.example"},
        )
    assert refused.status_code == 403
    assert "evil.example" in refused.json()["error"]["message"]
    assert metadata.status_code == 403


def test_a_forwarded_host_is_checked_where_a_host_matters_as_a_direct_one_is() -> None:
    # One Host check, the one a direct request meets: the probes and /metrics answer whatever
    # the Host (a direct request's or a proxy's), the MCP path and the metadata refuse it.
    evil = {"X-Forwarded-Host": "evil.example"}
    with running() as url:
        health = httpx.get(f"{url}/healthz", headers=evil)
        metrics = httpx.get(f"{url}/metrics", headers=evil)
        direct = httpx.get(f"{url}/healthz", headers={"Host": "evil.example"})
        posted = challenge(url, evil)
    assert (health.status_code, metrics.status_code) == (200, 200)
    assert health.json() == direct.json()
    assert posted.status_code == 403


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Forwarded-Prefix", "no-slash"),
        ("X-Forwarded-Host", "a.example:http"),
        ("Forwarded", "host=a.example;;"),
        ("X-Forwarded-Proto", "ftp"),
    ],
)
def test_a_malformed_header_from_a_trusted_proxy_is_a_clear_400(header: str, value: str) -> None:
    with running() as url:
        refused = challenge(url, {header: value})
        other = httpx.get(f"{url}/.well-known/oauth-protected-resource", headers={header: value})
    assert refused.status_code == 400
    assert header.rsplit("-", maxsplit=1)[-1].lower() in refused.json()["error"]["message"].lower()
    assert other.status_code == 400
    assert header in other.json()["error"]


def test_pinned_settings_win_and_a_disagreement_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers = {"X-Forwarded-Host": "a.example", "X-Forwarded-Prefix": "/other"}
    pinned = {"root_path": "/api", "auth_resource": "https://pinned.example/api/mcp"}
    with caplog.at_level(logging.WARNING), running(**pinned) as url:
        for _ in range(3):
            meta = metadata_url(challenge(url, headers))
            document = httpx.get(
                f"{url}/.well-known/oauth-protected-resource/mcp", headers=headers
            ).json()
    assert meta == "http://a.example/api/.well-known/oauth-protected-resource/mcp"
    assert document["resource"] == "https://pinned.example/api/mcp"
    root = [r for r in caplog.records if "MCP_ROOT_PATH=/api" in r.getMessage()]
    resource = [r for r in caplog.records if "pinned resource" in r.getMessage()]
    assert len(root) == 1
    assert "/other" in root[0].getMessage()
    assert len(resource) == 1
    assert "https://pinned.example/api/mcp" in resource[0].getMessage()
    assert "http://a.example/api/mcp" in resource[0].getMessage()
