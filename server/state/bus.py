"""The notification bus: what every replica must hear about, and how it gets there.

One process handles an event itself first (its hub, its sessions), then announces it with
:meth:`Bus.publish` so the other replicas can do their part (each kind's publisher and decoder
are in :mod:`server.state.messages`):

======== ======================= ==================================================
kind     data                    the other replicas ...
======== ======================= ==================================================
change   kind, uri               offer the catalog change to their streams
ended    sid                     release what they hold for that session
answer   sid, id, result / error hand a client's answer to the handler waiting there
cancel   sid, params             cancel the call if it runs there
subs     sid, add / remove (uri) add or remove one resource subscription of a session
sse      sid, m (a message)      send it on the session's HTTP+SSE stream: only the replica
                                 that holds it hears it (see :meth:`Bus.hold`)
task     op, id / record         wake (answers came) or cancel a task's handler running
                                 there; ``status``: a task's new state, for their streams
======== ======================= ==================================================

Three kinds never travel: a bus delivers them to its own replica. ``away``: its subscription
is lost (what others send meanwhile is lost; HTTP+SSE streams held here close). ``resync``:
subscribed again. ``unsent`` (k, sid): a stream message for a session held elsewhere did not
go out (the session ends here).

:class:`~server.state.memory.MemoryBus` is the one-process default: there is nobody to tell.
:class:`~server.state.redis.bus.RedisBus` publishes on one Redis channel and delivers what
other replicas publish (its own messages come back too and are skipped). Publishing never
blocks the caller: messages queue (bounded) for one publisher task that keeps their order.
Pub/sub keeps nothing for a subscriber that is away, so after an outage the bus delivers
``resync`` locally: list streams are told their lists changed, and clients re-read what they
may have missed; GET streams re-read their session's subscriptions from the store.

The Redis flavour is :mod:`server.state.redis.bus`, imported only when ``MCP_REDIS_URL`` is set, so
the ``redis`` package stays an optional extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Deliver = Callable[[str, dict[str, Any]], None]


class Bus(Protocol):
    def publish(self, kind: str, data: dict[str, Any]) -> None:
        """Announce an event to the other replicas; never blocks, never raises."""

    def start(self, deliver: Deliver) -> None:
        """Begin delivering other replicas' events to ``deliver`` (called on the loop)."""

    async def hold(self, session_id: str) -> None:
        """This replica holds the session's HTTP+SSE stream: its ``sse`` messages come here
        from now on (returns once they would; ServiceUnavailable if the bus does not answer)."""

    def release(self, session_id: str) -> None:
        """The stream is no longer held here."""

    async def stream_held(self, session_id: str) -> bool:
        """Whether any replica holds the session's HTTP+SSE stream (ServiceUnavailable if
        that cannot be known)."""

    async def close(self) -> None: ...

    def status(self) -> dict[str, Any]: ...
