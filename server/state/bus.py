"""The notification bus: what every replica must hear about, and how it gets there.

One process handles an event itself first (its hub, its sessions), then announces it with
:meth:`Bus.publish` so the other replicas do their part; each kind's publisher and decoder
are in :mod:`server.state.messages` (``change``, ``ended``, ``answer``, heard only by the
replica that asked, ``cancel``, ``subs``, ``sse``, heard only by the replica holding that
stream (:meth:`Bus.hold`), and ``task``); :meth:`Bus.send` also says if anyone heard it.
Three kinds never travel, delivered by a bus to its own replica: ``away`` (its subscription is
lost; HTTP+SSE streams held here close), ``resync`` (subscribed again: streams re-read what
they may have missed) and ``unsent`` (a stream message for a session held elsewhere did not go
out: the session ends). :class:`~server.state.memory.MemoryBus` is the one-process default;
:class:`~server.state.redis.bus.RedisBus` publishes without blocking the caller, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Deliver = Callable[[str, dict[str, Any]], None]


class Bus(Protocol):
    def publish(self, kind: str, data: dict[str, Any]) -> None:
        """Announce an event to the other replicas; never blocks, never raises."""

    async def send(self, kind: str, data: dict[str, Any]) -> bool | None:
        """:meth:`publish`, waiting (at most ``MCP_REDIS_TIMEOUT_S``) to learn whether any
        replica heard it: None with no other replica (one process); ServiceUnavailable if it
        did not go out."""

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
