"""What this process keeps of the task handlers it runs: one :class:`Running` entry per handler,
and the bookkeeping writes spawned beside them (:class:`Background`).

A handler's entry holds its asyncio task, the deadline its TTL sets, the event that wakes it
when answers arrive, and its throttled progress message. A bookkeeping write (a lease released,
a progress message flushed, a task stopped at its deadline) runs as a task of its own, so the
handler never waits for it; a failure other than Redis being away is logged, and shutdown waits
a little for the writes still under way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from server.errors import ServiceUnavailable

log = logging.getLogger(__name__)


@dataclass
class Running:
    """A handler running here as a task."""

    task_id: str
    created_ms: int
    expires_ms: int
    task: asyncio.Task[Any] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    deadline: asyncio.TimerHandle | None = None
    progress_at: float = 0.0
    progress_pending: str | None = None


class Background:
    """Bookkeeping writes under way, held (the loop keeps no reference) until they end."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failure = task.exception()
            if not isinstance(failure, ServiceUnavailable):
                log.error("task bookkeeping failed: %r", failure)

    async def finish(self, timeout_s: float) -> None:
        """Shutdown: give the writes under way ``timeout_s`` to end."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    def __len__(self) -> int:
        return len(self._tasks)
