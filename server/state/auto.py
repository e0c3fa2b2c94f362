"""The one place that picks the flavour of the state several replicas share.

:func:`shared_state` builds the Redis flavour (link, session store, bus, stream mirror, task
store, all in :mod:`server.state.redis`) when ``MCP_REDIS_URL`` is set, else the in-process one
(all in :mod:`server.state.memory`); the rest of the server sees only the interfaces
(:class:`~server.legacy.sessions.SessionStore`, :class:`~server.state.bus.Bus`,
:class:`~server.state.mirror.StreamMirror`, :class:`~server.tasks.store.TaskStore`). What the
other replicas announce is applied by :class:`~server.state.relay.BusRelay`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.errors import ConfigurationError
from server.legacy.sessions import SessionStore
from server.settings import Settings
from server.state.bus import Bus
from server.state.memory import MemoryBus, MemoryMirror, MemorySessionStore, MemoryTaskStore
from server.state.mirror import StreamMirror
from server.tasks.store import TaskStore

if TYPE_CHECKING:
    from server.state.redis.link import RedisLink

log = logging.getLogger(__name__)


@dataclass
class SharedState:
    store: SessionStore
    bus: Bus
    mirror: StreamMirror
    link: RedisLink | None = None
    tasks: TaskStore = field(default_factory=MemoryTaskStore)

    def start(self, deliver: Callable[[str, dict[str, Any]], None]) -> None:
        """Begin watching Redis, hearing the other replicas, and copying streams."""
        if self.link is not None:
            self.link.start()
        self.bus.start(deliver)
        self.mirror.start()

    async def close(self) -> None:
        await self.bus.close()
        await self.mirror.close()
        if self.link is not None:
            await self.link.close()

    def status(self) -> dict[str, Any] | None:
        """Readiness detail: None in one process; Redis's state and the bus's otherwise."""
        if self.link is None:
            return None
        return {**self.link.status(), "bus": self.bus.status()}

    @property
    def healthy(self) -> bool:
        return self.link is None or self.link.connected


def shared_state(
    settings: Settings,
    *,
    local_sessions: Callable[[], list[str]],
    busy: Callable[[str], bool],
    ended: Callable[[str], None],
) -> SharedState:
    url = settings.redis_url.get_secret_value()
    if not url:
        store = MemorySessionStore(
            max_sessions=settings.max_sessions,
            idle_timeout_s=settings.session_idle_timeout_s,
            busy=busy,
            ended=ended,
        )
        return SharedState(store, MemoryBus(), MemoryMirror())
    try:
        from server.state.redis.bus import RedisBus
        from server.state.redis.link import RedisLink
        from server.state.redis.mirror import RedisMirror
        from server.state.redis.sessions import RedisSessionStore
        from server.state.redis.tasks import RedisTaskStore
    except ImportError as missing:
        raise ConfigurationError(
            "MCP_REDIS_URL is set but the redis package is missing: "
            "pip install 'mcp-http-server[redis]'"
        ) from missing
    link = RedisLink(url, prefix=settings.redis_prefix, timeout_s=settings.redis_timeout_s)
    redis_store = RedisSessionStore(
        link,
        max_sessions=settings.max_sessions,
        idle_timeout_s=settings.session_idle_timeout_s,
        local=local_sessions,
        busy=busy,
        ended=ended,
    )
    mirror = RedisMirror(
        link, capacity=settings.events_per_stream, ttl_s=settings.session_idle_timeout_s
    )
    return SharedState(redis_store, RedisBus(link), mirror, link, RedisTaskStore(link))
