"""The replicas' bus protocol: every message kind, declared once with its publisher and decoder.

A kind's publisher (``publish_<kind>(bus, ...)``) is the only place its data is shaped, and
its decoder (in :data:`DECODERS`) the only place it is read back, checked field by field: a
malformed message from another replica (or an older version) is ignored. ``task`` is published
by the task service through its ``announce`` hook; ``resync``, ``away`` and ``unsent`` are
delivered by a bus to its own replica only (back after an outage, subscription lost, a
session's stream message that did not go out).
What the decoders apply a message to is :class:`Receivers`; the legacy sessions are seen only
through :class:`SessionEvents`, so shared state never depends on the HTTP shell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast, get_args

from server.catalog import Change, ChangeKind
from server.errors import InvalidRequest
from server.hub import Hub
from server.jsonrpc import Response, is_valid_id
from server.state.bus import Bus
from server.tasks.service import TaskService

_CHANGE_KINDS: frozenset[str] = frozenset(get_args(ChangeKind))
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

    def subscriptions_missed(self, updates_unknown: bool = False) -> None:
        """Subscription changes may have been missed (the bus was away): read them again; with
        ``updates_unknown`` (no log says which), tell each GET stream here that every resource
        it follows may have been updated."""

    def bus_away(self) -> None:
        """This replica no longer hears the others: what they send its streams is lost."""

    def stream_unreachable(self, session_id: str) -> None:
        """A message for the session's stream, held by another replica, did not go out."""


@dataclass(frozen=True, slots=True)
class Receivers:
    """What this process applies the other replicas' messages to."""

    hub: Hub
    sessions: SessionEvents
    tasks: TaskService | None = None


Decoder = Callable[[Receivers, dict[str, Any]], None]


# -- change: a catalog change, for the streams of every replica ---------------------------------


def publish_change(bus: Bus, change: Change) -> None:
    bus.publish("change", {"kind": change.kind, "uri": change.uri})


def change_of(data: dict[str, Any]) -> Change | None:
    """The change a ``change`` message's data describes; None if malformed."""
    change_kind, uri = data.get("kind"), data.get("uri")
    # A list change has no uri; a resource update must name one (streams rely on it).
    uri_ok = isinstance(uri, str) if change_kind == "resource_updated" else uri is None
    if isinstance(change_kind, str) and change_kind in _CHANGE_KINDS and uri_ok:
        return Change(cast(ChangeKind, change_kind), uri)
    return None


def _decode_change(to: Receivers, data: dict[str, Any]) -> None:
    if (change := change_of(data)) is not None:
        to.hub.publish(change)


# -- task: published by TaskService.announce (op wake / cancel / status) ------------------------


def _decode_task(to: Receivers, data: dict[str, Any]) -> None:
    # A task's status, or a wake-up or cancellation for its handler if it runs here.
    if to.tasks is not None:
        to.tasks.remote(data)


# -- resync: delivered locally by a bus that was away (nothing travels) -------------------------


def _decode_resync(to: Receivers, data: dict[str, Any]) -> None:
    # Changes may have been missed while the bus was away: the resource updates its log
    # names (``changes``; without it, which is unknown: every followed resource is told), and
    # every list (a change whose publishing failed while Redis was away is in no log);
    # subscriptions are read again.
    logged = data.get("changes")
    for each in logged if isinstance(logged, list) else ():
        change = change_of(each) if isinstance(each, dict) else None
        if change is not None and change.uri is not None:
            to.hub.publish(change)
    if not isinstance(logged, list):
        to.hub.tell_followed()  # the 2026-07-28 era's listen streams
    for list_kind in _LIST_KINDS:
        to.hub.publish(Change(list_kind))
    to.sessions.subscriptions_missed(updates_unknown=not isinstance(logged, list))


# -- away, unsent: delivered locally by a bus (nothing travels) --------------------------------


def _decode_away(to: Receivers, data: dict[str, Any]) -> None:
    # The subscription is lost until ``resync``: HTTP+SSE streams held here would wait for
    # answers that cannot come, so they close (their clients connect again).
    to.sessions.bus_away()


def _decode_unsent(to: Receivers, data: dict[str, Any]) -> None:
    # A call's message for a stream another replica holds was lost: its session ends.
    if data.get("k") == "sse" and isinstance(session_id := data.get("sid"), str):
        to.sessions.stream_unreachable(session_id)


# -- a legacy session's events: each names its session (sid) ------------------------------------


def publish_ended(bus: Bus, session_id: str) -> None:
    """The session ended here: the other replicas release what they hold for it."""
    bus.publish("ended", {"sid": session_id})


