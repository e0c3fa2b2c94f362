"""The drain deadline: calls still running when it passes end with a JSON-RPC error.

The app arms its deadline in ``begin_shutdown``; when it passes (``end_calls``) every call whose
handler is still waiting, in either era, ends with -32000 "Server shutting down": a 503 JSON
answer, or an error event on a response that already streams. uvicorn's own graceful timeout
(``server_for``) comes ``MCP_SHUTDOWN_GRACE_S`` later. These run in-process (httpx's
ASGITransport, the lifespan driven by hand); tests/e2e/test_shutdown.py does it to a real
process with SIGTERM.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pydantic
import pytest

from server import Catalog, Context
from server.app import Application, create_app
from server.serving import server_for, shutdown_deadlines
from server.settings import Settings
from tests.support.mcp_client import (
    BOTH,
    LEGACY_VERSION,
    legacy,
    legacy_headers,
    messages_of,
    modern,
    modern_headers,
)

pytestmark = pytest.mark.anyio

SHUTTING_DOWN = {"code": -32000, "message": "Server shutting down"}


def settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, records=["none"], **overrides)


def drain_catalog(waiting: asyncio.Event) -> Catalog:
    catalog = Catalog("drain-test", "1.0.0")

    @catalog.tool
    async def wait_here(ctx: Context) -> str:
        """Reports progress once, then waits far longer than any test."""
        await ctx.report_progress(1, 2, "waiting")
        waiting.set()
        await asyncio.sleep(60)
        return "never"

    @catalog.tool
    def quick() -> str:
        """Answers at once."""
        return "done"

    return catalog


@pytest.fixture
async def waiting() -> asyncio.Event:
    return asyncio.Event()


@pytest.fixture
async def app(waiting: asyncio.Event) -> AsyncIterator[Application]:
    application = create_app(settings(drain_timeout_s=30), drain_catalog(waiting))
    async with application.lifespan(application.starlette):
        yield application


@pytest.fixture
async def http(app: Application) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


def modern_call(name: str, accept: str, **meta: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body = modern("tools/call", {"name": name, "arguments": {}}, f"{name}-1", **meta)
    headers = modern_headers(body, accept)
    return body, headers


async def legacy_call(
    http: httpx.AsyncClient, name: str, accept: str, **meta: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """A legacy session opened, and a call to ``name`` in it."""
    initialize = legacy(
        "initialize",
        {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t"}},
        "init",
    )
    opened = await http.post("/mcp", json=initialize, headers={"Accept": BOTH})
    assert opened.status_code == 200, opened.text
    headers = legacy_headers(opened.headers["mcp-session-id"], LEGACY_VERSION, accept)
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if meta:
        params["_meta"] = meta
    return legacy("tools/call", params, f"{name}-1"), headers


async def answered_after_end_calls(
    http: httpx.AsyncClient,
    app: Application,
    waiting: asyncio.Event,
    call: tuple[dict[str, Any], dict[str, str]],
) -> httpx.Response:
    body, headers = call
    pending = asyncio.create_task(http.post("/mcp", json=body, headers=headers))
    await asyncio.wait_for(waiting.wait(), 5)
    assert not pending.done()
    assert app.lifecycle.end_calls() == 1
    return await asyncio.wait_for(pending, 5)


# -- in-process: each era, JSON and SSE ----------------------------------------------------------


async def test_a_modern_call_answered_as_json_gets_a_503_error(
    http: httpx.AsyncClient, app: Application, waiting: asyncio.Event
) -> None:
    call = modern_call("wait_here", "application/json")
    response = await answered_after_end_calls(http, app, waiting, call)
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"jsonrpc": "2.0", "id": "wait_here-1", "error": SHUTTING_DOWN}


async def test_a_modern_call_that_streams_ends_with_an_error_event(
    http: httpx.AsyncClient, app: Application, waiting: asyncio.Event
) -> None:
    call = modern_call("wait_here", BOTH, progressToken="p")
    response = await answered_after_end_calls(http, app, waiting, call)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    progress, final = messages_of(response.text)
    assert progress["method"] == "notifications/progress"
    assert final == {"jsonrpc": "2.0", "id": "wait_here-1", "error": SHUTTING_DOWN}


async def test_a_legacy_call_answered_as_json_gets_a_503_error(
    http: httpx.AsyncClient, app: Application, waiting: asyncio.Event
) -> None:
    call = await legacy_call(http, "wait_here", "application/json")
    response = await answered_after_end_calls(http, app, waiting, call)
    assert response.status_code == 503
    assert response.json() == {"jsonrpc": "2.0", "id": "wait_here-1", "error": SHUTTING_DOWN}


async def test_a_legacy_call_that_streams_ends_with_an_error_event(
    http: httpx.AsyncClient, app: Application, waiting: asyncio.Event
) -> None:
    call = await legacy_call(http, "wait_here", BOTH, progressToken="p")
    response = await answered_after_end_calls(http, app, waiting, call)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = messages_of(response.text)
    assert messages[-1] == {"jsonrpc": "2.0", "id": "wait_here-1", "error": SHUTTING_DOWN}
    assert any(message.get("method") == "notifications/progress" for message in messages)


async def test_only_calls_still_waiting_are_ended(
    http: httpx.AsyncClient, app: Application
) -> None:
    body, headers = modern_call("quick", "application/json")
    answered = await http.post("/mcp", json=body, headers=headers)
    assert answered.json()["result"]["content"][0]["text"] == "done"
    # Nothing is left waiting once calls have answered (none was ever known, here).
    assert app.lifecycle.end_calls() == 0


async def test_begin_shutdown_arms_the_drain_deadline(waiting: asyncio.Event) -> None:
    application = create_app(settings(drain_timeout_s=0.2), drain_catalog(waiting))
    async with application.lifespan(application.starlette):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            body, headers = modern_call("wait_here", "application/json")
            pending = asyncio.create_task(http.post("/mcp", json=body, headers=headers))
            await asyncio.wait_for(waiting.wait(), 5)
            application.begin_shutdown()
            application.begin_shutdown()  # again: the deadline stays where it was
            response = await asyncio.wait_for(pending, 5)
    assert response.status_code == 503
    assert response.json()["error"] == SHUTTING_DOWN


# -- the two deadlines ---------------------------------------------------------------------------


def test_uvicorns_deadline_comes_the_grace_after_the_apps() -> None:
    configured = settings(drain_timeout_s=10, shutdown_grace_s=2.5)
    assert shutdown_deadlines(configured) == (10, 12.5)
    server = server_for(create_app(configured, Catalog()))
    assert server.drain_timeout_s == 10
    assert server.config.timeout_graceful_shutdown == 12.5


def test_an_explicit_uvicorn_timeout_moves_the_apps_deadline_before_it() -> None:
    configured = settings(drain_timeout_s=10, shutdown_grace_s=2)
    assert shutdown_deadlines(configured, 30) == (10, 30)  # room enough: unchanged
    assert shutdown_deadlines(configured, 5) == (3, 5)
    assert shutdown_deadlines(configured, 1) == (0, 1)  # shorter than the grace: at once
    server = server_for(create_app(configured, Catalog()), timeout_graceful_shutdown=5)
    assert (server.drain_timeout_s, server.config.timeout_graceful_shutdown) == (3, 5)


def test_no_grace_between_the_deadlines_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="shutdown_grace_s"):
        settings(shutdown_grace_s=0)
