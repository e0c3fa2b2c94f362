"""The live report at MCP_REPORT_PATH: fed as records are written, refused to whoever is not
on loopback or authenticated with the admin scope, off by default.

Freshness runs a real uvicorn (tests/support/live_server.py) and polls the JSON report after
each request; who may see it is decided in process, where the peer address is the test's to
choose (``httpx.ASGITransport(client=...)``). The Redis test follows a real stream that a
real redis-server holds (skipped without ``redis-server`` unless CI requires it).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from server.app import Application, create_app
from server.cli.main import main
from server.report.live import LiveReport
from server.security.auth import new_token
from server.security.networks import parse_networks
from server.settings import Settings
from server.transport.admin import is_local_caller
from tests.support.app import make_catalog
from tests.support.live_server import ServerThread
from tests.support.mcp_client import modern, modern_headers
from tests.support.polling import wait_until_blocking

# A real uvicorn under steady load: outside the inner loop (pytest -m 'not slow').
pytestmark = pytest.mark.slow

TOKEN, DIGEST = new_token()


def settings(**overrides: Any) -> Settings:
    options: dict[str, Any] = {"_env_file": None, "records": ["none"], "report_live": True}
    options.update(overrides)
    return Settings(**options)


def call_tool(client_name: str, text: str = "hi") -> tuple[dict[str, str], bytes]:
    info = {"name": client_name, "version": "1"}
    message = modern("tools/call", {"name": "echo", "arguments": {"text": text}}, client_info=info)
    headers = modern_headers(message, accept="application/json")
    return headers, json.dumps(message).encode()


@contextlib.contextmanager
def live_server(app: Application) -> Iterator[str]:
    server = ServerThread(app).start()
    try:
        yield server.url
    finally:
        server.stop()


def calls_of(document: dict[str, Any], name: str) -> int:
    for client in document["clients"]:
        if client["name"] == name:
            return int(client["methods"].get("tools/call", {}).get("requests", 0))
    return 0


# -- freshness -----------------------------------------------------------------------------


def test_a_request_shows_on_the_live_report_within_two_seconds() -> None:
    app = create_app(settings(), make_catalog())
    with live_server(app) as url, httpx.Client(base_url=url) as http:
        page = http.get("/admin/report")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert '<body data-refresh="1">' in page.text
        assert page.headers["cache-control"] == "no-store"
        for number in range(1, 4):
            headers, body = call_tool("live-client")
            assert http.post("/mcp", content=body, headers=headers).status_code == 200
            sent = time.monotonic()
            wait_until_blocking(
                lambda number=number: (
                    calls_of(  # type: ignore[misc]
                        http.get("/admin/report", params={"format": "json"}).json(), "live-client"
                    )
                    == number
                ),
                limit=2.0,
            )
            assert time.monotonic() - sent < 2.0
        document = http.get("/admin/report", params={"format": "json"}).json()
        [echo] = document["tools"]
        assert (echo["name"], echo["calls"], echo["outcomes"]["ok"]) == ("echo", 3, 3)
        assert document["input"]["files"][0].startswith("(live: this process, since ")


def test_the_live_report_is_off_by_default() -> None:
    app = create_app(Settings(_env_file=None, records=["none"]), make_catalog())
    assert app.live is None
    with live_server(app) as url:
        assert httpx.get(f"{url}/admin/report").status_code == 404


# -- who may see it ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def in_process(
    app: Application, peer: str, **headers: str
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=(peer, 50_000))
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8000", headers=headers
        ) as client,
    ):
        yield client


@pytest.mark.anyio
async def test_without_authentication_only_loopback_sees_it() -> None:
    app = create_app(settings(), make_catalog())
    async with in_process(app, "10.1.2.3") as remote:
        refused = await remote.get("/admin/report")
        assert refused.status_code == 403
        assert "only on loopback" in refused.json()["error"]
        assert "clients" not in refused.text
    async with in_process(app, "127.0.0.1") as local:
        assert (await local.get("/admin/report")).status_code == 200
    # Through a local proxy the world would look local: a forwarded request is not.
    async with in_process(app, "127.0.0.1", **{"X-Forwarded-For": "203.0.113.9"}) as proxied:
        assert (await proxied.get("/admin/report")).status_code == 403
    # DNS rebinding: a page on another name reaching loopback is refused like the endpoint.
    async with in_process(app, "127.0.0.1", Host="evil.example") as rebound:
        assert (await rebound.get("/admin/report")).status_code in (400, 403)


@pytest.mark.anyio
async def test_off_loopback_it_takes_a_token_with_the_admin_scope() -> None:
    options = {"auth": "tokens", "auth_tokens": [DIGEST], "auth_token_scopes": ["mcp:admin"]}
    app = create_app(settings(**options), make_catalog())
    async with in_process(app, "10.1.2.3") as anonymous:
        refused = await anonymous.get("/admin/report")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
    async with in_process(app, "10.1.2.3", Authorization="Bearer wrong") as guessing:
        assert (await guessing.get("/admin/report")).status_code == 401
    async with in_process(app, "10.1.2.3", Authorization=f"Bearer {TOKEN}") as admin:
        shown = await admin.get("/admin/report", params={"format": "json"})
        assert shown.status_code == 200
        assert shown.json()["report"] == 1
    without_scope = create_app(
        settings(auth="tokens", auth_tokens=[DIGEST], auth_token_scopes=["tools"]),
        make_catalog(),
    )
    async with in_process(without_scope, "10.1.2.3", Authorization=f"Bearer {TOKEN}") as user:
        refused = await user.get("/admin/report")
        assert refused.status_code == 403
        assert "insufficient_scope" in refused.headers["www-authenticate"]


def test_local_callers() -> None:
    trusted = parse_networks(["10.0.0.0/8"])
    assert is_local_caller("127.0.0.1", None, proxied=False)
    assert is_local_caller("::1", None, proxied=False)
    assert not is_local_caller("10.1.2.3", None, proxied=False)
    assert not is_local_caller(None, None, proxied=False)
    assert not is_local_caller("not an address", None, proxied=False)
    assert not is_local_caller("127.0.0.1", "203.0.113.9", proxied=True)
    # A trusted proxy forwarding a loopback caller (an SSH tunnel through it) is local; one
    # forwarding anyone else is not, and a loopback peer that is not trusted stays a proxy.
    assert is_local_caller("10.0.0.2", "127.0.0.1", proxied=True, trusted_proxies=trusted)
    assert not is_local_caller("10.0.0.2", "203.0.113.9", proxied=True, trusted_proxies=trusted)
    assert not is_local_caller("127.0.0.1", "127.0.0.1", proxied=True, trusted_proxies=trusted)


def test_the_live_sink_never_raises_and_counts_what_it_can() -> None:
    live = LiveReport(refresh_s=1)
    live.write([b"garbage\n", b'{"v": 1, "kind": "request", "method": "ping"}\n'])
    live.write([b"\xff" * 10])
    report = live.report()
    assert report.input.requests == 1
    assert report.input.malformed == 2
    assert "data-refresh" in live.render("html")
    assert json.loads(live.render("json"))["input"]["requests"] == 1


# -- by tenant ---------------------------------------------------------------------------------


def tenant_records() -> list[bytes]:
    rows = []
    for n in range(3000):  # past the latency reservoir: its draws must not depend on the view
        tenant = ("acme", "globex", None)[n % 3]
        row: dict[str, Any] = {
            "v": 1,
            "kind": "request",
            "time": "2026-12-01T10:00:00.000Z",
            "method": "tools/call" if n % 2 else "tools/list",
            "target": "search" if n % 4 == 1 else "fetch",
            "status": 429 if n % 7 == 0 else 200,
            "error": {"code": -32000, "message": "x"} if n % 7 == 0 else None,
            "duration_ms": float(n % 97),
            "subject": f"user-{n % 5}",
        }
        if tenant is not None:
            row["tenant"] = tenant
        rows.append(json.dumps(row).encode() + b"\n")
    return rows


@pytest.mark.parametrize("form", ["json", "markdown", "table"])
@pytest.mark.parametrize("tenant", [None, "acme", "(none)", "nobody"])
def test_the_live_tenant_view_is_the_file_reports_for_the_same_records(
    form: str, tenant: str | None, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tenant_records()
    source = tmp_path / "records.jsonl"
    source.write_bytes(b"".join(lines))
    live = LiveReport(refresh_s=1)
    for start in range(0, len(lines), 100):  # batches, as the writer hands them over
        live.write(lines[start : start + 100])
    argv = ["report", str(source), "--by-tenant", "--format", form]
    assert main(argv + (["--tenant", tenant] if tenant is not None else [])) == 0
    assert live.render(form, None, tenant or "") == capsys.readouterr().out


def test_each_line_is_decoded_once_for_the_report_and_its_retire_and_tenant_views(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tenant_records()
    for n in range(0, len(lines), 5):  # some of them over HTTP+SSE, to be retired
        lines[n] = lines[n].replace(b'"kind"', b'"transport": "sse", "era": "legacy", "kind"')
    source = tmp_path / "records.jsonl"
    source.write_bytes(b"".join(lines))
    live = LiveReport(refresh_s=1, retire=["sse", "initialize"])
    decoded = []
    loads = orjson.loads

    def counting(data: Any) -> Any:
        decoded.append(data)
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting)
    for start in range(0, len(lines), 100):
        live.write(lines[start : start + 100])
    monkeypatch.setattr(orjson, "loads", loads)
    assert len(decoded) == len(lines)  # the aggregator's decode feeds the scans too
    assert main(["report", str(source), "--by-tenant", "--format", "json"]) == 0
    assert live.render("json", None, "") == capsys.readouterr().out
    for item in ("sse", "initialize"):
        assert main(["report", str(source), "--retire", item, "--format", "json"]) == 1
        found = json.loads(capsys.readouterr().out)
        assert found["requests"] == len(lines) // 5
        assert json.loads(live.render("json", retire=item)) == found


@pytest.mark.anyio
async def test_the_route_serves_the_tenant_view_and_a_section_on_the_page() -> None:
    app = create_app(settings(), make_catalog())
    assert app.live is not None
    app.live.write(tenant_records()[:30])
    async with in_process(app, "127.0.0.1") as local:
        every = await local.get("/admin/report?by-tenant&format=json")
        assert every.headers["content-type"] == "application/json"
        assert [row["tenant"] for row in every.json()["tenants"]] == ["(none)", "acme", "globex"]
        one = await local.get("/admin/report", params={"tenant": "globex", "format": "table"})
        assert one.headers["content-type"].startswith("text/plain")
        assert one.text.splitlines()[1].startswith("- globex: 10 requests")
        assert len(one.text.splitlines()) == 2
        page = await local.get("/admin/report", params={"tenant": "<b>"})
        assert '<section id="tenants"><h2>Tenant &lt;b&gt;</h2>' in page.text
        # Without a tenant view, markdown and text are not report formats: the page.
        plain = await local.get("/admin/report", params={"format": "table"})
        assert plain.headers["content-type"].startswith("text/html")
        assert 'id="tenants"' not in plain.text


# -- every replica, through Redis ------------------------------------------------------------


def test_with_redis_records_it_follows_the_stream_of_every_replica(redis_server: Any) -> None:
    import redis

    from tests.support.redis_server import fresh_prefix

    prefix = fresh_prefix()
    options = {
        "records": ["redis"],
        "redis_url": redis_server.url,
        "redis_prefix": prefix,
        "state_secret": "s" * 32,
    }
    app = create_app(settings(**options), make_catalog())
    other = redis.Redis.from_url(redis_server.url)
    with live_server(app) as url, httpx.Client(base_url=url) as http:
        headers, body = call_tool("this-replica")
        assert http.post("/mcp", content=body, headers=headers).status_code == 200
        # Another replica's record, added to the same stream.
        record = {"v": 1, "kind": "request", "method": "tools/call", "target": "echo"}
        record |= {"client": {"name": "other-replica-client"}, "outcome": "ok"}
        other.xadd(f"{prefix}:records", {"r": json.dumps(record)})

        def both() -> bool:
            document = http.get("/admin/report", params={"format": "json"}).json()
            return calls_of(document, "this-replica") == 1 and (
                calls_of(document, "other-replica-client") == 1
            )

        wait_until_blocking(both, limit=3.0)
    other.close()
