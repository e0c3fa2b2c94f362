"""This process on the bus: announces its own events, applies the other replicas'.

Catalog changes go to the :class:`~server.hub.Hub`; tasks' news to the
:class:`~server.tasks.service.TaskService`; a session's ending, the client's answers,
its cancellations and its subscription changes go to whatever holds the session here, seen only
through :class:`SessionEvents` (the legacy era implements it,
:class:`~server.legacy.remote.RemoteSessions`), so shared state never depends on the HTTP shell.
"""

from __future__ import annotations

from typing import Any, Protocol, cast, get_args

from server.catalog import Change, ChangeKind
from server.hub import Hub
from server.jsonrpc import Response, is_valid_id
from server.state.bus import Bus
from server.tasks.service import TaskService

_KINDS: frozenset[str] = frozenset(get_args(ChangeKind))
_LIST_KINDS: tuple[ChangeKind, ...] = tuple(
    kind for kind in get_args(ChangeKind) if kind != "resource_updated"
)


class SessionEvents(Protocol):
    """What another replica can tell this one about a legacy session."""

    def session_ended(self, session_id: str) -> None: ...

    def remote_answer(self, session_id: str, response: Response) -> None: ...

    def remote_cancel(self, session_id: str, params: dict[str, Any]) -> None: ...

    def remote_subscription(self, session_id: str, uri: str, subscribed: bool) -> None: ...

    def remote_message(self, session_id: str, payload: bytes) -> None:
        """A message for the session's one stream (the HTTP+SSE transport), if held here."""

    def subscriptions_missed(self) -> None:
        """Subscription changes may have been missed (the bus was away): read them again."""


def announce_subscriptions(bus: Bus, session_id: str, uri: str, subscribed: bool) -> None:
    """A session subscribed to (or unsubscribed from) one resource: a GET stream elsewhere
    follows it. Only the change travels, never the session's whole set. It needs only the
    bus, so the legacy era is given it before the relay (which needs the era's sessions)."""
    bus.publish("subs", {"sid": session_id, "add" if subscribed else "remove": uri})


class BusRelay:
    """Announces this replica's events on the bus and applies the other replicas'."""

    def __init__(
        self, hub: Hub, sessions: SessionEvents, bus: Bus, *, tasks: TaskService | None = None
    ) -> None:
        self.hub = hub
        self.sessions = sessions
        self.bus = bus
        self.tasks = tasks

    def deliver(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "change":
            change_kind, uri = data.get("kind"), data.get("uri")
            # A list change has no uri; a resource update must name one (streams rely on it).
            uri_ok = isinstance(uri, str) if change_kind == "resource_updated" else uri is None
            if isinstance(change_kind, str) and change_kind in _KINDS and uri_ok:
                self.hub.publish(Change(cast(ChangeKind, change_kind), uri))
            return
        if kind == "task":
            # A task's status, or a wake-up or cancellation for its handler if it runs here.
            if self.tasks is not None:
                self.tasks.remote(data)
            return
        if kind == "resync":
            # Changes may have been missed while Redis was away: clients re-read the lists.
            for list_kind in _LIST_KINDS:
                self.hub.publish(Change(list_kind))
            self.sessions.subscriptions_missed()
            return
        session_id = data.get("sid")
        if not isinstance(session_id, str):
            return
        if kind == "ended":
            self.sessions.session_ended(session_id)
        elif kind == "answer":
            request_id = data.get("id")
            error = data.get("error")
            if (
                isinstance(request_id, str | int)
                and is_valid_id(request_id)
                and (error is None or isinstance(error, dict))
            ):
                response = Response(request_id, data.get("result"), error)
                self.sessions.remote_answer(session_id, response)
        elif kind == "sse" and isinstance(data.get("m"), str):
            self.sessions.remote_message(session_id, data["m"].encode())
        elif kind == "cancel" and isinstance(data.get("params"), dict):
            self.sessions.remote_cancel(session_id, data["params"])
        elif kind == "subs":
            added, removed = data.get("add"), data.get("remove")
            if isinstance(added, str):
                self.sessions.remote_subscription(session_id, added, True)
            elif isinstance(removed, str):
                self.sessions.remote_subscription(session_id, removed, False)

    def announce_change(self, change: Change) -> None:
        self.bus.publish("change", {"kind": change.kind, "uri": change.uri})

    def announce_subscriptions(self, session_id: str, uri: str, subscribed: bool) -> None:
        """:func:`announce_subscriptions` on this relay's bus."""
        announce_subscriptions(self.bus, session_id, uri, subscribed)
