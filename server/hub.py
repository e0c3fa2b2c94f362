"""Fan-out of catalog changes and task news to open notification streams.

The :class:`Hub` receives every :class:`~server.catalog.Change` (from the local catalog, and
from other replicas) and every :class:`TaskNews` (a task's new state, from whichever replica
changed it) and offers it to each attached stream. A stream decides for itself
whether the change interests it and what frame it becomes; the hub only keeps the set and a
bounded queue per stream. A stream whose client stops reading overflows its queue and is
closed rather than allowed to grow without bound: the client re-subscribes and re-reads.

What a stream subscribes to is the era's affair (the modern era's filter is
:class:`server.modern.listen.ListenFilter`, the legacy era's a session's subscriptions);
:func:`covers` is the one rule both share for resource URIs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from server.aio import running_loop
from server.catalog import Change
from server.tasks.model import TaskRecord

# What a client may subscribe to: this many resources per stream (the legacy era holds a
# session to the same number), each URI at most this long (both eras).
MAX_RESOURCE_SUBSCRIPTIONS = 1000
MAX_URI_LENGTH = 2048

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TaskNews:
    """A task's new state, for the streams that follow it."""

    record: TaskRecord


Event = Change | TaskNews


class Durable(Protocol):
    """Where this process's changes go to the other replicas (the Redis change log,
    :class:`~server.state.redis.changes.ChangeLog`)."""

    def shared(self, call: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        """``call``, answering only once every change it made is shared (else an error)."""
        ...


class Closed:
    """Queue sentinel: the stream must end (overflow or server shutdown)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class FrameQueue:
    """A FIFO with one consumer, bounded by its producer (:meth:`Stream.offer`).

    ``asyncio.Queue`` allocates three deques up front, most of what an idle stream would cost
    beyond its connection (docs/decisions.md#frame-queue); an idle FrameQueue holds no
    container at all.
    Its consumer waits on one future (:meth:`wait`), which an item resolves, and so can
    whoever else has a reason to wake it (:meth:`wake`: a listen stream's keep-alive is due),
    with no coroutine, timeout or second waiter of its own."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[bytes | Closed] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items) if self._items else 0

    def empty(self) -> bool:
        return not self._items

    def put_nowait(self, item: bytes | Closed) -> None:
        if self._items is None:
            self._items = []
        self._items.append(item)
        self.wake()

    def get_nowait(self) -> bytes | Closed:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.pop(0)  # a handful at most: the capacity bounds it
        if not self._items:
            self._items = None
        return item

    def wait(self) -> asyncio.Future[None]:
        """A future done once the queue has an item, or once :meth:`wake` is called; waiting
        takes nothing (a cancelled wait loses nothing)."""
        waiter = running_loop().create_future()
        if self._items:
            waiter.set_result(None)
        else:
            self._waiter = waiter
        return waiter

    def wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> bytes | Closed:
        while not self._items:
            await self.wait()
        return self.get_nowait()


class Stream:
    """One open notification stream: a filter (``frame``) and a bounded queue of frames."""

    __slots__ = ("_capacity", "closed", "frame", "queue")

    def __init__(self, frame: Callable[[Event], bytes | None], capacity: int) -> None:
        self.frame = frame
        self.queue = FrameQueue()
        self._capacity = capacity
        self.closed = False

    def offer(self, change: Event) -> None:
        if self.closed:
            return
        frame = self.frame(change)
        if frame is None:
            return
        if self.queue.qsize() >= self._capacity:
            self.close("overflow")
            return
        self.queue.put_nowait(frame)

    def close(self, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(Closed(reason))


class Hub:
    """Local fan-out. One per process; the app feeds it from the catalog (and the bus)."""

    def __init__(self, capacity: int = 64) -> None:
        self._streams: set[Stream] = set()
        self._listeners: list[Callable[[Event], None]] = []
        self.capacity = capacity
        self._closed_reason: str | None = None

    def __len__(self) -> int:
        return len(self._streams) + len(self._listeners)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def attach(self, frame: Callable[[Event], bytes | None]) -> Stream:
        stream = Stream(frame, self.capacity)
        if self._closed_reason is not None:
            # Shutting down: a stream opened now ends at once, the same way as the others.
            stream.close(self._closed_reason)
            return stream
        self._streams.add(stream)
        return stream

    def detach(self, stream: Stream) -> None:
        self._streams.discard(stream)

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``listener`` on every change (it must not block); returns its unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def publish(self, change: Event) -> None:
        for stream in list(self._streams):
            stream.offer(change)
        for listener in list(self._listeners):
            listener(change)

    def tell_followed(self) -> None:
        """Tell each stream that every resource it follows was updated, once each: what it
        missed cannot be known (a resync without a change log). A stream's filter names what
        it follows by a ``followed`` attribute (the modern era's listen frames)."""
        for stream in list(self._streams):
            for uri in getattr(stream.frame, "followed", ()):
                stream.offer(Change("resource_updated", uri))

    def close_all(self, reason: str) -> None:
        """End every stream, and every stream attached from now on, with ``reason``."""
        self._closed_reason = reason
        for stream in list(self._streams):
            stream.close(reason)


def covers(subscribed: str, updated: str) -> bool:
    """An update of ``updated`` concerns a subscription to it or to a parent of it."""
    if updated == subscribed:
        return True
    return updated.startswith(subscribed.rstrip("/") + "/")
