"""The leases of the task handlers running here: renewed while they run, so that the other
replicas can tell a task whose replica died (its lease runs out) from one still working.

Each renewal also tells which of this process's tasks ended meanwhile (a cancel whose message
on the bus was lost) or vanished from the store (Redis restarted empty, was flushed, or evicted
them): their handlers are stopped, so nothing runs that no one can see or cancel.
"""

from __future__ import annotations

import asyncio
import logging

from server.errors import ServiceUnavailable
from server.tasks.running import Running
from server.tasks.store import TaskStore

log = logging.getLogger(__name__)


class Leases:
    """Renews the leases of the handlers in ``running`` (the service's table of them) every
    third of ``lease_s``, while there are any."""

    def __init__(self, store: TaskStore, running: dict[str, Running], lease_s: float) -> None:
        self.store = store
        self.running = running
        self.lease_s = lease_s
        self.heartbeat: asyncio.Task[None] | None = None

    def keep(self) -> None:
        """A handler started here: renew the leases, unless that is under way already."""
        if self.heartbeat is None or self.heartbeat.done():
            self.heartbeat = asyncio.create_task(self._renew(), name="task-leases")

    def stop(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()

    async def _renew(self) -> None:
        interval = max(0.2, self.lease_s / 3)
        lease_ms = int(self.lease_s * 1000)
        seen_ended: set[str] = set()
        while self.running:
            try:
                ended = await self.store.heartbeat(list(self.running), lease_ms=lease_ms)
                # A handler settling its own task may be seen ended for one beat: it is
                # stopped only if it still runs at the next.
                seen_ended, previously = set(), seen_ended
                for task_id, status in ended.items():
                    if status is None or task_id in previously:
                        self.orphaned(task_id, status)
                    else:
                        seen_ended.add(task_id)
            except ServiceUnavailable:
                pass  # Redis away: the link logs it; the next beat retries
            except Exception:
                log.exception("renewing task leases failed")
            await asyncio.sleep(interval)

    def orphaned(self, task_id: str, status: str | None) -> None:
        """A handler running here whose task ended (a cancel whose message was lost) or whose
        record vanished: it is stopped, so nothing runs that no one can see or cancel.

        A vanished record (Redis restarted empty, was flushed, or evicted it) is logged as an
        error naming the task: clients asking for it now get "task not found". It is not written
        back as failed: the store is the truth, and a record dropped on purpose (the DELETE of
        its legacy session, whose cancel did not reach this replica) must not come back and
        take its client's slot again."""
        entry = self.running.get(task_id)
        if entry is None or entry.task is None or entry.task.done() or entry.task.cancelling():
            return  # not started, or already ending
        if status is None:
            log.error(
                "task %s vanished from the task store while its handler ran here (Redis "
                "restarted empty, flushed or evicted it?); the handler is stopped and clients "
                "asking for the task get 'task not found'",
                task_id,
            )
        entry.task.cancel()
