"""How an HTTP+SSE session ends everywhere, also when the bus or Redis fails on the way.

The session lives as long as its stream. When the stream ends, :meth:`SseSessions.close` ends
the session here, announces it on the bus and deletes it from the store; while Redis is away
the delete is tried again each second, and the end announced again once it worked, so its
posts are refused (404) rather than accepted into the void. Two bus faults end sessions too
(:mod:`server.state.messages`, ``away`` and ``unsent``): a replica whose bus subscription is
lost closes the streams it holds, whose answers from other replicas could never come; a replica
whose call could not send its message to a stream held elsewhere ends that session here, and so
does one taking a post for a session whose stream no replica holds (the replica died): 404,
as does a call running here for such a session, checked every :data:`WATCH_S`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

from server.errors import InvalidRequest, ServiceUnavailable
from server.legacy.runtime import SessionRuntime
from server.state.messages import publish_ended
from server.transport.legacy import LegacyHttp

# How long a session ended while Redis was away is deleted again; past it, it expires by itself.
DELETE_RETRY_S = 60.0
# How often a call running here checks that its session's stream is still held elsewhere.
WATCH_S = 2.0


class SseSessions:
    """The ending of the HTTP+SSE sessions whose streams this process holds (``held``) or
    whose calls it runs."""

    def __init__(
        self, legacy: LegacyHttp, held: dict[str, SessionRuntime], draining: Callable[[], bool]
    ) -> None:
        self.legacy = legacy
        self.held = held
        self.draining = draining
        self._ending: set[str] = set()
        self._closers: set[asyncio.Task[None]] = set()
        # The calls running here for streams held elsewhere, by session; one task checks them.
        self._watched: dict[str, set[asyncio.Task[Any]]] = {}
        self._watcher: asyncio.Task[None] | None = None
        legacy.sessions.on_bus_away.append(self.bus_away)
        legacy.sessions.on_stream_unreachable.append(self.stream_unreachable)

    def close(self, session_id: str) -> None:
        """The stream ended: so does its session, here and on every replica."""
        self._ending.add(session_id)
        # Each step is taken whatever the one before did: the session's slot, its running
        # calls, the other replicas and the store are all given back.
        try:
            self.legacy.sessions.session_ended(session_id)
        finally:
            try:
                publish_ended(self.legacy.bus, session_id)
            finally:
                closer = asyncio.ensure_future(self._delete(session_id))
                self._closers.add(closer)
                closer.add_done_callback(self._closers.discard)

    async def _delete(self, session_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DELETE_RETRY_S
        try:
            for attempt in itertools.count():
                try:
                    await self.legacy.era.store.delete(session_id)
                except ServiceUnavailable:
                    if self.draining() or loop.time() > deadline:
                        return  # Redis away: it expires by itself
                    await asyncio.sleep(1.0)
                    continue
                if attempt:
                    publish_ended(self.legacy.bus, session_id)  # the first may have been lost
                return
        finally:
            self._ending.discard(session_id)
            # A POST that found the session just before it was deleted made a live part of it
            # again here (and may have started a call): that ends too.
            self.legacy.sessions.session_ended(session_id)

    def bus_away(self) -> None:
        """The bus is lost: a message for a stream held here, from a call running on another
        replica, may be lost, and its client would wait for it for ever. Every stream held
        here closes (its session ends with it), and the client connects again."""
        for runtime in list(self.held.values()):
            if runtime.standalone is not None:
                runtime.standalone.end_connections("bus_lost")

    def watch(self, session_id: str, call: asyncio.Task[Any]) -> None:
        """``call`` runs here for a session whose stream another replica holds: if that
        replica dies, the call stops within :data:`WATCH_S` (not at its end)."""
        calls = self._watched.setdefault(session_id, set())
        calls.add(call)
        call.add_done_callback(partial(self._unwatch, session_id))
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch())

    def _unwatch(self, session_id: str, call: asyncio.Task[Any]) -> None:
        calls = self._watched.get(session_id)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._watched[session_id]
        if not self._watched and self._watcher is not None:
            self._watcher.cancel()  # nothing to check: none sleeps on
            self._watcher = None

    async def _watch(self) -> None:
        while self._watched:
            await asyncio.sleep(WATCH_S)
            for session_id in list(self._watched):
                try:
                    held = await self.legacy.bus.stream_held(session_id)
                except ServiceUnavailable:
                    continue  # Redis away: the stream's own replica closes it (bus_away)
                if not held and session_id in self._watched:
                    self.stream_unreachable(session_id)

    async def check_held(self, session_id: str) -> None:
        """A post's session must have its stream open somewhere: if the replica holding it
        died, the session ends here too, and the post is refused (404)."""
        if session_id in self.held or await self.legacy.bus.stream_held(session_id):
            return
        self.stream_unreachable(session_id)
        raise InvalidRequest(
            "Session not found: its stream is closed; open a new one (GET the SSE endpoint)",
            http_status=404,
        )

    def stream_unreachable(self, session_id: str) -> None:
        """A message of a call running here, for the session's stream on another replica,
        did not go out: that stream is gone or closes (:meth:`bus_away` there), so the
        session ends here too: its calls stop, its posts are refused."""
        if session_id not in self.held and session_id not in self._ending:
            self.close(session_id)
