"""Shared state for several replicas: which flavour to build, and what to do with bus events.

:func:`shared_state` builds the Redis flavour (link, session store, bus, stream mirror) when
``MCP_REDIS_URL`` is set, else the in-process one; the rest of the server sees only the
interfaces (:class:`~server.sessions.SessionStore`, :class:`~server.bus.Bus`,
:class:`~server.stream_mirror.StreamMirror`). :class:`Replica` applies what the other replicas
announce on the bus to this process: catalog changes to the hub, and a session's ending,
answers, cancellations and subscription changes to what this process holds for the session.

May import: bus, bus_redis, catalog, jsonrpc, legacy_http, liveness, redis_link, sessions,
sessions_redis, settings, stream_mirror, stream_mirror_redis, subscriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast, get_args

from server.bus import Bus, LocalBus
from server.catalog import Change, ChangeKind
from server.jsonrpc import Response, is_valid_id
from server.legacy_http import LegacyHttp
from server.sessions import MemorySessionStore, SessionStore
from server.settings import Settings
from server.stream_mirror import LocalMirror, StreamMirror
from server.subscriptions import Hub

if TYPE_CHECKING:
    from server.redis_link import RedisLink
    from server.sessions import Session

log = logging.getLogger("server.replication")

_KINDS: frozenset[str] = frozenset(get_args(ChangeKind))
_LIST_KINDS: tuple[ChangeKind, ...] = tuple(
    kind for kind in get_args(ChangeKind) if kind != "resource_updated"
)


@dataclass
class SharedState:
    store: SessionStore
    bus: Bus
    mirror: StreamMirror
    link: RedisLink | None = None

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
        return SharedState(store, LocalBus(), LocalMirror())
    try:
        from server.bus_redis import RedisBus
        from server.redis_link import RedisLink
        from server.sessions_redis import RedisSessionStore
        from server.stream_mirror_redis import RedisMirror
    except ImportError as missing:
        raise RuntimeError(
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
    return SharedState(redis_store, RedisBus(link), mirror, link)


class Replica:
    """This process on the bus: announces its own events, applies the other replicas'."""

    def __init__(self, hub: Hub, legacy: LegacyHttp, bus: Bus) -> None:
        self.hub = hub
        self.legacy = legacy
        self.bus = bus

    def deliver(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "change":
            change_kind, uri = data.get("kind"), data.get("uri")
            # A list change has no uri; a resource update must name one (streams rely on it).
            uri_ok = isinstance(uri, str) if change_kind == "resource_updated" else uri is None
            if isinstance(change_kind, str) and change_kind in _KINDS and uri_ok:
                self.hub.publish(Change(cast(ChangeKind, change_kind), uri))
            return
        if kind == "resync":
            # Changes may have been missed while Redis was away: clients re-read the lists.
            for list_kind in _LIST_KINDS:
                self.hub.publish(Change(list_kind))
            return
        session_id = data.get("sid")
        if not isinstance(session_id, str):
            return
        if kind == "ended":
            self.legacy.session_ended(session_id)
            return
        runtime = self.legacy.runtimes.peek(session_id)
        if runtime is None:
            return
        if kind == "answer":
            request_id = data.get("id")
            error = data.get("error")
            if (
                isinstance(request_id, str | int)
                and is_valid_id(request_id)
                and (error is None or isinstance(error, dict))
            ):
                response = Response(request_id, data.get("result"), error)
                self.legacy.era.accept_response(runtime, response)
        elif kind == "cancel" and isinstance(data.get("params"), dict):
            self.legacy.era.cancel(runtime, data["params"])
        elif kind == "subs" and isinstance(data.get("uris"), list):
            runtime.subscriptions = {uri for uri in data["uris"] if isinstance(uri, str)}

    def announce_change(self, change: Change) -> None:
        self.bus.publish("change", {"kind": change.kind, "uri": change.uri})

    def announce_subscriptions(self, session: Session) -> None:
        """A session's resource subscriptions changed: a GET stream elsewhere follows them."""
        self.bus.publish("subs", {"sid": session.id, "uris": sorted(session.subscriptions)})
