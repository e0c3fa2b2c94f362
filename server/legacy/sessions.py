"""Legacy-era sessions: what one ``initialize`` negotiated, kept between requests.

A :class:`Session` holds only data (version, client info and capabilities, log level,
resource subscriptions), so a shared store (Redis, later) can hold it as is. The
:class:`SessionStore` interface is what the legacy era uses; :class:`MemorySessionStore` is
the in-process default: ids from a secure random source (visible ASCII only), idle expiry,
and a cap on how many sessions exist at once. Ended and expired sessions are simply gone, so
the era answers 404 for both.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.errors import ServiceUnavailable


class SessionLimit(ServiceUnavailable):
    """The session cap is reached; answered with 503 so clients back off and retry."""


def new_session_id() -> str:
    # 192 bits; urlsafe base64 is visible ASCII (0x21-0x7E) as the transport requires.
    return secrets.token_urlsafe(24)


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
    subscriptions: set[str] = field(default_factory=set)
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
        """Persist changes (log level, subscriptions, initialized)."""

    async def delete(self, session_id: str) -> bool:
        """End a session; False if it did not exist."""

    async def expire(self) -> list[str]:
        """End every session idle longer than the timeout, unless it is busy in this process
        (which counts as use); the ids that ended."""

    def count(self) -> int: ...


def _never(session_id: str) -> bool:
    return False


def _ignore(session_id: str) -> None:
    return None


class MemorySessionStore:
    """Sessions in this process, least recently used first.

    ``busy`` says whether a session still has work or a stream open here (then it is not
    idle, whatever its clock says); ``ended`` hears of every session that ends by expiry, so
    what the process holds for it is released too.
    """

    def __init__(
        self,
        *,
        max_sessions: int,
        idle_timeout_s: float,
        busy: Callable[[str], bool] = _never,
        ended: Callable[[str], None] = _ignore,
    ) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._busy = busy
        self._ended = ended
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    async def create(
        self,
        protocol_version: str,
        client_info: dict[str, Any],
        capabilities: dict[str, Any],
        *,
        owner: str | None = None,
    ) -> Session:
        if len(self._sessions) >= self.max_sessions:
            await self.expire()  # idle ones make room first; busy ones are kept
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimit(
                f"Too many sessions ({self.max_sessions}); end unused sessions or retry later"
            )
        session = Session(new_session_id(), protocol_version, client_info, capabilities)
        session.owner = owner
        self._sessions[session.id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self.idle_timeout_s and not self._busy(session_id):
            del self._sessions[session_id]
            self._ended(session_id)
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    async def save(self, session: Session) -> None:
        if session.id in self._sessions:
            self._sessions[session.id] = session

    async def delete(self, session_id: str) -> bool:
        return self._sessions.pop(session_id, None) is not None

    async def expire(self) -> list[str]:
        now = time.monotonic()
        cutoff = now - self.idle_timeout_s
        ended = []
        # Least recently used first: stop at the first session used within the timeout.
        for session_id, session in list(self._sessions.items()):
            if session.last_seen > cutoff:
                break
            if self._busy(session_id):
                session.last_seen = now
                self._sessions.move_to_end(session_id)
                continue
            del self._sessions[session_id]
            ended.append(session_id)
            self._ended(session_id)
        return ended

    def count(self) -> int:
        return len(self._sessions)
