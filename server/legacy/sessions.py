"""Legacy-era sessions: what one ``initialize`` negotiated, kept between requests.

A :class:`Session` holds only data (version, client info and capabilities, log level, owner),
so a shared store can hold it as is. Its resource subscriptions are kept beside it one URI at a
time (:meth:`SessionStore.subscribe`, capped), read whole only when a GET stream opens, into
its runtime's :class:`LiveSubscriptions`. :class:`SessionStore` is the interface; its flavours
are :class:`~server.state.memory.MemorySessionStore` and
:class:`~server.state.redis.sessions.RedisSessionStore`. Ids are secure random, sessions expire
when idle under a cap, and ended or expired sessions are simply gone (404).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.aio import create_task
from server.errors import InvalidParams, InvalidRequest, ServiceUnavailable

# Ids are made by new_session_id (32 characters today); anything longer or of other characters
# cannot be one, and never reaches a store.
MAX_SESSION_ID_LENGTH = 64
_SESSION_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_SESSION_ID_LENGTH}}}")


class SessionLimit(ServiceUnavailable):
    """The session cap is reached; answered with 503 so clients back off and retry."""


class SubscriptionLimit(InvalidParams):
    """A session holds as many resource subscriptions as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"At most {limit} resource subscriptions per session; unsubscribe from one first"
        )


def new_session_id() -> str:
    # 192 bits; urlsafe base64 is visible ASCII (0x21-0x7E) as the transport requires.
    return secrets.token_urlsafe(24)


def is_session_id(text: str) -> bool:
    """Whether ``text`` could be an id :func:`new_session_id` made."""
    return _SESSION_ID.fullmatch(text) is not None


def checked_session_id(header: str) -> str:
    """The session id an ``Mcp-Session-Id`` header names; a 400 if no session can have it
    (so it never reaches a store, where it would be a Redis key)."""
    session_id = header.strip()
    if not is_session_id(session_id):
        raise InvalidRequest(
            "Bad Request: the Mcp-Session-Id header is not a session id of this server "
            f"(at most {MAX_SESSION_ID_LENGTH} letters, digits, '-' and '_')"
        )
    return session_id


@dataclass
class Session:
    id: str
    protocol_version: str
    client_info: dict[str, Any]
    client_capabilities: dict[str, Any]
    created: float = field(default_factory=time.monotonic)
    last_seen: float = field(default_factory=time.monotonic)
    initialized: bool = False
    log_level: str | None = None
    # The authenticated subject that opened it: nobody else may use it (None: no auth).
    owner: str | None = None


class SessionStore(Protocol):
    async def create(
        self,
        protocol_version: str,
        client_info: dict[str, Any],
        capabilities: dict[str, Any],
        *,
        owner: str | None = None,
    ) -> Session:
        """A new session opened by ``owner``, in one write; raises :class:`SessionLimit`
        when the cap is reached."""

    async def get(self, session_id: str) -> Session | None:
        """The live session (its idle clock restarted), or None if unknown, ended or expired."""

    async def save(self, session: Session) -> None:
        """Persist changes (log level, initialized, owner)."""

    async def subscribe(self, session_id: str, uri: str) -> bool:
        """Add one resource subscription; False if it was there already (or the session is
        gone). Raises :class:`SubscriptionLimit` past the cap."""

    async def unsubscribe(self, session_id: str, uri: str) -> bool:
        """Remove one resource subscription; False if there was none."""

    async def subscriptions(self, session_id: str) -> set[str]:
        """Every resource subscription of the session (read when a GET stream needs them)."""

    async def delete(self, session_id: str) -> bool:
        """End a session; False if it did not exist."""

    async def expire(self) -> list[str]:
        """End every session idle longer than the timeout, unless it is busy in this process
        (which counts as use); the ids that ended."""

    def count(self) -> int: ...


# Reads a session's subscriptions from its store.
Reader = Callable[[], Awaitable[set[str]]]


class LiveSubscriptions:
    """A session's resource subscriptions as this process follows them (its GET stream).

    Read from the store once (:meth:`load`, when a GET stream opens), then kept current by
    deltas (:meth:`apply`): this process's subscribes and unsubscribes, and the other
    replicas' from the bus. A delta that arrives while the store is being read is applied
    again over what was read, so none is lost to the race. After a bus outage :meth:`stale`
    makes the next :meth:`load` read the store again.
    """

    __slots__ = ("_loads", "_reread", "loaded", "uris")

    def __init__(self) -> None:
        self.uris: set[str] = set()
        self.loaded = False
        self._reread: asyncio.Task[None] | None = None  # held: the loop keeps no reference
        # One log per read of the store under way: the deltas that arrived meanwhile.
        self._loads: list[list[tuple[str, bool]]] = []

    def __iter__(self) -> Iterator[str]:
        return iter(self.uris)

    def __len__(self) -> int:
        return len(self.uris)

    def apply(self, uri: str, subscribed: bool) -> None:
        for log in self._loads:
            log.append((uri, subscribed))
        if subscribed:
            self.uris.add(uri)
        else:
            self.uris.discard(uri)

    def stale(self, read: Reader | None = None) -> None:
        """Changes may have been missed: read the store again, at once with ``read`` (a GET
        stream follows them), else at the next :meth:`load`."""
        self.loaded = False
        if read is not None:
            self._reread = create_task(self._read_again(read))

    async def _read_again(self, read: Reader) -> None:
        # Redis away again: they stay stale, and are read at the next resync or GET.
        with contextlib.suppress(ServiceUnavailable):
            await self.load(read)

    async def load(self, read: Reader) -> None:
        """Read the store's set (unless already current), then replay what arrived meanwhile."""
        if self.loaded:
            return
        log: list[tuple[str, bool]] = []
        self._loads.append(log)
        try:
            uris = await read()
        finally:
            self._loads.remove(log)
        for uri, subscribed in log:
            if subscribed:
                uris.add(uri)
            else:
                uris.discard(uri)
        self.uris = uris
        self.loaded = True
