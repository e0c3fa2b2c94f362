"""What a legacy session has in *this* process: open streams, waiting questions, running calls.

A :class:`~server.legacy.sessions.Session` is data a store can share; a :class:`SessionRuntime` is
the live part that cannot leave the process: the session's event streams (bounded in number),
the futures of server-to-client requests waiting for the client's answer, the tasks of calls
in flight (so ``notifications/cancelled`` can stop them), and the hub feed that turns catalog
changes into notifications on the session's standalone stream. :class:`Runtimes` holds them by
session id and tears one down completely when its session ends, so nothing outlives it.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable, Container
from typing import Any, Protocol

from server.catalog import Change, ChangeKind
from server.hub import Event, Hub, TaskNews, covers
from server.jsonrpc import encode_notification
from server.legacy.eventstream import EventStream, SentOnce
from server.legacy.sessions import LiveSubscriptions

MAX_STREAMS_PER_SESSION = 32
LIST_CHANGED: dict[ChangeKind, str] = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}


# Called with (session id, stream) for every stream a runtime opens: the Redis mirror copies
# them so another replica can resume them.
StreamHook = Callable[[str, EventStream], None]


class Running(Protocol):
    """A call in flight, as ``notifications/cancelled`` and the session's end see it: its
    task, or the :class:`~server.transport.legacy_calls.InlineCall` of a call running inline in a
    request's task."""

    def cancel(self) -> bool: ...

    def done(self) -> bool: ...


def is_standalone_id(stream_id: str) -> bool:
    """Whether a stream id names a session's GET stream (their ids end in ``g``)."""
    return stream_id.endswith("g")


def asked_by(request_id: object) -> str | None:
    """The replica that sent the request ``request_id`` names (its answer goes there); None
    for an id that names none (one process, or an id the client made up)."""
    if not isinstance(request_id, str):
        return None
    parts = request_id.split("-")
    if len(parts) != 4 or parts[0] != "srv" or len(parts[1]) != 16:
        return None
    return parts[1] if all(c in "0123456789abcdef" for c in parts[1]) else None