def publish_answer(bus: Bus, session_id: str, response: Response) -> None:
    """A client's answer to a question that may wait on another replica."""
    bus.publish("answer", _answer(session_id, response))


def _answer(session_id: str, response: Response) -> dict[str, Any]:
    answer = {"id": response.id, "result": response.result, "error": response.error}
    return {"sid": session_id, **answer}


async def send_answer(bus: Bus, session_id: str, response: Response, *, wait: bool) -> None:
    """:func:`publish_answer`; with ``wait`` (a POST of its own) it learns whether it arrived:
    the answer goes only to the replica that asked (its id names it), so nobody hearing it
    means that replica is gone with the call that asked (410, not the 404 that would tell the
    client its session is gone; that call's stream ends with an error); Redis away is a 503
    (post the answer again)."""
    if not wait:
        publish_answer(bus, session_id, response)
    elif await bus.send("answer", _answer(session_id, response)) is False:
        raise InvalidRequest(
            f"Not found: no request {response.id!r} waits for this answer any more: the "
            "replica that sent it stopped, and its call ended with it",
            http_status=410,
        )


def publish_cancel(bus: Bus, session_id: str, params: Mapping[str, Any]) -> None:
    """A client's cancellation of a call that may run on another replica."""
    bus.publish("cancel", {"sid": session_id, "params": dict(params)})


async def send_cancel(bus: Bus, session_id: str, params: Mapping[str, Any], *, wait: bool) -> None:
    """:func:`publish_cancel`; with ``wait`` (a POST of its own), Redis away is a 503 (send
    it again), never a 202 for a cancellation nobody could hear."""
    if wait:
        await bus.send("cancel", {"sid": session_id, "params": dict(params)})
    else:
        publish_cancel(bus, session_id, params)


def publish_subscription(bus: Bus, session_id: str, uri: str, subscribed: bool) -> None:
    """A session subscribed to (or unsubscribed from) one resource: a GET stream elsewhere
    follows it. Only the change travels, never the session's whole set."""
    bus.publish("subs", {"sid": session_id, "add" if subscribed else "remove": uri})


def publish_sse(bus: Bus, session_id: str, payload: bytes) -> None:
    """A message for the one stream of an HTTP+SSE session, held by another replica."""
    bus.publish("sse", {"sid": session_id, "m": payload.decode()})


def _decode_ended(to: Receivers, session_id: str, data: dict[str, Any]) -> None:
    to.sessions.session_ended(session_id)


def _decode_answer(to: Receivers, session_id: str, data: dict[str, Any]) -> None:
    request_id, error = data.get("id"), data.get("error")
    if (
        isinstance(request_id, str | int)
        and is_valid_id(request_id)
        and (error is None or isinstance(error, dict))
    ):
        to.sessions.remote_answer(session_id, Response(request_id, data.get("result"), error))


def _decode_cancel(to: Receivers, session_id: str, data: dict[str, Any]) -> None:
    if isinstance(params := data.get("params"), dict):
        to.sessions.remote_cancel(session_id, params)


def _decode_subscription(to: Receivers, session_id: str, data: dict[str, Any]) -> None:
    added, removed = data.get("add"), data.get("remove")
    if isinstance(added, str):
        to.sessions.remote_subscription(session_id, added, True)
    elif isinstance(removed, str):
        to.sessions.remote_subscription(session_id, removed, False)


def _decode_sse(to: Receivers, session_id: str, data: dict[str, Any]) -> None:
    if isinstance(message := data.get("m"), str):
        to.sessions.remote_message(session_id, message.encode())


def _of_session(decode: Callable[[Receivers, str, dict[str, Any]], None]) -> Decoder:
    """A session event's decoder, given only messages that name their session."""

    def decoder(to: Receivers, data: dict[str, Any]) -> None:
        if isinstance(session_id := data.get("sid"), str):
            decode(to, session_id, data)

    return decoder


DECODERS: dict[str, Decoder] = {
    "change": _decode_change,
    "task": _decode_task,
    "resync": _decode_resync,
    "away": _decode_away,
    "unsent": _decode_unsent,
    "ended": _of_session(_decode_ended),
    "answer": _of_session(_decode_answer),
    "cancel": _of_session(_decode_cancel),
    "subs": _of_session(_decode_subscription),
    "sse": _of_session(_decode_sse),
}


def decode(to: Receivers, kind: str, data: dict[str, Any]) -> None:
    """Apply one message of another replica here; an unknown kind is ignored (a newer one)."""
    decoder = DECODERS.get(kind)
    if decoder is not None:
        decoder(to, data)
