"""``Catalog(lifespan=...)``: the catalog's own start and stop, run by the app's lifespan.

In-process (the app's lifespan entered by hand, requests through httpx's ASGI transport); that
it runs once per process in every way of serving is tests/e2e/test_any_server.py's part.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from server import Catalog
from server.app import Application, create_app
from server.settings import Settings
from tests.support.mcp_client import modern, modern_headers

pytestmark = pytest.mark.anyio


def lifespan_catalog(events: list[str], *, fail: bool = False) -> Catalog:
    @contextlib.asynccontextmanager
    async def lifespan(catalog: Catalog) -> AsyncIterator[dict[str, str]]:
        events.append(f"enter {catalog.server_info['name']}")
        if fail:
            raise ConnectionError("the database is down")
        try:
            yield {"pool": "open"}
        finally:
            events.append("exit")

    catalog = Catalog("with-lifespan", "1.0.0", lifespan=lifespan)

    @catalog.tool
    def pool() -> str:
        """What the lifespan gave the tools."""
        return str(catalog.lifespan.state["pool"])

    return catalog


def app_for(catalog: Catalog) -> Application:
    return create_app(Settings(_env_file=None, records=["none"]), catalog)


async def call_pool(app: Application) -> str:
    body = modern("tools/call", {"name": "pool", "arguments": {}})
    headers = modern_headers(body, accept="application/json")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post("/mcp", json=body, headers=headers)
    return str(answer.json()["result"]["content"][0]["text"])


async def test_the_app_runs_the_catalogs_lifespan_around_serving() -> None:
    events: list[str] = []
    catalog = lifespan_catalog(events)
    app = app_for(catalog)
    assert catalog.lifespan.state is None
    async with app.lifespan():
        assert events == ["enter with-lifespan"]
        assert await call_pool(app) == "open"  # what it yielded, as a tool sees it
    assert events == ["enter with-lifespan", "exit"]
    assert catalog.lifespan.state is None
    assert not catalog.lifespan.running


async def test_two_apps_serving_one_catalog_share_one_entry() -> None:
    events: list[str] = []
    catalog = lifespan_catalog(events)
    first, second = app_for(catalog), app_for(catalog)
    async with first.lifespan():
        async with second.lifespan():
            assert events == ["enter with-lifespan"]
        assert events == ["enter with-lifespan"]  # the first app still serves
        assert await call_pool(first) == "open"
    assert events == ["enter with-lifespan", "exit"]


async def test_a_failing_lifespan_fails_the_start() -> None:
    events: list[str] = []
    app = app_for(lifespan_catalog(events, fail=True))
    with pytest.raises(ConnectionError, match="database is down"):
        async with app.lifespan():
            pytest.fail("started without its resources")
    assert not app.started
    # And a later start tries again.
    with pytest.raises(ConnectionError):
        async with app.lifespan():
            pass
    assert events == ["enter with-lifespan", "enter with-lifespan"]


async def test_a_catalog_without_one_serves_as_before() -> None:
    catalog = Catalog("plain", "1.0.0")
    app = app_for(catalog)
    async with app.lifespan():
        assert app.started
        assert catalog.lifespan.state is None


async def test_the_apps_lifespan_cannot_run_twice_at_once() -> None:
    app = app_for(Catalog("plain", "1.0.0"))
    async with app.lifespan():
        with pytest.raises(RuntimeError, match="already running"):
            async with app.lifespan():
                pass
        assert app.started  # the running one goes on


async def test_a_host_passes_it_as_its_own_lifespan() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    events: list[str] = []
    app = app_for(lifespan_catalog(events))
    host = Starlette(routes=[Mount("/ai", app=app)], lifespan=app.lifespan)
    async with host.router.lifespan_context(host):
        assert app.started
        assert events == ["enter with-lifespan"]
    assert events == ["enter with-lifespan", "exit"]
    assert not app.started
