"""How an HTTP+SSE session ends everywhere, also when the bus or Redis fails on the way.

The session lives as long as its stream. When the stream ends, :meth:`SseSessions.close` ends
the session here, announces it on the bus and deletes it from the store; while Redis is away
the delete is tried again each second, and the end announced again once it worked, so its
posts are refused (404) rather than accepted into the void. Two bus faults end sessions too
(:mod:`server.state.messages`, ``away`` and ``unsent``): a replica whose bus subscription is
lost closes the streams it holds, whose answers from other replicas could never come; a replica
whose call could not send its message to a stream held elsewhere ends that session here.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from server.errors import ServiceUnavailable
from server.legacy.runtime import SessionRuntime
from server.state.messages import publish_ended
from server.transport.legacy import LegacyHttp

# How long a session ended while Redis was away is deleted again; past it, it expires by itself.
DELETE_RETRY_S = 60.0


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
        legacy.sessions.on_bus_away.append(self.bus_away)
        legacy.sessions.on_stream_unreachable.append(self.stream_unreachable)

    def close(self, session_id: str) -> None:
        """The stream ended: so does its session, here and on every replica."""
        self._ending.add(session_id)
        self.legacy.sessions.session_ended(session_id)
        publish_ended(self.legacy.bus, session_id)
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

    def bus_away(self) -> None:
        """The bus is lost: a message for a stream held here, from a call running on another
        replica, may be lost, and its client would wait for it for ever. Every stream held
        here closes (its session ends with it), and the client connects again."""
        for runtime in list(self.held.values()):
            if runtime.standalone is not None:
                runtime.standalone.end_connections("bus_lost")

    def stream_unreachable(self, session_id: str) -> None:
        """A message of a call running here, for the session's stream on another replica,
        did not go out: that stream is gone or closes (:meth:`bus_away` there), so the
        session ends here too: its calls stop, its posts are refused."""
        if session_id not in self.held and session_id not in self._ending:
            self.close(session_id)
