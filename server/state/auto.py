"""The one place that picks the flavour of the state several replicas share.

:func:`state_link` says which: a link to Redis when ``MCP_REDIS_URL`` is set (the Redis flavour,
all in :mod:`server.state.redis`), else None (the in-process one, all in
:mod:`server.state.memory`). The parts are built in the order they depend on each other:
:func:`stream_mirror` first, then (once the app has built the sessions' runtimes over it)
:func:`shared_state`, the session store with its hooks, the bus and the task store. The rest
of the server sees only the interfaces (:class:`~server.legacy.sessions.SessionStore`,
:class:`~server.state.bus.Bus`, :class:`~server.state.mirror.StreamMirror`,
:class:`~server.tasks.store.TaskStore`). What the other replicas announce is applied by
:class:`~server.state.relay.BusRelay`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.errors import ConfigurationError
from server.legacy.sessions import SessionStore
from server.modern.input_required import SpentInMemory, SpentStates
from server.security.shared_limits import SharedLimits
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
    # Request states already used (2026-07-28 input-required rounds are single-use).
    spent: SpentStates = field(default_factory=SpentInMemory)
    # The per-client limits counted across replicas (None in one process).
    limits: SharedLimits | None = None

    def start(self, deliver: Callable[[str, dict[str, Any]], None]) -> None:
        """Begin watching Redis, hearing the other replicas, and copying streams."""
        if self.link is not None:
            self.link.start()
        self.bus.start(deliver)
        self.mirror.start()

    async def close(self) -> None:
        if self.limits is not None:
            await self.limits.close()
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
        return self.link is None or self.link.answering


def state_link(settings: Settings) -> RedisLink | None:
    """The link to Redis when ``MCP_REDIS_URL`` is set (not connected yet), else None: the
    state stays in this process."""
    url = settings.redis_url.get_secret_value()
    if not url:
        return None
    try:
        from server.state.redis.link import RedisLink
    except ImportError as missing:
        raise ConfigurationError(
            "MCP_REDIS_URL is set but the redis package is missing: "
            "pip install redis (from a checkout: pip install -e '.[redis]')"
        ) from missing
    return RedisLink(url, prefix=settings.redis_prefix, timeout_s=settings.redis_timeout_s)


def stream_mirror(settings: Settings, link: RedisLink | None) -> StreamMirror:
    """The copy of each legacy stream other replicas resume from: the first part built, since
    the sessions' runtimes (and through them the session store's hooks) feed it."""
    if link is None:
        return MemoryMirror()
    from server.state.redis.mirror import RedisMirror

    return RedisMirror(
        link, capacity=settings.events_per_stream, ttl_s=settings.session_idle_timeout_s
    )


def shared_state(
    settings: Settings,
    link: RedisLink | None,
    mirror: StreamMirror,
    *,
    local_sessions: Callable[[], list[str]],
    busy: Callable[[str], bool],
    ended: Callable[[str], None],
) -> SharedState:
    """The rest of the flavour ``link`` picked, around ``mirror``: the session store (told of
    this process's sessions by the three hooks), the bus and the task store."""
    if link is None:
        store = MemorySessionStore(
            max_sessions=settings.max_sessions,
            idle_timeout_s=settings.session_idle_timeout_s,
            busy=busy,
            ended=ended,
        )
        return SharedState(store, MemoryBus(), mirror)
    from server.state.redis.bus import RedisBus
    from server.state.redis.limits import RedisLimits
    from server.state.redis.sessions import RedisSessionStore
    from server.state.redis.spent import RedisSpentStates
    from server.state.redis.tasks import RedisTaskStore

    redis_store = RedisSessionStore(
        link,
        max_sessions=settings.max_sessions,
        idle_timeout_s=settings.session_idle_timeout_s,
        local=local_sessions,
        busy=busy,
        ended=ended,
    )
    from server.state.redis.mirror import RedisMirror

    # The mirror's change log: the bus writes it, the mirror reads it for a resume.
    changes = mirror.changes if isinstance(mirror, RedisMirror) else None
    limits = SharedLimits(
        RedisLimits(link),
        rate=settings.rate_limit_rps,
        burst=settings.rate_limit_burst,
        lease_s=settings.limits_lease_s,
        fail_open=settings.quota_on_redis_failure == "open",
        quotas=bool(settings.quotas),
    )
    return SharedState(
        redis_store,
        RedisBus(link, changes),
        mirror,
        link,
        RedisTaskStore(link),
        RedisSpentStates(link),
        limits,
    )
