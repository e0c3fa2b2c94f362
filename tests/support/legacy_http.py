"""The common ground of the legacy era's HTTP tests (``tests/transport/test_legacy*.py``): their
settings (short keep-alives, retries and grace), an in-process client and a real uvicorn, and the
``http`` and ``net`` client fixtures."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server.app import Application
from server.settings import Settings
from tests.support.live_server import ServerThread

RETRY_MS = 250


def settings(**overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "keepalive_s": 0.2,
        "sse_retry_ms": RETRY_MS,
        "client_request_timeout_s": 3,
        "shutdown_grace_s": 0.5,
    }
    options.update(overrides)
    return Settings(_env_file=None, **options)


def asgi_client(app: Application) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=5
    )


@contextlib.contextmanager
def running(app: Application, **overrides: Any) -> Iterator[ServerThread]:
    """``app`` under a real uvicorn in a thread, stopped on exit unless a test stopped it."""
    live = ServerThread(app, graceful_timeout=1, **overrides).start()
    try:
        yield live
    finally:
        if live.thread.is_alive():
            live.stop()


# The client fixtures, over the importing module's own ``app`` and ``live`` fixtures: a module
# takes them by name (``http = legacy_http.http``).


@pytest.fixture
async def http(app: Application) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app) as client:
        yield client


@pytest.fixture
async def net(live: ServerThread) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.url, timeout=5) as client:
        yield client
