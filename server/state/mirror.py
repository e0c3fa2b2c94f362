"""Resumable legacy streams across replicas: each stream's events copied to a Redis Stream.

When a client's SSE connection drops and its ``GET`` + ``Last-Event-ID`` lands on another
replica, that replica has nothing of the stream in memory. :class:`RedisMirror` copies every
event of every legacy stream into ``<prefix>:events:<session>:<stream>`` (entry id ``0-<seq>``,
so the SSE sequence number *is* the Redis id; at most about ``capacity`` entries, expiring with
the session) and writes an end marker when the stream finishes. The copies go when their
session goes (:meth:`~RedisMirror.forget`: deleted, closed, or expired). Another replica then
:meth:`~RedisMirror.open`\\ s the copy to replay what was missed, and :meth:`~RedisMirror.tail`\\ s
it (``XREAD BLOCK``) to follow a call that is still running elsewhere.

Copying never makes a call wait: events queue (bounded) for one writer task. If Redis is away
they are dropped and counted, which only narrows what another replica could replay.

:class:`~server.state.memory.MemoryMirror` is the one-process default: every stream is in this
process already.

The Redis flavour is :mod:`server.state.redis.mirror`, imported only with ``MCP_REDIS_URL``.
"""

from __future__ import annotations

from typing import Protocol

from server.legacy.eventstream import Copy, EventStream


class StreamMirror(Protocol):
    def track(self, session_id: str, stream: EventStream) -> None:
        """Copy every event of ``stream`` from now on."""

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        """The events after ``after`` of a stream another replica holds; None if unknown."""

    async def tail(self, session_id: str, stream: EventStream) -> None:
        """Feed ``stream`` (a local copy) with the events still to come, until it finishes."""

    def forget(self, session_id: str) -> None:
        """The session ended: its streams' copies go, and nothing more of it is copied."""

    def start(self) -> None: ...

    async def close(self) -> None: ...


def _seq(entry_id: bytes) -> int:
    return int(entry_id.rpartition(b"-")[2])


Entries = list[tuple[bytes, dict[bytes, bytes]]]


def events_of(entries: Entries) -> tuple[list[tuple[int, bytes]], bool]:
    events: list[tuple[int, bytes]] = []
    for entry_id, fields in entries:
        if b"e" in fields:
            return events, True
        events.append((_seq(entry_id), fields[b"d"]))
    return events, False
