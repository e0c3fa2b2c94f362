"""Task records in this process (one replica): the :class:`~server.tasks.store.TaskStore`
without Redis.

Records live in a dict and leave it at their TTL: a heap of expiry times is swept on every
operation, so expiry costs a logarithm per task and nothing runs on a timer. The caps count
the records kept (running or finished, until they expire), per client and in all. Leases are
moot here (the process that keeps the records runs the handlers): every task is alive.
"""

from __future__ import annotations

import copy
import heapq
import time
from collections.abc import Iterable, Mapping
from typing import Any

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
