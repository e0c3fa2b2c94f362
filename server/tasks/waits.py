"""Waiting for a task (``tasks/result``, a blocking ``tasks/get``): until it ends, asks the
client something, or the wait's time is up.

A wait is woken by the task's status changes, made here or announced by the replica running
it (:meth:`Waits.wake`); the task is read again only then, and every :data:`WAIT_BACKSTOP_S` in
case an announcement was lost (the bus keeps nothing for a replica that was away) or the
replica running it died (its lease ran out: no status change will come).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from server.tasks.model import TaskRecord

WAIT_BACKSTOP_S = 5.0


class Waits:
    """What each waiting request waits on, by task: an event set when the task changes."""

    def __init__(self) -> None:
        self.waiting: dict[str, set[asyncio.Event]] = {}

    async def wait(
        self, task_id: str, read: Callable[[], Awaitable[TaskRecord]], timeout_s: float
    ) -> TaskRecord:
        """The task (as ``read`` returns it) once it is terminal or has questions outstanding,
        or as it is after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        changed = asyncio.Event()
        waiting = self.waiting.setdefault(task_id, set())
        waiting.add(changed)
        try:
            while True:
                changed.clear()  # before reading: a change from now on wakes the wait below
                record = await read()
                if record.terminal or (record.status == "input_required" and record.inputs):
                    return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return record
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, WAIT_BACKSTOP_S)):
                        await changed.wait()
        finally:
            waiting.discard(changed)
            if not waiting and self.waiting.get(task_id) is waiting:
                del self.waiting[task_id]

    def wake(self, task_id: str) -> None:
        """The task changed: its waits read it again."""
        for changed in self.waiting.get(task_id, ()):
            changed.set()
