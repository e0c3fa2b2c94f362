"""What a handler's context talks through once its call runs as a task.

Questions become the task's ``inputRequests`` (status ``input_required``) and the handler
waits for the client's answers, delivered on any replica (``tasks/update``, or the 2025-11-25
``tasks/result`` stream). Keys are unique over the task's life, as SEP-2663 requires: a key asked
again gets a suffix, and an answer that does not parse is asked again under a new key.

Progress becomes the task's status message: neither era streams a task's notifications on the
request that created it (it has been answered), and 2026-07-28 sends none on listen streams.
Log messages go to ``forward`` when the era has a place for them (the 2025-11-25 session's
stream), and nowhere otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from server.context import InputRequest
from server.tasks.service import TaskService

Forward = Callable[[str, dict[str, Any]], Awaitable[None]]


def progress_text(params: dict[str, Any]) -> str:
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    amount = f"{progress:g}" if isinstance(progress, int | float) else str(progress)
    if isinstance(total, int | float):
        amount += f" of {total:g}"
    return f"{message} ({amount})" if message else f"Progress: {amount}"


class TaskExchange:
    def __init__(self, service: TaskService, task_id: str, forward: Forward | None = None) -> None:
        self.service = service
        self.task_id = task_id
        self._forward = forward
        self._used: set[str] = set()

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/progress":
            await self.service.progress(self.task_id, progress_text(params))
        if self._forward is not None:
            await self._forward(method, params)

    def close_stream(self) -> None:
        """A task has no stream of its own to close."""

    def _unique(self, key: str) -> str:
        candidate, number = key, 1
        while candidate in self._used:
            number += 1
            candidate = f"{key}-{number}"
        self._used.add(candidate)
        return candidate

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        asked = {self._unique(key): key for key in requests}
        wire = {unique: requests[key].to_wire() for unique, key in asked.items()}
        answers: dict[str, Any] = {}
        while wire:
            raw = await self.service.ask(self.task_id, wire)
            again: dict[str, dict[str, Any]] = {}
            for unique, response in raw.items():
                key = asked[unique]
                try:
                    answers[key] = requests[key].parse(response)
                except ValueError:
                    retry = self._unique(key)
                    asked[retry] = key
                    again[retry] = wire[unique]
            wire = again
        return answers
