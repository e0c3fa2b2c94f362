"""This process on the bus: announces its own events, applies the other replicas'.

The messages themselves (each kind's publisher and decoder) are declared in
:mod:`server.state.messages`; the relay holds what they are applied to: catalog changes go to
the :class:`~server.hub.Hub`, tasks' news to the :class:`~server.tasks.service.TaskService`, a
legacy session's events to whatever holds the session here, seen only through
:class:`~server.state.messages.SessionEvents` (the legacy era implements it,
:class:`~server.legacy.remote.RemoteSessions`).
"""

from __future__ import annotations

from typing import Any

from server.catalog import Change
from server.hub import Hub
from server.state.bus import Bus
from server.state.messages import (
    Receivers,
    SessionEvents,
    decode,
    publish_change,
)
from server.tasks.service import TaskService

__all__ = ["BusRelay", "SessionEvents"]


class BusRelay:
    """Announces this replica's events on the bus and applies the other replicas'."""

    def __init__(
        self, hub: Hub, sessions: SessionEvents, bus: Bus, *, tasks: TaskService | None = None
    ) -> None:
        self.hub = hub
        self.sessions = sessions
        self.bus = bus
        self.tasks = tasks
        self.receivers = Receivers(hub, sessions, tasks)

    def deliver(self, kind: str, data: dict[str, Any]) -> None:
        decode(self.receivers, kind, data)

    def announce_change(self, change: Change) -> None:
        publish_change(self.bus, change)