class SessionRuntime:
    def __init__(
        self,
        session_id: str,
        events_per_stream: int,
        on_stream: StreamHook | None = None,
        replica: str = "",
    ) -> None:
        self.session_id = session_id
        self._events_per_stream = events_per_stream
        self._on_stream = on_stream
        self._stream_numbers = itertools.count(1)
        self._stream_prefix = secrets.token_hex(3)
        # Requests to the client name the replica that waits for their answers (asked_by).
        self._asker = f"{replica}-{self._stream_prefix}" if replica else self._stream_prefix
        self.streams: OrderedDict[str, EventStream] = OrderedDict()
        # The kept streams that have finished, oldest first: what may be forgotten when the
        # session holds too many, found without scanning the running ones.
        self._finished: OrderedDict[str, None] = OrderedDict()
        self.standalone: EventStream | None = None
        self.standalone_followers = 0
        # GET connections here following a stream that runs on another replica.
        self.remote_followers = 0
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.inflight: dict[str | int, Running] = {}
        self._outgoing_ids = itertools.count(1)
        # Read from the store when a GET stream opens, then kept current by deltas.
        self.subscriptions = LiveSubscriptions()
        self._feed: Callable[[], None] | None = None
        self._concerns: Callable[[Event], bool] | None = None
        self._capabilities: Callable[[], dict[str, Any]] = dict
        # The retirements this session was told of in a log message (server.retirement).
        self.retirements_told: set[str] = set()

    def open_stream(
        self,
        *,
        standalone: bool = False,
        replayable: bool = True,
        sent_once: int | None = None,
        request_id: str | int | None = None,
    ) -> EventStream:
        """A new stream of the session. ``replayable=False``: nothing will ever resume it (the
        HTTP+SSE transport's), so it keeps no event and is not copied to the mirror;
        ``sent_once``: it is a :class:`~server.legacy.eventstream.SentOnce` of that many
        bytes at most, the one stream of an HTTP+SSE session; ``request_id``: the call's."""
        # The random prefix keeps ids unique across replicas (and restarts) of one session.
        stream_id = f"{self._stream_prefix}{next(self._stream_numbers)}{'g' if standalone else ''}"
        stream: EventStream
        if sent_once is not None:
            stream = SentOnce(stream_id, sent_once)
        else:
            stream = EventStream(stream_id, self._events_per_stream if replayable else 0)
        stream.on_finish = self._stream_finished
        stream.request_id = request_id
        if self._on_stream is not None and replayable and sent_once is None:
            self._on_stream(self.session_id, stream)
        self.streams[stream_id] = stream
        # Forget the oldest finished streams (their replay window is over); running ones
        # stay, and are bounded by how many calls a client may have in flight. Each stream
        # enters and leaves the index once: constant time per call, however many run.
        while len(self.streams) > MAX_STREAMS_PER_SESSION and self._finished:
            old_id, _ = self._finished.popitem(last=False)
            self.streams.pop(old_id, None)
        return stream

    def _stream_finished(self, stream: EventStream) -> None:
        if stream.id in self.streams:
            self._finished[stream.id] = None

    def drop_stream(self, stream: EventStream) -> None:
        self.streams.pop(stream.id, None)
        self._finished.pop(stream.id, None)

    def standalone_stream(
        self,
        hub: Hub,
        capabilities: Callable[[], dict[str, Any]],
        *,
        sent_once: int | None = None,
        concerns: Callable[[Event], bool] | None = None,
    ) -> EventStream:
        """The session's GET stream, created (and fed by the hub) on first use; ``sent_once``
        makes it the one stream of an HTTP+SSE session (:meth:`open_stream`); ``concerns``
        (when items are hidden from its caller) says which changes it is told of."""
        if self.standalone is None:
            self.standalone = self.open_stream(standalone=True, sent_once=sent_once)
            self._concerns, self._capabilities = concerns, capabilities

            def feed(change: Event) -> None:
                if concerns is None or concerns(change):
                    self._offer(change, capabilities())

            self._feed = hub.subscribe(feed)
        return self.standalone

    def catch_up(self, missed: list[Change] | None, after: int) -> None:
        """Tell the standalone stream (opened by a resume) the changes its previous holder,
        on another replica, did not: ``missed`` in order, or, when they cannot be known
        (None), that every list and subscribed resource may have changed. A notification
        the stream already carries after ``after`` (the same change, heard meanwhile) is not
        repeated, once per time it carries it."""
        stream = self.standalone
        if stream is None:
            return
        if missed is None:
            lists = [Change(kind) for kind in LIST_CHANGED]
            missed = [*lists, *(Change("resource_updated", uri) for uri in self.subscriptions)]
        told = Counter(event.payload for _, event in stream.events_after(after))
        capabilities, concerns = self._capabilities(), self._concerns
        for change in missed:
            if concerns is None or concerns(change):
                self._offer(change, capabilities, told)

    def updates_unknown(self) -> None:
        """Updates of the resources the standalone stream follows may have been missed and no
        log says which (Redis restarted empty while the bus was away): each is told once."""
        if self.standalone is None:
            return
        capabilities, concerns = self._capabilities(), self._concerns
        for uri in list(self.subscriptions):
            change = Change("resource_updated", uri)
            if concerns is None or concerns(change):
                self._offer(change, capabilities)

    def _offer(
        self, change: Event, capabilities: dict[str, Any], told: Counter[bytes] | None = None
    ) -> None:
        stream = self.standalone
        if stream is None or stream.finished:
            return
        payload = self._notification(change, capabilities)
        if payload is None:
            return
        if told is not None and told[payload] > 0:
            told[payload] -= 1  # heard here already: the same change
            return
        stream.publish(payload)

    def _notification(self, change: Event, capabilities: dict[str, Any]) -> bytes | None:
        """What the standalone stream says of ``change``; None if nothing."""
        if isinstance(change, TaskNews):
            # 2025-11-25: a task's status goes to the stream of the session that created it.
            record = change.record
            if record.session == self.session_id:
                return encode_notification("notifications/tasks/status", record.task(legacy=True))
            return None
        if change.kind == "resource_updated":
            assert change.uri is not None
            if any(covers(uri, change.uri) for uri in self.subscriptions):
                return encode_notification("notifications/resources/updated", {"uri": change.uri})
        elif change.kind in capabilities:
            return encode_notification(LIST_CHANGED[change.kind])
        return None

    def next_request_id(self) -> str:
        # Unique across replicas: the answer may reach another replica, which relays it.
        return f"srv-{self._asker}-{next(self._outgoing_ids)}"

    def close(self) -> None:
        """End everything: running calls are cancelled, waiting questions fail, streams end."""
        if self._feed is not None:
            self._feed()
            self._feed = None
        # Copies: a stream finishing, or a call cancelled, may leave these tables at once
        # (a call's stream that nothing replays drops itself from the session when done).
        for task in list(self.inflight.values()):
            task.cancel()
        for future in list(self.pending.values()):
            if not future.done():
                future.cancel()
        self.pending.clear()
        for stream in list(self.streams.values()):
            stream.end_connections("session_ended")
            stream.finish()
        self.streams.clear()
        self._finished.clear()
        self.standalone = None

    def busy(self) -> bool:
        """True while something still runs or streams, so idle expiry must wait."""
        return bool(self.inflight) or self.standalone_followers > 0 or self.remote_followers > 0


