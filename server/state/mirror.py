"""Resumable legacy streams across replicas: each stream's events copied to a Redis Stream.

A ``GET`` + ``Last-Event-ID`` may land on a replica that has nothing of the stream in memory.
:class:`RedisMirror` copies every event of every legacy stream into
``<prefix>:events:<session>:<stream>`` (entry id ``0-<seq>``: the SSE sequence number is the
Redis id; about ``capacity`` entries) and writes an end marker when the stream finishes; the
copies go when their session goes (:meth:`~RedisMirror.forget`); another replica opens a copy to
replay what was missed and tails it to follow a call still running elsewhere. Copying never
makes a call wait (one bounded writer task; while Redis is away events are dropped, counted).
:class:`~server.state.memory.MemoryMirror` is the one-process default; the Redis flavour is
:mod:`server.state.redis.mirror`.
"""

from __future__ import annotations

from typing import Protocol

from server.catalog import Change
from server.legacy.eventstream import Copy, EventStream


class StreamMirror(Protocol):
    def track(self, session_id: str, stream: EventStream) -> None:
        """Copy every event of ``stream`` from now on."""

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        """The events after ``after`` of a stream another replica holds; None if unknown."""

    async def missed(self, copy: Copy | None) -> list[Change] | None:
        """The changes made after ``copy`` (of another replica's GET stream, or None) was last
        written, which its replica may not have told; None if they cannot be known."""

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
