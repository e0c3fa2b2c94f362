"""A task's record, as the store keeps it and every replica reads it, and its wire forms.

:class:`TaskRecord` is plain data (:meth:`TaskRecord.to_json`): ``owner`` (the caller's
subject) and ``session`` (2025-11-25), status and times, the questions outstanding, answers
not yet taken, and the final ``result`` or ``error``; ``alive`` comes from the store's lease.
Beside it the shared vocabulary: :class:`TaskLimits`, task id checks, the -32602 of an unknown
task, :class:`TaskEnded`. Wire forms: 2026-07-28 (SEP-2663) says ``ttlMs``/``pollIntervalMs``
and inlines the outcome in ``tasks/get``; 2025-11-25 says ``ttl``/``pollInterval`` and hands
the result out through ``tasks/result``.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from server.errors import InvalidParams

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
ACTIVE: Final = frozenset({"working", "input_required"})
MAX_TASK_ID = 128
TASK_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TASK_ID}}}")  # token_urlsafe's alphabet


class TaskEnded(BaseException):
    """Unwinds a handler whose task ended elsewhere (cancelled, failed) while it waited.

    A BaseException, like cancellation, so that a handler's ``except Exception`` lets it pass."""


def now_ms() -> int:
    return int(time.time() * 1000)


def not_found(task_id: Any) -> InvalidParams:
    return InvalidParams("Failed to retrieve task: Task not found", {"taskId": task_id})


def checked_task_id(params: Mapping[str, Any]) -> str:
    """``params.taskId``, when it is a string; one this server cannot have made is unknown
    (-32602) before any store sees it."""
    task_id = params.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise InvalidParams("params.taskId must be a task id (a non-empty string)")
    if not TASK_ID.fullmatch(task_id):
        raise not_found(task_id[:MAX_TASK_ID])
    return task_id


@dataclass(frozen=True)
class TaskLimits:
    default_ttl_ms: int = 3_600_000
    min_ttl_ms: int = 10_000
    max_ttl_ms: int = 86_400_000
    poll_ms: int = 1000
    lease_s: float = 10.0
    per_client: int = 100
    total: int = 10_000
    max_result_bytes: int = 1024 * 1024


def iso(ms: int) -> str:
    """An ISO 8601 UTC timestamp with milliseconds."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass
class TaskRecord:
    task_id: str
    owner: str | None  # the subject that created it; None without authentication
    client: str  # the key its limits count under
    session: str | None  # the legacy session that created it
    era: Literal["modern", "legacy"]
    tool: str
    created_ms: int
    ttl_ms: int
    poll_ms: int
    status: TaskStatus = "working"
    message: str | None = None
    updated_ms: int = 0
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    alive: bool = True

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def expires_ms(self) -> int:
        return self.created_ms + self.ttl_ms

    def outcome(self) -> dict[str, str]:
        """What a request record says of the task: its id and status as answered."""
        return {"id": self.task_id, "status": self.status}

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("alive")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        return cls(**{key: value for key, value in data.items() if key != "alive"})

    # -- wire ------------------------------------------------------------------------------

    def task(self, *, legacy: bool = False) -> dict[str, Any]:
        """The Task fields: what a CreateTaskResult (flat in 2026-07-28) carries."""
        wire: dict[str, Any] = {"taskId": self.task_id, "status": self.status}
        if self.message is not None:
            wire["statusMessage"] = self.message
        wire["createdAt"] = iso(self.created_ms)
        wire["lastUpdatedAt"] = iso(self.updated_ms or self.created_ms)
        if legacy:
            wire["ttl"] = self.ttl_ms
            wire["pollInterval"] = self.poll_ms
        else:
            wire["ttlMs"] = self.ttl_ms
            wire["pollIntervalMs"] = self.poll_ms
        return wire

    def detailed(self) -> dict[str, Any]:
        """The DetailedTask of 2026-07-28: the status's payload inlined."""
        wire = self.task()
        if self.status == "input_required":
            wire["inputRequests"] = dict(self.inputs)
        elif self.status == "completed" and self.result is not None:
            wire["result"] = self.result
        elif self.status == "failed":
            wire["error"] = self.error or {"code": -32603, "message": "The task failed"}
        return wire