class Runtimes:
    def __init__(
        self,
        events_per_stream: int,
        on_stream: StreamHook | None = None,
        on_end: Callable[[str], None] | None = None,
        *,
        replica: str = "",
    ) -> None:
        self._runtimes: dict[str, SessionRuntime] = {}
        self._replica = replica
        self.events_per_stream = events_per_stream
        self._on_stream = on_stream
        # Told when a session that had a runtime here ends (deleted, expired, closed), after
        # its streams finished: the mirror drops their copies. Not at shutdown (end_all): the
        # sessions live on, and their streams resume on another replica.
        self._on_end = on_end

    def get(self, session_id: str) -> SessionRuntime:
        runtime = self._runtimes.get(session_id)
        if runtime is None:
            runtime = SessionRuntime(
                session_id, self.events_per_stream, self._on_stream, self._replica
            )
            self._runtimes[session_id] = runtime
        return runtime

    def peek(self, session_id: str) -> SessionRuntime | None:
        return self._runtimes.get(session_id)

    def end(self, session_id: str) -> None:
        runtime = self._runtimes.pop(session_id, None)
        if runtime is not None:
            runtime.close()
            if self._on_end is not None:
                self._on_end(session_id)

    def end_standalone_connections(self, reason: str, keep: Container[str] = ()) -> None:
        """End every session's GET stream connection (clients reconnect, maybe elsewhere),
        but those of the sessions in ``keep`` (closed by their transport once idle).

        Calls in flight keep their streams: they finish within the drain deadline."""
        for session_id, runtime in self._runtimes.items():
            if runtime.standalone is not None and session_id not in keep:
                runtime.standalone.end_connections(reason)

    def ids(self) -> list[str]:
        return list(self._runtimes)

    def busy(self, session_id: str) -> bool:
        """Whether the session has something running or streaming here (idle expiry waits)."""
        runtime = self._runtimes.get(session_id)
        return runtime is not None and runtime.busy()

    def end_all(self) -> None:
        """Shutdown: every runtime closed; the sessions themselves live on."""
        runtimes, self._runtimes = self._runtimes, {}
        for runtime in runtimes.values():
            runtime.close()

    def __len__(self) -> int:
        return len(self._runtimes)
