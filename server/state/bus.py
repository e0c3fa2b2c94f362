"""The notification bus: what every replica must hear about, and how it gets there.

One process handles an event itself first (its hub, its sessions), then announces it with
:meth:`Bus.publish` so the other replicas do their part: ``change`` (a catalog change for their
streams), ``ended`` (release a session), ``answer`` and ``cancel`` (for a call waiting or
running there), ``subs`` (a session's resource subscription), ``sse`` (a message for the
HTTP+SSE stream they hold), ``task`` (wake or cancel a handler, or a task's new status).
:class:`~server.state.memory.MemoryBus` is the one-process default;
:class:`~server.state.redis.bus.RedisBus` publishes on one channel without blocking the
caller, in order. Pub/sub keeps nothing for a subscriber that is away, so after an outage the
bus delivers ``resync`` locally and streams re-read what they may have missed.
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

    async def close(self) -> None: ...

    def status(self) -> dict[str, Any]: ...
