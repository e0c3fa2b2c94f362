"""Where task records live: the interface both flavours implement.

:class:`server.state.memory.MemoryTaskStore` in one process, or
:class:`server.state.redis.tasks.RedisTaskStore` shared by every replica. The rules both keep:
``create`` is durable before it returns and counts against the caps; a terminal status is
final (a cancel and the handler's finish race, the first wins); a record lives for its TTL
unless :meth:`drop` forgets it sooner; the lease (:meth:`heartbeat`) says the running replica
is alive, and the heartbeat reports the tasks running here whose records ended or vanished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from server.errors import ServiceUnavailable
from server.tasks.model import TaskRecord, TaskStatus


class TaskLimit(ServiceUnavailable):
    """Too many tasks kept, for this client or in all (503 with Retry-After)."""


class TaskStore(Protocol):
    async def create(
        self, record: TaskRecord, *, per_client: int, total: int, lease_ms: int
    ) -> None:
        """Store a new task and its lease; :class:`TaskLimit` past a cap."""

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task, with ``alive`` from its lease; None if unknown or expired."""

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
        """Move an active task to ``status`` (``inputs`` are added to the outstanding
        questions; a terminal status clears them). None if the task is gone or already
        terminal: nothing changed."""

    async def deliver(
        self, task_id: str, responses: Mapping[str, Mapping[str, Any]], *, now_ms: int
    ) -> list[str]:
        """Keep the answers to outstanding questions (others are ignored) for the handler;
        the keys taken, which are no longer outstanding."""

    async def take_answers(self, task_id: str, keys: Iterable[str]) -> dict[str, Any]:
        """Remove and return the delivered answers among ``keys``."""

    async def set_message(self, task_id: str, message: str, *, now_ms: int) -> None:
        """The status message of an active task (progress)."""

    async def heartbeat(
        self, task_ids: Iterable[str], *, lease_ms: int
    ) -> dict[str, TaskStatus | None]:
        """Renew the leases of tasks running here that are still active; those that are not,
        with their status, or None for a record that is gone (expired, dropped, or lost with
        the store's data): their handlers have nothing left to run for."""

    async def release(self, task_id: str) -> None:
        """Drop the lease of a task that no longer runs here."""

    async def session_tasks(
        self, session: str, offset: int, limit: int
    ) -> tuple[list[TaskRecord], bool]:
        """A page of a legacy session's tasks, oldest first, and whether more follow."""

    async def drop(self, records: Iterable[TaskRecord]) -> None:
        """Forget these tasks now (records, leases, and their places in the caps)."""
