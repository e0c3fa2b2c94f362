"""Resumable event streams for the legacy era: ids, a bounded replay buffer, followers.

A streaming legacy POST and a session's standalone GET stream are each an :class:`EventStream`,
a logical stream that outlives its HTTP connection: every message gets an SSE id
``<stream>_<seq>``, is kept in a bounded buffer and handed to whichever connection follows, so
a client resumes with ``Last-Event-ID`` and gets what it missed on that stream, never another's.
Another replica can carry on a stream: an ``observer`` hears every event and the end (the Redis
mirror copies them), and ``start_seq`` continues a stream whose events come from elsewhere.
Memory is bounded per stream (``capacity``) and per session (:mod:`server.legacy.runtime`).
A stream nothing replays (HTTP+SSE) is a :class:`SentOnce`: kept only until sent, bounded in
bytes, its connection ended past the bound (docs/decisions.md#sse-transport-keeps-nothing).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Hears (seq, payload) for every event, and (seq, None) once when the stream finishes.
Observer = Callable[[int, bytes | None], None]


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    payload: bytes


# What this server's stream ids are made of (see runtime.SessionRuntime.open_stream: a hex
# prefix, a decimal number, and "g" for a session's GET stream), and the largest sequence
# number a Redis stream entry id (``0-<seq>``, the mirror's) can hold: a client's
# Last-Event-ID outside these cannot name an event, and must not reach Redis.
MAX_STREAM_ID_LENGTH = 32
MAX_SEQ = 2**64 - 1
_EVENT_ID = re.compile(r"([0-9a-f]+g?)_([0-9]{1,20})")


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    """``(stream id, sequence)`` of an event id ``<stream>_<seq>`` this server could have
    made; None for anything else."""
    matched = _EVENT_ID.fullmatch(event_id.strip())
    if matched is None or len(matched[1]) > MAX_STREAM_ID_LENGTH:
        return None
    seq = int(matched[2])
    if seq > MAX_SEQ:
        return None
    return matched[1], seq


class EventStream:
    """One logical stream; ``finish`` publishes the last message and closes it."""

    def __init__(self, stream_id: str, capacity: int | None, *, start_seq: int = 0) -> None:
        self.id = stream_id
        self._events: deque[tuple[int, Event]] = deque(maxlen=capacity)
        self._seq = start_seq
        self.observer: Observer | None = None
        # Told once, when the stream finishes (the session's index of finished streams).
        self.on_finish: Callable[[EventStream], None] | None = None
        self._wakeup = asyncio.Event()
        self.finished = False
        # Bumped to end the current connections without ending the stream (SSE polling).
        self._generation = 0
        self.end_reason = "complete"
        # A call's stream: the request it answers. A copy of another replica's: that replica.
        self.request_id: str | int | None = None
        self.holder: str | None = None

    @property
    def priming_id(self) -> str:
        """The id of the empty priming event: resuming from it replays everything."""
        return f"{self.id}_0"

    @property
    def last_seq(self) -> int:
        return self._seq

    def publish(self, payload: bytes) -> Event:
        if self.finished:
            raise RuntimeError(f"stream {self.id} is finished")
        self._seq += 1
        # Kept for replay: an exact-size copy, as orjson's output holds a 4 KiB buffer (a
        # stream of small messages would otherwise keep 4 KiB per event).
        payload = bytes(memoryview(payload))
        event = Event(f"{self.id}_{self._seq}", payload)
        self._events.append((self._seq, event))
        self._wake()
        if self.observer is not None:
            self.observer(self._seq, payload)
        return event

    def skip_to(self, seq: int) -> None:
        """Continue numbering after ``seq`` (events before it were lost elsewhere)."""
        self._seq = max(self._seq, seq)

    def finish(self, payload: bytes | None = None) -> None:
        """Publish the final message (if any) and close the stream."""
        if self.finished:
            return
        if payload is not None:
            self.publish(payload)
        self.finished = True
        self._wake()
        if self.observer is not None:
            self.observer(self._seq, None)
        if self.on_finish is not None:
            self.on_finish(self)

    def end_connections(self, reason: str = "server_closed") -> None:
        """Make every current follower stop; the stream itself goes on (the client resumes).

        ``reason`` says why, for the record of the connection that ends."""
        self.end_reason = reason
        self._generation += 1
        self._wake()

    def _wake(self) -> None:
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def events_after(self, seq: int) -> list[tuple[int, Event]]:
        return [(number, event) for number, event in self._events if number > seq]

    @property
    def generation(self) -> int:
        return self._generation

    async def wait_beyond(self, seq: int, generation: int) -> None:
        """Return once there is an event after ``seq``, the stream finished, or its
        connections were ended (``generation`` moved on)."""
        while self._seq <= seq and not self.finished and generation == self._generation:
            await self._wakeup.wait()


# What an event costs beside its payload (the tuple, the Event, its id, the bytes object):
# counted with it, so a flood of tiny events meets the byte bound too.
EVENT_OVERHEAD = 256


class SentOnce(EventStream):
    """A stream with one follower and no replay: an event is let go once the follower has
    sent it (its next :meth:`events_after`), and the events waiting are bounded in bytes.

    A publish that would take the waiting events past ``max_bytes`` (unless none wait: one
    event of any size always goes) ends the connection with ``overflow`` instead, and the
    stream keeps nothing more: its transport then ends the session, so the client sees the
    stream close and connects again, and no answer is lost while the stream stays open."""

    def __init__(self, stream_id: str, max_bytes: int) -> None:
        super().__init__(stream_id, None)
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self.overflowed = False

    def publish(self, payload: bytes) -> Event:
        cost = len(payload) + EVENT_OVERHEAD
        if not self.overflowed and self._events and self.queued_bytes + cost > self.max_bytes:
            self.overflowed = True
            self._events.clear()
            self.queued_bytes = 0
            self.end_connections("overflow")
        if self.overflowed:
            # The connection is ending with its session: nothing more is kept for it.
            self._seq += 1
            return Event(f"{self.id}_{self._seq}", payload)
        self.queued_bytes += cost
        return super().publish(payload)

    def events_after(self, seq: int) -> list[tuple[int, Event]]:
        events = self._events
        while events and events[0][0] <= seq:  # sent: let go
            _, event = events.popleft()
            self.queued_bytes -= len(event.payload) + EVENT_OVERHEAD
        return list(events)


@dataclass(frozen=True, slots=True)
class Copy:
    """What another replica kept of a stream after some event: its events, whether the
    stream had finished (read from the :mod:`server.state` mirror), and for a GET stream the
    newest shared change its replica had applied when it last wrote (None if unknown)."""

    events: list[tuple[int, bytes]]
    finished: bool
    position: str | None = None
    # Which replica wrote it (its bus id) and, a call's stream, the request it answers.
    holder: str | None = None
    request_id: str | int | None = None

    def stream(self, stream_id: str, after: int, capacity: int) -> EventStream:
        """A stream of this process standing for the other replica's, from ``after`` on."""
        stream = EventStream(stream_id, capacity, start_seq=after)
        stream.holder, stream.request_id = self.holder, self.request_id
        for seq, payload in self.events:
            stream.skip_to(seq - 1)
            stream.publish(payload)
        if self.finished:
            stream.finish()
        return stream
