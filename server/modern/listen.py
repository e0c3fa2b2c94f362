"""The 2026-07-28 era's ``subscriptions/listen`` filter: what was asked, what is granted given
the capabilities, and which changes match.

Task ids (the tasks extension's ``taskIds``) are granted to a client that declares the
extension, and a task's news reaches only a stream of the subject that owns the task. The
streams themselves are the era-neutral :mod:`server.hub`'s; their HTTP side is
:mod:`server.transport.modern`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.catalog.extensions import TASKS_EXTENSION
from server.catalog.visibility import ListWatch
from server.errors import InvalidParams, MissingClientCapability
from server.hub import MAX_RESOURCE_SUBSCRIPTIONS, MAX_URI_LENGTH, Event, TaskNews, covers
from server.jsonrpc import encode_notification
from server.protocol import META_SUBSCRIPTION_ID
from server.tasks.model import MAX_TASK_ID

MAX_TASK_SUBSCRIPTIONS = 100

_LIST_FLAGS = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
_FLAG_BY_KIND = {capability: flag for flag, (capability, _) in _LIST_FLAGS.items()}
# A frozenset is 216 bytes, empty or not (CPython has no empty singleton since 3.10), and a
# filter lives as long as its stream: the few possible sets of flags, and no task ids, are
# shared by every stream instead.
_FLAG_SETS: dict[frozenset[str], frozenset[str]] = {}
_NO_TASKS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ListenFilter:
    """The granted part of a ``SubscriptionFilter``."""

    flags: frozenset[str]
    resource_uris: tuple[str, ...]
    task_ids: frozenset[str] = _NO_TASKS
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
        granted_flags = frozenset(flags)
        # at most 2**3 sets: one of each kept
        granted_flags = _FLAG_SETS.setdefault(granted_flags, granted_flags)
        return cls(granted_flags, granted_uris, task_ids, owner)

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


class ListenFrames:
    """A listen stream's filter in the hub: the frame a change becomes on the stream (its
    subscription id in ``_meta``), or None. An object of two slots, not a closure: it lives
    as long as its stream, and a closure with its cells is four times the size."""

    __slots__ = ("_granted", "_subscription_id")

    def __init__(self, granted: ListenFilter, subscription_id: Any) -> None:
        self._granted = granted
        self._subscription_id = subscription_id

    @property
    def followed(self) -> tuple[str, ...]:
        """The resource URIs this stream follows (:meth:`~server.hub.Hub.tell_followed`)."""
        return self._granted.resource_uris

    def __call__(self, change: Event) -> bytes | None:
        found = self._granted.notification(change)
        if found is None:
            return None
        method, params = found
        return encode_notification(
            method, {"_meta": {META_SUBSCRIPTION_ID: self._subscription_id}, **params}
        )


def _task_ids(
    requested: Any, capabilities: Mapping[str, Any], client_capabilities: Mapping[str, Any]
) -> frozenset[str]:
    """The task ids a listen stream follows: any the client names (ids are unguessable, and news
    goes only to the task's owner), if it declared the tasks extension (-32021 otherwise)."""
    if requested is None:
        return _NO_TASKS
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
        return _NO_TASKS
    return frozenset(requested)


class WatchedFrames:
    """A listen stream's frames for a caller some items are hidden from: a change goes on
    only if it changed what the caller sees (:class:`~server.catalog.visibility.ListWatch`)."""

    __slots__ = ("_frames", "_watch")

    def __init__(self, frames: Callable[[Event], bytes | None], watch: ListWatch) -> None:
        self._frames, self._watch = frames, watch

    @property
    def followed(self) -> tuple[str, ...]:
        return getattr(self._frames, "followed", ())

    def __call__(self, change: Event) -> bytes | None:
        return self._frames(change) if self._watch(change) else None
