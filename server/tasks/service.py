"""The task runner of this process, and the operations either era's task methods use.

:class:`TaskService` opens tasks in the store before the client hears of them, keeps the
handlers running here (:mod:`~server.tasks.running`), renews their leases
(:mod:`~server.tasks.leases`) and writes how they end. ``get``, ``update``, ``cancel`` and
``wait`` (:mod:`~server.tasks.waits`) work on any replica, reaching the handler's through the
bus. Bounds: the TTL (clamped) also stops the handler at nine tenths of it; tasks per client
and in all are capped; a result over ``max_result_bytes`` fails the task. A task whose replica
died fails after ``lease_s``; a handler whose record vanished is stopped. :meth:`drain` lets
handlers finish within the drain time and fails the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Literal

import orjson

from server.aio import running_loop
from server.errors import INTERNAL_ERROR, ServiceUnavailable
from server.tasks.leases import Leases
from server.tasks.model import ACTIVE, TaskEnded, TaskLimits, TaskRecord, not_found, now_ms
from server.tasks.running import Background, Running
from server.tasks.store import TaskStore
from server.tasks.waits import Waits

log = logging.getLogger(__name__)

Announce = Callable[[str, dict[str, Any]], None]
StatusListener = Callable[[TaskRecord], None]
# How often a handler waiting for answers looks at the store itself, in case a wake-up from
# another replica was lost (the bus keeps nothing for a replica that was away).
ANSWER_BACKSTOP_S = 2.0
PROGRESS_EVERY_S = 0.25
SESSION_PAGE = 100  # tasks of an ended session read (and dropped) at a time


class TaskService:
    def __init__(
        self, store: TaskStore, limits: TaskLimits | None = None, announce: Announce | None = None
    ) -> None:
        self.store = store
        self.limits = limits or TaskLimits()
        self.announce: Announce = announce or (lambda kind, data: None)
        # The handlers running here, by task id: their leases are renewed while there are any.
        self.running: dict[str, Running] = {}
        self.leases = Leases(store, self.running, self.limits.lease_s)
        self.listeners: list[StatusListener] = []
        self.waits = Waits()
        self.background = Background()
        self.closing = False

    # -- running here ----------------------------------------------------------------------

    def ttl(self, requested: Any = None) -> int:
        """The TTL a task gets: the requested one (2025-11-25 ``task.ttl``) within bounds."""
        limits = self.limits
        if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
            return max(limits.min_ttl_ms, min(limits.max_ttl_ms, requested))
        return limits.default_ttl_ms

    async def open(
        self,
        *,
        owner: str | None,
        client: str,
        session: str | None,
        era: Literal["modern", "legacy"],
        tool: str,
        ttl_ms: int | None = None,
        message: str | None = None,
    ) -> TaskRecord:
        """A new task, durable in the store and running here from now on."""
        if self.closing:
            raise ServiceUnavailable("The server is shutting down; call again", retry_after=1.0)
        created = now_ms()
        record = TaskRecord(
            task_id=secrets.token_urlsafe(24),  # 192 random bits: unguessable
            owner=owner,
            client=client,
            session=session,
            era=era,
            tool=tool,
            created_ms=created,
            ttl_ms=ttl_ms or self.limits.default_ttl_ms,
            poll_ms=self.limits.poll_ms,
            message=message,
            updated_ms=created,
        )
        await self.store.create(
            record,
            per_client=self.limits.per_client,
            total=self.limits.total,
            lease_ms=int(self.limits.lease_s * 1000),
        )
        self.running[record.task_id] = Running(record.task_id, created, record.expires_ms)
        self.leases.keep()
        self._status(record)
        return record

    def attach(self, task_id: str, task: asyncio.Task[Any]) -> None:
        """``task`` runs the handler of ``task_id`` (from :meth:`open`) until it ends, or until
        the TTL runs out."""
        entry = self.running[task_id]
        entry.task = task
        # Stopped a little before the record expires, so its failure can still be read.
        ttl_ms = entry.expires_ms - entry.created_ms
        stop_ms = entry.expires_ms - min(ttl_ms // 10, 60_000)
        remaining = max(0.0, (stop_ms - now_ms()) / 1000)
        entry.deadline = running_loop().call_later(remaining, self._expire, task_id)
        task.add_done_callback(lambda _: self._gone(task_id))

    def _gone(self, task_id: str) -> None:
        entry = self.running.pop(task_id, None)
        if entry is None:
            return
        if entry.deadline is not None:
            entry.deadline.cancel()
        self.background.spawn(self.store.release(task_id))

    def _expire(self, task_id: str) -> None:
        message = "The task ran past its time to live and was stopped"
        self.background.spawn(self._stop(task_id, message))

    async def _stop(self, task_id: str, message: str) -> None:
        """Fail a task running here, then stop its handler."""
        await self.fail(task_id, message)
        entry = self.running.get(task_id)
        if entry is not None and entry.task is not None:
            entry.task.cancel()

    async def settle(
        self,
        task_id: str,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Record how the handler ended: its result (``completed``, even for a tool's own
        ``isError``) or a protocol error (``failed``). A no-op when the task already ended."""
        if result is not None:
            size = len(orjson.dumps(result))
            if size > self.limits.max_result_bytes:
                result, error = (
                    None,
                    {
                        "code": INTERNAL_ERROR,
                        "message": f"The result ({size} bytes) is larger than the "
                        f"{self.limits.max_result_bytes} bytes a task may keep",
                    },
                )
        if error is not None:
            record = await self.store.transition(
                task_id, "failed", now_ms=now_ms(), error=error, message=error.get("message")
            )
        else:
            record = await self.store.transition(
                task_id, "completed", now_ms=now_ms(), result=result or {"content": []}
            )
        if record is not None:
            self._status(record)

    async def fail(self, task_id: str, message: str) -> None:
        error = {"code": INTERNAL_ERROR, "message": message}
        with contextlib.suppress(ServiceUnavailable):
            await self.settle(task_id, error=error)

    async def ask(
        self, task_id: str, requests: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """Put ``requests`` to the client (status ``input_required``) and wait until every one
        is answered; the raw answers by key."""
        entry = self.running[task_id]
        record = await self.store.transition(
            task_id, "input_required", now_ms=now_ms(), inputs=requests
        )
        if record is None:
            raise TaskEnded
        self._status(record)
        pending = set(requests)
        answers: dict[str, dict[str, Any]] = {}
        while pending:
            entry.wake.clear()
            taken = await self.store.take_answers(task_id, pending)
            if taken:
                answers.update(taken)
                pending -= taken.keys()
                continue
            try:
                async with asyncio.timeout(ANSWER_BACKSTOP_S):
                    await entry.wake.wait()
            except TimeoutError:
                current = await self.store.get(task_id)
                if current is None or current.terminal:
                    raise TaskEnded from None
        record = await self.store.transition(task_id, "working", now_ms=now_ms())
        if record is None:
            raise TaskEnded
        self._status(record)
        return answers

    async def progress(self, task_id: str, message: str) -> None:
        """A handler's progress, as its status message (written at most every 250 ms)."""
        entry = self.running.get(task_id)
        if entry is None:
            return
        moment = time.monotonic()
        if moment - entry.progress_at < PROGRESS_EVERY_S:
            if entry.progress_pending is None:
                delay = PROGRESS_EVERY_S - (moment - entry.progress_at)
                running_loop().call_later(delay, self._flush_progress, task_id)
            entry.progress_pending = message
            return
        entry.progress_at = moment
        with contextlib.suppress(ServiceUnavailable):
            await self.store.set_message(task_id, message, now_ms=now_ms())

    def _flush_progress(self, task_id: str) -> None:
        entry = self.running.get(task_id)
        if entry is None or entry.progress_pending is None:
            return
        message, entry.progress_pending = entry.progress_pending, None
        entry.progress_at = time.monotonic()
        self.background.spawn(self.store.set_message(task_id, message, now_ms=now_ms()))

    # -- what clients drive, on any replica -----------------------------------------------

    async def get(self, task_id: str, owner: str | None) -> TaskRecord:
        """The caller's task; -32602 for a task unknown, expired or someone else's."""
        record = await self.store.get(task_id)
        if record is None or record.owner != owner:
            raise not_found(task_id)
        if record.status in ACTIVE and not record.alive and task_id not in self.running:
            seconds = f"{self.limits.lease_s:g}"
            failed = await self.store.transition(
                task_id,
                "failed",
                now_ms=now_ms(),
                error={
                    "code": INTERNAL_ERROR,
                    "message": "The server running this task stopped before it finished "
                    f"(no sign of life for {seconds} s)",
                },
                message="The server running this task stopped",
            )
            if failed is not None:
                self._status(failed)
                return failed
            record = await self.store.get(task_id) or record
        return record

    async def update(
        self, task_id: str, owner: str | None, responses: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Answers to the task's questions (unknown or answered keys are ignored)."""
        await self.get(task_id, owner)
        taken = await self.store.deliver(task_id, responses, now_ms=now_ms())
        if not taken:
            return
        entry = self.running.get(task_id)
        if entry is not None:
            entry.wake.set()
        else:
            self.announce("task", {"op": "wake", "id": task_id})

    async def cancel(self, task_id: str, owner: str | None) -> tuple[TaskRecord, bool]:
        """Cancel the caller's task: (its record now, whether this cancelled it). An ended task
        is left as it is."""
        record = await self.get(task_id, owner)
        if record.terminal:
            return record, False
        cancelled = await self.store.transition(
            task_id, "cancelled", now_ms=now_ms(), message="Cancelled at the client's request"
        )
        if cancelled is None:  # it ended meanwhile
            return await self.get(task_id, owner), False
        self._stop_handler(task_id)
        self._status(cancelled)
        return cancelled, True

    async def end_session(self, session: str) -> int:
        """A legacy session ended (DELETE): its tasks are forgotten, their slots freed, and the
        handlers of those still running stopped, here or through the bus; how many there were.
        """
        ended = 0
        while True:  # the store drops what was read: the next page is at the start again
            page, more = await self.store.session_tasks(session, 0, SESSION_PAGE)
            if not page:
                break
            ended += len(page)
            for record in page:  # before the records go: a stopping handler is not "vanished"
                if record.status in ACTIVE:
                    self._stop_handler(record.task_id)
            await self.store.drop(page)
            if not more:
                break
        return ended

    def _stop_handler(self, task_id: str) -> None:
        entry = self.running.get(task_id)
        if entry is not None and entry.task is not None:
            entry.task.cancel()
        else:
            self.announce("task", {"op": "cancel", "id": task_id})

    async def wait(self, task_id: str, owner: str | None, timeout_s: float) -> TaskRecord:
        """The caller's task once it is terminal or has questions outstanding, or as it is
        after ``timeout_s`` (:meth:`Waits.wait <server.tasks.waits.Waits.wait>`)."""
        return await self.waits.wait(task_id, partial(self.get, task_id, owner), timeout_s)

    # -- the bus, status -----------------------------------------------------------------

    def remote(self, data: Mapping[str, Any]) -> None:
        """What another replica announced about a task."""
        op, task_id = data.get("op"), data.get("id")
        if op == "status" and isinstance(data.get("record"), dict):
            try:
                record = TaskRecord.from_json(data["record"])
            except (TypeError, ValueError):
                return
            for listener in list(self.listeners):
                listener(record)
            self.waits.wake(record.task_id)
            return
        if not isinstance(task_id, str):
            return
        entry = self.running.get(task_id)
        if entry is None:
            return
        if op == "wake":
            entry.wake.set()
        elif op == "cancel" and entry.task is not None:
            entry.task.cancel()

    def _status(self, record: TaskRecord) -> None:
        self.waits.wake(record.task_id)
        for listener in list(self.listeners):
            try:
                listener(record)
            except Exception:
                log.exception("a task status listener failed")
        self.announce("task", {"op": "status", "record": record.to_json()})

    async def drain(self, timeout_s: float) -> None:
        """Shutdown: no new tasks; running handlers get ``timeout_s`` to finish, the rest are
        failed (their records stay for the other replicas) and stopped."""
        self.closing = True
        tasks = [entry.task for entry in self.running.values() if entry.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        for task_id in list(self.running):
            await self._stop(task_id, "The server shut down before the task finished")
        leftovers = [entry.task for entry in self.running.values() if entry.task is not None]
        if leftovers:
            await asyncio.wait(leftovers, timeout=1.0)
        self.leases.stop()
        await self.background.finish(1.0)
