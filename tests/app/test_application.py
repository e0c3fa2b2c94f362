"""server.app.application: the parts built in the order they depend on each other, the
lifecycle and the router as objects the application owns, and what it forwards to them.

No sockets: the app is built and, where it matters, its lifespan entered by hand.
"""

from __future__ import annotations

from typing import Any

import pytest
import uvicorn

from server.app import NOT_STARTED, Application, create_app
from server.app.application import sink_options
from server.app.lifecycle import Lifecycle
from server.app.routing import Router
from server.asgi import ASGIMessage as Message
from server.asgi import Scope
from server.catalog import Catalog
from server.legacy.eventstream import EventStream
from server.records.sinks import SinkOptions
from server.serving.server import Server
from server.settings import Settings
from server.state.memory import MemoryMirror

pytestmark = pytest.mark.anyio


@pytest.fixture
def app() -> Application:
    return make_app()


def test_the_lifecycle_and_the_router_are_objects_of_their_own(app: Application) -> None:
    assert isinstance(app.lifecycle, Lifecycle)
    assert isinstance(app.router, Router)
    assert not isinstance(app, Lifecycle | Router)
    # The router checks the same lifecycle the application forwards to.
    assert app.router.lifecycle is app.lifecycle
    assert app.entry is app.router.entry
    assert app.starlette is app.router.starlette


def make_app() -> Application:
    return create_app(
        Settings(_env_file=None, records=["none"], redis_url=""), Catalog("app-test", "1.0.0")
    )


def test_the_sessions_runtimes_feed_the_mirror_built_before_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracked: list[tuple[str, EventStream]] = []
    monkeypatch.setattr(
        MemoryMirror, "track", lambda self, session_id, stream: tracked.append((session_id, stream))
    )
    app = make_app()
    stream = app.runtimes.get("s1").open_stream()
    assert tracked == [("s1", stream)]


async def test_the_stores_hooks_are_the_runtimes_and_the_gate(app: Application) -> None:
    store: Any = app.shared.store
    idle = await store.create("2025-11-25", {}, {})
    busy = await store.create("2025-11-25", {}, {})
    app.runtimes.get(idle.id)
    app.runtimes.get(busy.id).inflight["req-1"] = object()  # type: ignore[assignment]
    idle.last_seen -= 10**6
    busy.last_seen -= 10**6
    # The busy one waits (runtimes.busy); the idle one ends and its runtime is released.
    assert await store.expire() == [idle.id]
    assert app.runtimes.peek(idle.id) is None
    assert app.runtimes.peek(busy.id) is not None


def test_the_era_announces_subscriptions_on_the_bus_without_the_relay(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    published: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        app.shared.bus, "publish", lambda kind, data: published.append((kind, data))
    )
    on_subscriptions = app.legacy.era.on_subscriptions
    assert on_subscriptions is not None
    on_subscriptions("s1", "file:///a", True)
    on_subscriptions("s1", "file:///a", False)
    assert published == [
        ("subs", {"sid": "s1", "add": "file:///a"}),
        ("subs", {"sid": "s1", "remove": "file:///a"}),
    ]


async def test_lifespan_ready_and_started_are_the_lifecycles(app: Application) -> None:
    assert (app.started, app.ready) == (False, False)
    async with app.lifespan():
        assert (app.started, app.ready) == (True, True)
        assert (app.lifecycle.started, app.lifecycle.ready) == (True, True)
        app.begin_shutdown(drain_timeout_s=5)
        # Draining: still started, no longer ready.
        assert (app.started, app.ready) == (True, False)
        assert app.lifecycle.ready is False
    assert (app.started, app.ready) == (False, False)


def test_the_server_tells_the_lifecycle_it_calls_begin_shutdown(app: Application) -> None:
    assert app.lifecycle.server_tells_shutdown is False
    # No logging configured (server_for's would outlast the test).
    Server(uvicorn.Config(app.entry, log_config=None), app)
    assert app.lifecycle.server_tells_shutdown is True


async def test_before_the_lifespan_the_router_answers_503(app: Application) -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    # "state" in the scope: a server that runs lifespans, and did not run this one.
    scope: Scope = {
        "type": "http",
        "method": "GET",
        "path": "/healthz",
        "headers": [],
        "query_string": b"",
        "state": {},
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 503
    assert NOT_STARTED.encode() in sent[1]["body"]


def test_the_record_sinks_are_built_from_one_options_object_made_from_the_settings() -> None:
    settings = Settings(
        _env_file=None,
        records=["file", "redis"],
        records_file="/tmp/x.jsonl",
        records_max_bytes=1000,
        records_backups=2,
        records_compress=False,
        redis_url="redis://127.0.0.1:1/0",
        state_secret="s" * 32,
        redis_prefix="pre",
        records_redis_stream="recs",
        records_redis_maxlen=5000,
        redis_timeout_s=0.5,
    )
    assert sink_options(settings) == SinkOptions(
        names=["file", "redis"],
        path="/tmp/x.jsonl",
        max_bytes=1000,
        backups=2,
        compress=False,
        redis_url="redis://127.0.0.1:1/0",
        redis_key="pre:recs",
        redis_maxlen=5000,
        redis_timeout_s=0.5,
    )


def test_mcp_retire_and_mcp_quotas_are_parsed_once_by_the_settings_and_used_as_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import server.app.application
    import server.retirement.plan
    import server.settings
    import server.settings_checks

    calls: list[str] = []

    def counted(name: str, parse: Any) -> Any:
        def parsing(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return parse(*args, **kwargs)

        return parsing

    plan, quotas = server.retirement.plan.parse_plan, server.settings_checks.quotas
    monkeypatch.setattr(server.settings, "parse_plan", counted("retire", plan))
    monkeypatch.setattr(server.settings_checks, "quotas", counted("quotas", quotas))
    # Where the app parsed them again before (gone now, so raising=False).
    application = server.app.application
    monkeypatch.setattr(application, "parse_plan", counted("retire", plan), raising=False)
    monkeypatch.setattr(application, "quota_entries", counted("quotas", quotas), raising=False)
    settings = Settings(
        _env_file=None,
        records=["none"],
        retire='[{"item": "sse", "sunset": "2099-01-01"}]',
        quotas='[{"tenant": "acme", "tool": "echo", "limit": 5, "per": "1m"}]',
    )
    app = create_app(settings, Catalog("parsed-once", "1.0.0"))
    assert sorted(calls) == ["quotas", "retire"]
    assert app.retiring is not None
    assert app.retiring.plan is settings.retire_plan
    assert app.legacy.quotas is not None
    assert [quota.limit for quota in app.legacy.quotas.quotas] == [5]
