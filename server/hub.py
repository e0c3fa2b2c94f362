"""Fan-out of catalog changes and task news to open notification streams.

The :class:`Hub` receives every :class:`~server.catalog.Change` (from the local catalog, and
from other replicas) and every :class:`TaskNews` (a task's new state, from whichever replica
changed it) and offers it to each attached stream. A stream decides for itself
whether the change interests it and what frame it becomes; the hub only keeps the set and a
bounded queue per stream. A stream whose client stops reading overflows its queue and is
closed rather than allowed to grow without bound: the client re-subscribes and re-reads.

:class:`ListenFilter` is the modern era's ``subscriptions/listen`` filter: what was asked,
what is granted given the capabilities, and which changes match. Task ids (the tasks
extension's ``taskIds``) are granted to a client that declares the extension, and a task's news
reaches only a stream of the subject that owns the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.aio import running_loop
from server.catalog import Change
from server.catalog.extensions import TASKS_EXTENSION
from server.errors import InvalidParams, MissingClientCapability
from server.tasks.model import MAX_TASK_ID, TaskRecord

# What a client may subscribe to: this many resources per stream (the legacy era holds a
# session to the same number), each URI at most this long (both eras).
MAX_RESOURCE_SUBSCRIPTIONS = 1000
MAX_URI_LENGTH = 2048
MAX_TASK_SUBSCRIPTIONS = 100


@dataclass(frozen=True, slots=True)
class TaskNews:
    """A task's new state, for the streams that follow it."""

    record: TaskRecord


Event = Change | TaskNews


class Closed:
    """Queue sentinel: the stream must end (overflow or server shutdown)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class FrameQueue:
    """A FIFO with one consumer, bounded by its producer (:meth:`Stream.offer`).

    ``asyncio.Queue`` allocates three deques up front, about 2.3 KiB per idle stream, most of
    what a stream costs beyond its connection; an idle FrameQueue holds no container at all."""

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
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> bytes | Closed:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.pop(0)  # a handful at most: the capacity bounds it
        if not self._items:
            self._items = None
        return item

    async def get(self) -> bytes | Closed:
        while not self._items:
            self._waiter = running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.get_nowait()


class Stream:
    """One open notification stream: a filter (``frame``) and a bounded queue of frames."""

    def __init__(self, frame: Callable[[Event], bytes | None], capacity: int) -> None:
        self._frame = frame
        self.queue = FrameQueue()
        self._capacity = capacity
        self.closed = False

    def offer(self, change: Event) -> None:
        if self.closed:
            return
        frame = self._frame(change)
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

    def close_all(self, reason: str) -> None:
        """End every stream, and every stream attached from now on, with ``reason``."""
        self._closed_reason = reason
        for stream in list(self._streams):
            stream.close(reason)


_LIST_FLAGS = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
_FLAG_BY_KIND = {capability: flag for flag, (capability, _) in _LIST_FLAGS.items()}


@dataclass(frozen=True, slots=True)
class ListenFilter:
    """The granted part of a ``SubscriptionFilter``."""

    flags: frozenset[str]
    resource_uris: tuple[str, ...]
    task_ids: frozenset[str] = frozenset()
    owner: str | None = None  # whose tasks' news this stream may carry

    @classmethod
    def grant(
        cls,
        requested: Any,
        capabilities: Mapping[str, Any],
        *,
        client_capabilities: Mapping[str, Any] | None = None,
        owner: str | None = None,
    ) -> ListenFilter:
        """What the server agrees to send: only types it really serves."""
        if not isinstance(requested, dict):
            raise InvalidParams("params.notifications must be an object (a SubscriptionFilter)")
        flags = set()
        for flag, (capability, _) in _LIST_FLAGS.items():
            value = requested.get(flag)
            if value is not None and not isinstance(value, bool):
                raise InvalidParams(f"notifications.{flag} must be a boolean")
            if value and capability in capabilities:
                flags.add(flag)
        uris = requested.get("resourceSubscriptions")
        granted_uris: tuple[str, ...] = ()
        if uris is not None:
            if not isinstance(uris, list) or not all(
                isinstance(uri, str) and 0 < len(uri) <= MAX_URI_LENGTH and ":" in uri
                for uri in uris
            ):
                raise InvalidParams("notifications.resourceSubscriptions must be a list of URIs")
            if len(uris) > MAX_RESOURCE_SUBSCRIPTIONS:
                raise InvalidParams(
                    f"at most {MAX_RESOURCE_SUBSCRIPTIONS} resource subscriptions per stream"
                )
            if capabilities.get("resources", {}).get("subscribe"):
                granted_uris = tuple(dict.fromkeys(uris))
        task_ids = _task_ids(requested.get("taskIds"), capabilities, client_capabilities or {})
        return cls(frozenset(flags), granted_uris, task_ids, owner)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {flag: True for flag in _LIST_FLAGS if flag in self.flags}
        if self.resource_uris:
            wire["resourceSubscriptions"] = list(self.resource_uris)
        if self.task_ids:
            wire["taskIds"] = sorted(self.task_ids)
        return wire

    def notification(self, change: Event) -> tuple[str, dict[str, Any]] | None:
        """The (method, params) this change becomes on the stream, or None if not subscribed."""
        if isinstance(change, TaskNews):
            record = change.record
            if record.task_id in self.task_ids and record.owner == self.owner:
                return "notifications/tasks", record.detailed()
            return None
        if change.kind == "resource_updated":
            assert change.uri is not None
            if any(covers(uri, change.uri) for uri in self.resource_uris):
                return "notifications/resources/updated", {"uri": change.uri}
            return None
        flag = _FLAG_BY_KIND[change.kind]
        if flag in self.flags:
            return _LIST_FLAGS[flag][1], {}
        return None


def _task_ids(
    requested: Any, capabilities: Mapping[str, Any], client_capabilities: Mapping[str, Any]
) -> frozenset[str]:
    """The task ids a listen stream follows: any the client names (ids are unguessable, and news
    goes only to the task's owner), if it declared the tasks extension (-32021 otherwise)."""
    if requested is None:
        return frozenset()
    if (
        not isinstance(requested, list)
        or len(requested) > MAX_TASK_SUBSCRIPTIONS
        or not all(
            isinstance(task_id, str) and 0 < len(task_id) <= MAX_TASK_ID for task_id in requested
        )
    ):
        raise InvalidParams(
            f"notifications.taskIds must be a list of at most {MAX_TASK_SUBSCRIPTIONS} task ids"
        )
    extensions = client_capabilities.get("extensions")
    if not isinstance(extensions, dict) or not isinstance(extensions.get(TASKS_EXTENSION), dict):
        raise MissingClientCapability(
            {"extensions": {TASKS_EXTENSION: {}}}, "task notifications need the tasks extension"
        )
    if TASKS_EXTENSION not in capabilities.get("extensions", {}):
        return frozenset()
    return frozenset(requested)


def covers(subscribed: str, updated: str) -> bool:
    """An update of ``updated`` concerns a subscription to it or to a parent of it."""
    if updated == subscribed:
        return True
    return updated.startswith(subscribed.rstrip("/") + "/")
