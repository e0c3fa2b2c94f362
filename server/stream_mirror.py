"""Resumable legacy streams across replicas: each stream's events copied to a Redis Stream.

When a client's SSE connection drops and its ``GET`` + ``Last-Event-ID`` lands on another
replica, that replica has nothing of the stream in memory. :class:`RedisMirror` copies every
event of every legacy stream into ``<prefix>:events:<session>:<stream>`` (entry id ``0-<seq>``,
so the SSE sequence number *is* the Redis id; at most about ``capacity`` entries, expiring with
the session) and writes an end marker when the stream finishes. Another replica then
:meth:`~RedisMirror.open`\\ s the copy to replay what was missed, and :meth:`~RedisMirror.tail`\\ s
it (``XREAD BLOCK``) to follow a call that is still running elsewhere.

Copying never makes a call wait: events queue (bounded) for one writer task. If Redis is away
they are dropped and counted, which only narrows what another replica could replay.

:class:`LocalMirror` is the one-process default: every stream is in this process already.

May import: errors, eventstream, redis_link, the standard library.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from server.errors import ServiceUnavailable
from server.eventstream import EventStream
from server.redis_link import RedisLink, stop_task

log = logging.getLogger("server.stream_mirror")

QUEUE_LIMIT = 50_000
WRITE_BATCH = 256
TAIL_BLOCK_MS = 1000


@dataclass(frozen=True, slots=True)
class Copy:
    """What another replica kept of a stream after some event: its events, and whether the
    stream had finished."""

    events: list[tuple[int, bytes]]
    finished: bool

    def stream(self, stream_id: str, after: int, capacity: int) -> EventStream:
        """A stream of this process standing for the other replica's, from ``after`` on."""
        stream = EventStream(stream_id, capacity, start_seq=after)
        for seq, payload in self.events:
            stream.skip_to(seq - 1)
            stream.publish(payload)
        if self.finished:
            stream.finish()
        return stream


class StreamMirror(Protocol):
    def track(self, session_id: str, stream: EventStream) -> None:
        """Copy every event of ``stream`` from now on."""

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        """The events after ``after`` of a stream another replica holds; None if unknown."""

    async def tail(self, session_id: str, stream: EventStream) -> None:
        """Feed ``stream`` (a local copy) with the events still to come, until it finishes."""

    def start(self) -> None: ...

    async def close(self) -> None: ...


class LocalMirror:
    def track(self, session_id: str, stream: EventStream) -> None:
        return None

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        return None

    async def tail(self, session_id: str, stream: EventStream) -> None:
        return None

    def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _seq(entry_id: bytes) -> int:
    return int(entry_id.rpartition(b"-")[2])


class RedisMirror:
    def __init__(self, link: RedisLink, *, capacity: int, ttl_s: float) -> None:
        self.link = link
        self.capacity = capacity
        self._ttl_ms = max(1000, int(ttl_s * 1000))
        self._queue: asyncio.Queue[tuple[str, int, bytes | None]] | None = None
        self._writer: asyncio.Task[None] | None = None
        self.dropped = 0

    def _key(self, session_id: str, stream_id: str) -> str:
        return self.link.key("events", session_id, stream_id)

    def track(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)

        def copy(seq: int, payload: bytes | None) -> None:
            if self._queue is None:
                return
            try:
                self._queue.put_nowait((key, seq, payload))
            except asyncio.QueueFull:
                self.dropped += 1

        stream.observer = copy

    def start(self) -> None:
        self._queue = asyncio.Queue(QUEUE_LIMIT)
        self._writer = asyncio.create_task(self._write(), name="stream-mirror")

    async def close(self) -> None:
        if self._writer is not None:
            await stop_task(self._writer)
            self._writer = None

    async def _write(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            batch = [await queue.get()]
            while not queue.empty() and len(batch) < WRITE_BATCH:
                batch.append(queue.get_nowait())
            try:
                async with self.link.client.pipeline(transaction=False) as pipe:
                    for key, seq, payload in batch:
                        if payload is None:  # the end marker, just after the last event
                            pipe.xadd(key, {"e": b"1"}, id=f"0-{seq + 1}")
                        else:
                            pipe.xadd(
                                key,
                                {"d": payload},
                                id=f"0-{seq}",
                                maxlen=self.capacity,
                                approximate=True,
                            )
                        pipe.pexpire(key, self._ttl_ms)
                    await self.link.run(pipe.execute(raise_on_error=False))
            except ServiceUnavailable:
                self.dropped += len(batch)
            except Exception:
                log.exception("copying stream events to Redis failed")
                self.dropped += len(batch)

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        key = self._key(session_id, stream_id)
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.xrevrange(key, "+", "-", count=1)
            # The newest events after ``after`` (and the end marker), as a stream's own buffer
            # keeps its newest: the oldest ones would leave out the call's final result.
            pipe.xrevrange(key, "+", f"(0-{after}", count=self.capacity + 1)
            last, newest = await self.link.run(pipe.execute())
        if not last:
            return None
        events, finished = _events(newest[::-1])
        # Resumed at (or past) the end: nothing follows, but the stream did finish.
        finished = finished or b"e" in last[0][1]
        return Copy(events, finished)

    async def tail(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)
        block_ms = max(10, min(TAIL_BLOCK_MS, int(self.link.timeout_s * 500)))
        while not stream.finished:
            try:
                answer: Any = await self.link.run(
                    self.link.client.xread({key: f"0-{stream.last_seq}"}, count=100, block=block_ms)
                )
            except ServiceUnavailable:
                # The client reconnects (its Last-Event-ID still names this stream).
                stream.end_connections("shared_state_lost")
                return
            for _, entries in answer or ():
                events, finished = _events(entries)
                for seq, payload in events:
                    stream.skip_to(seq - 1)
                    stream.publish(payload)
                if finished:
                    stream.finish()


Entries = list[tuple[bytes, dict[bytes, bytes]]]


def _events(entries: Entries) -> tuple[list[tuple[int, bytes]], bool]:
    events: list[tuple[int, bytes]] = []
    for entry_id, fields in entries:
        if b"e" in fields:
            return events, True
        events.append((_seq(entry_id), fields[b"d"]))
    return events, False
