"""Every shared-state interface's in-process flavour: one replica, nothing to share.

The sibling of :mod:`server.state.redis`, chosen by :func:`server.state.auto.shared_state`
without ``MCP_REDIS_URL``: :class:`MemorySessionStore` (sessions in a dict, least recently used
first, idle expiry, a cap); :class:`MemoryBus` (every event was handled where it happened);
:class:`MemoryMirror` (every stream is here already); :class:`MemoryTaskStore` (records in a
dict until their TTL, expiry swept from a heap on every operation, no timer; the caps count
the records kept; every task is alive, since this process runs the handlers).
"""

from __future__ import annotations

import copy
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from server.catalog import Change
from server.hub import MAX_RESOURCE_SUBSCRIPTIONS
from server.legacy.eventstream import Copy, EventStream
from server.legacy.sessions import Session, SessionLimit, SubscriptionLimit, new_session_id
from server.state.bus import Deliver
from server.tasks.model import ACTIVE, TERMINAL, TaskRecord, TaskStatus
from server.tasks.store import TaskLimit


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemoryTaskStore:
    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._expiry: list[tuple[int, str]] = []
        self._by_client: dict[str, set[str]] = {}
        self._by_session: dict[str, list[str]] = {}

    def __len__(self) -> int:
        self._sweep()
        return len(self._records)

    def _sweep(self) -> None:
        now = _now_ms()
        while self._expiry and self._expiry[0][0] <= now:
            _, task_id = heapq.heappop(self._expiry)
            self._forget(task_id)

    def _forget(self, task_id: str) -> None:
        record = self._records.pop(task_id, None)
        if record is None:  # dropped before it expired: its heap entry is all that stayed
            return
        owned = self._by_client.get(record.client)
        if owned is not None:
            owned.discard(task_id)
            if not owned:
                del self._by_client[record.client]
        if record.session is not None:
            listed = self._by_session.get(record.session)
            if listed is not None:
                # Oldest first, and expiry follows creation for equal TTLs: usually the head.
                if task_id in listed:
                    listed.remove(task_id)
                if not listed:
                    del self._by_session[record.session]

    async def create(
        self, record: TaskRecord, *, per_client: int, total: int, lease_ms: int
    ) -> None:
        self._sweep()
        if len(self._records) >= total:
            raise TaskLimit(f"This server keeps at most {total} tasks; try again later")
        owned = self._by_client.setdefault(record.client, set())
        if len(owned) >= per_client:
            raise TaskLimit(
                f"At most {per_client} tasks are kept per client until they expire; try again later"
            )
        self._records[record.task_id] = copy.deepcopy(record)
        owned.add(record.task_id)
        heapq.heappush(self._expiry, (record.expires_ms, record.task_id))
        if record.session is not None:
            self._by_session.setdefault(record.session, []).append(record.task_id)

    async def get(self, task_id: str) -> TaskRecord | None:
        self._sweep()
        record = self._records.get(task_id)
        return copy.deepcopy(record) if record is not None else None

    async def transition(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        now_ms: int,
        message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> TaskRecord | None:
        self._sweep()
        record = self._records.get(task_id)
        if record is None or record.status not in ACTIVE:
            return None
        record.status = status
        record.updated_ms = now_ms
        if message is not None:
            record.message = message
        if status in TERMINAL:
            record.inputs = {}
            record.answers = {}
            record.result = dict(result) if result is not None else None
            record.error = dict(error) if error is not None else None
        elif inputs:
            record.inputs.update({key: dict(value) for key, value in inputs.items()})
        return copy.deepcopy(record)

    async def deliver(
        self, task_id: str, responses: Mapping[str, Mapping[str, Any]], *, now_ms: int
    ) -> list[str]:
        self._sweep()
        record = self._records.get(task_id)
        if record is None or record.status not in ACTIVE:
            return []
        taken = [key for key in responses if key in record.inputs]
        for key in taken:
            del record.inputs[key]
            record.answers[key] = dict(responses[key])
        if taken:
            record.updated_ms = now_ms
        return taken

    async def take_answers(self, task_id: str, keys: Iterable[str]) -> dict[str, Any]:
        record = self._records.get(task_id)
        if record is None:
            return {}
        return {key: record.answers.pop(key) for key in list(keys) if key in record.answers}

    async def set_message(self, task_id: str, message: str, *, now_ms: int) -> None:
        record = self._records.get(task_id)
        if record is not None and record.status in ACTIVE:
            record.message = message
            record.updated_ms = now_ms

    async def heartbeat(
        self, task_ids: Iterable[str], *, lease_ms: int
    ) -> dict[str, TaskStatus | None]:
        self._sweep()
        ended: dict[str, TaskStatus | None] = {}
        for task_id in task_ids:
            record = self._records.get(task_id)
            if record is None or record.status not in ACTIVE:
                ended[task_id] = None if record is None else record.status
        return ended

    async def release(self, task_id: str) -> None:
        return None

    async def session_tasks(
        self, session: str, offset: int, limit: int
    ) -> tuple[list[TaskRecord], bool]:
        self._sweep()
        listed = self._by_session.get(session, [])
        page = [
            copy.deepcopy(self._records[task_id]) for task_id in listed[offset : offset + limit]
        ]
        return page, offset + limit < len(listed)

    async def drop(self, records: Iterable[TaskRecord]) -> None:
        for record in records:
            self._forget(record.task_id)


def _never(session_id: str) -> bool:
    return False


def _ignore(session_id: str) -> None:
    return None


class MemorySessionStore:
    """Sessions in this process, least recently used first.

    ``busy`` says whether a session still has work or a stream open here (then it is not
    idle, whatever its clock says); ``ended`` hears of every session that ends by expiry, so
    what the process holds for it is released too.
    """

    def __init__(
        self,
        *,
        max_sessions: int,
        idle_timeout_s: float,
        busy: Callable[[str], bool] = _never,
        ended: Callable[[str], None] = _ignore,
        max_subscriptions: int = MAX_RESOURCE_SUBSCRIPTIONS,
    ) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.max_subscriptions = max_subscriptions
        self._busy = busy
        self._ended = ended
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._subscriptions: dict[str, set[str]] = {}

    async def create(
        self,
        protocol_version: str,
        client_info: dict[str, Any],
        capabilities: dict[str, Any],
        *,
        owner: str | None = None,
    ) -> Session:
        if len(self._sessions) >= self.max_sessions:
            await self.expire()  # idle ones make room first; busy ones are kept
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimit(
                f"Too many sessions ({self.max_sessions}); end unused sessions or retry later"
            )
        session = Session(new_session_id(), protocol_version, client_info, capabilities)
        session.owner = owner
        self._sessions[session.id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = time.monotonic()
        if now - session.last_seen > self.idle_timeout_s and not self._busy(session_id):
            self._forget(session_id)
            self._ended(session_id)
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    async def save(self, session: Session) -> None:
        if session.id in self._sessions:
            self._sessions[session.id] = session

    async def subscribe(self, session_id: str, uri: str) -> bool:
        if session_id not in self._sessions:
            return False
        uris = self._subscriptions.setdefault(session_id, set())
        if uri in uris:
            return False
        if len(uris) >= self.max_subscriptions:
            raise SubscriptionLimit(self.max_subscriptions)
        uris.add(uri)
        return True

    async def unsubscribe(self, session_id: str, uri: str) -> bool:
        uris = self._subscriptions.get(session_id)
        if uris is None or uri not in uris:
            return False
        uris.discard(uri)
        return True

    async def subscriptions(self, session_id: str) -> set[str]:
        return set(self._subscriptions.get(session_id, ()))

    async def delete(self, session_id: str) -> bool:
        return self._forget(session_id)

    def _forget(self, session_id: str) -> bool:
        self._subscriptions.pop(session_id, None)
        return self._sessions.pop(session_id, None) is not None

    async def expire(self) -> list[str]:
        now = time.monotonic()
        cutoff = now - self.idle_timeout_s
        ended = []
        # Least recently used first: stop at the first session used within the timeout.
        for session_id, session in list(self._sessions.items()):
            if session.last_seen > cutoff:
                break
            if self._busy(session_id):
                session.last_seen = now
                self._sessions.move_to_end(session_id)
                continue
            self._forget(session_id)
            ended.append(session_id)
            self._ended(session_id)
        return ended

    def count(self) -> int:
        return len(self._sessions)


class MemoryBus:
    """One process: every event was already handled where it happened."""

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        return None

    async def send(self, kind: str, data: dict[str, Any]) -> bool | None:
        return None

    def start(self, deliver: Deliver) -> None:
        return None

    async def hold(self, session_id: str) -> None:
        return None

    def release(self, session_id: str) -> None:
        return None

    async def stream_held(self, session_id: str) -> bool:
        return True  # if anywhere, here (the transport looked first)

    async def close(self) -> None:
        return None

    def status(self) -> dict[str, Any]:
        return {"kind": "local"}


class MemoryMirror:
    """One process: every stream is here already, so nothing is copied or read back."""

    def track(self, session_id: str, stream: EventStream) -> None:
        return None

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        return None

    async def missed(self, copy: Copy | None) -> list[Change] | None:
        return []  # every change reached this process's streams

    def forget(self, session_id: str) -> None:
        pass  # the streams went with the session's runtime

    async def tail(self, session_id: str, stream: EventStream) -> None:
        return None

    def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
