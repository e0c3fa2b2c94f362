"""server.state: which shared-state flavour is built from the settings.

The Redis flavour uses the session's ``redis_server``; what bus messages do here is in
``tests/state/test_relay.py``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from server.settings import Settings
from server.state import SharedState
from server.state.auto import shared_state, state_link, stream_mirror
from server.state.memory import MemoryBus, MemoryMirror, MemorySessionStore
from server.state.redis.bus import RedisBus
from server.state.redis.link import RedisLink
from server.state.redis.mirror import RedisMirror
from server.state.redis.sessions import RedisSessionStore
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = pytest.mark.anyio


def settings(**overrides: Any) -> Settings:
    overrides.setdefault("redis_url", "")
    return Settings(_env_file=None, **overrides)


class Calls:
    """The three hooks shared_state gives the session store."""

    def __init__(self, local: list[str] | None = None) -> None:
        self.local = local or []
        self.ended: list[str] = []

    def build(self, config: Settings) -> SharedState:
        link = state_link(config)
        return shared_state(
            config,
            link,
            stream_mirror(config, link),
            local_sessions=lambda: self.local,
            busy=lambda _: False,
            ended=self.ended.append,
        )


# -- shared_state -------------------------------------------------------------------------------


async def test_without_a_url_the_state_is_this_process() -> None:
    calls = Calls()
    shared = calls.build(settings(max_sessions=7, session_idle_timeout_s=12.0))
    assert isinstance(shared.store, MemorySessionStore)
    assert isinstance(shared.bus, MemoryBus)
    assert isinstance(shared.mirror, MemoryMirror)
    assert shared.link is None
    assert shared.status() is None
    assert shared.healthy is True
    assert shared.store.max_sessions == 7
    assert shared.store.idle_timeout_s == 12.0
    # The store reports what expires to the ``ended`` it was given.
    session = await shared.store.create("2025-11-25", {}, {})
    session.last_seen -= 60
    assert await shared.store.expire() == [session.id]
    assert calls.ended == [session.id]


async def test_with_a_url_the_state_is_in_redis(redis_server: RedisServer) -> None:
    prefix = fresh_prefix()
    calls = Calls(local=["gone-elsewhere"])
    shared = calls.build(
        settings(
            redis_url=redis_server.url,
            redis_prefix=prefix,
            redis_timeout_s=0.5,
            state_secret="one secret for every replica",
            max_sessions=7,
            session_idle_timeout_s=12.0,
            events_per_stream=9,
        )
    )
    link = shared.link
    assert isinstance(link, RedisLink)
    try:
        assert isinstance(shared.store, RedisSessionStore)
        assert isinstance(shared.bus, RedisBus)
        assert isinstance(shared.mirror, RedisMirror)
        assert (link.prefix, link.timeout_s) == (prefix, 0.5)
        assert shared.store.max_sessions == 7
        assert shared.store.idle_timeout_s == 12.0
        assert shared.mirror.capacity == 9
        assert shared.bus.channel == f"{prefix}:bus"
        # Not connected yet: readiness says so.
        assert shared.healthy is False
        status = shared.status()
        assert status is not None
        assert status["connected"] is False
        assert status["error"] == "not connected yet"
        assert status["bus"]["kind"] == "redis"
        # The sweep asks Redis about this process's sessions and reports the ones gone.
        assert await shared.store.expire() == ["gone-elsewhere"]
        assert calls.ended == ["gone-elsewhere"]
        assert shared.healthy is True
        assert shared.status() == {"connected": True, "bus": shared.bus.status()}
    finally:
        await link.close()


def test_a_url_without_a_shared_secret_is_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="MCP_STATE_SECRET"):
        settings(redis_url=redis_server.url)


NO_REDIS = r"""
import sys
sys.modules["redis"] = None  # as if the optional redis extra were not installed
import asyncio, httpx
from server.app import create_app
from server.settings import Settings

async def main():
    app = create_app(Settings(_env_file=None, records=["none"]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post("/mcp", json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "x", "version": "1"}}},
            headers={"Accept": "application/json, text/event-stream"})
        print(answer.status_code)
    try:
        create_app(Settings(_env_file=None, records=["none"], redis_url="redis://127.0.0.1:1/0",
                            state_secret="0123456789abcdef0123"))
    except ValueError as refused:  # a ConfigurationError
        print("refused:", refused)

asyncio.run(main())
print("redis imported:", any(name == "redis" or name.startswith("redis.") for name in sys.modules
                             if sys.modules[name] is not None))
"""


def test_one_process_needs_no_redis_package_and_a_redis_url_without_it_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_REDIS], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "200"
    assert lines[1].startswith("refused: MCP_REDIS_URL is set but the redis package is missing")
    assert lines[2] == "redis imported: False"
