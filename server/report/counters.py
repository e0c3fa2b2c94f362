"""The report's running counters: per client (:class:`ClientStats`) and for the whole input
(:class:`Tally`), which :class:`~server.report.aggregate.Aggregator` fills and
:func:`~server.report.build.build_report` reads. Plain mutable state, bounded (see the caps).
"""

from __future__ import annotations

from typing import Any

from server.report.filters import RecordFilter
from server.report.measures import Histogram
from server.report.targets import Targets

# Past this many distinct clients, new ones are folded into one group: a flood of made-up
# user agents must not exhaust memory.
MAX_CLIENTS = 10_000
OVERFLOW_NAME = "(other clients)"
# ISO 8601 times of one format compare as strings; "~" sorts after every digit.
NO_FIRST = "~"

ClientKey = tuple[str | None, str | None, str | None]


class ClientStats:
    """Running counters for one client (mutable, only touched by the aggregator)."""

    __slots__ = (
        "advertised",
        "body_versions",
        "calls",
        "capabilities",
        "capabilities_time",
        "capability_names",
        "eras",
        "errors",
        "failed",
        "first",
        "header_versions",
        "http_statuses",
        "key",
        "last",
        "latency",
        "listen_resources",
        "no_method",
        "notes",
        "pseudo",
        "requests",
        "sessions",
        "stream_ends",
        "stream_events",
        "streams",
        "tasks",
        "transports",
        "ttfb",
        "verbs",
    )

    def __init__(self, key: ClientKey) -> None:
        self.key = key
        self.first = NO_FIRST
        self.last = ""
        self.requests = 0
        self.failed = 0
        self.calls: dict[str, int] = {}
        self.notes: dict[str, int] = {}
        self.pseudo: dict[str, int] = {}
        self.no_method = 0
        self.verbs: dict[str, int] = {}
        self.eras: dict[str, int] = {}
        # "<transport>/<era>" -> requests: who still uses the 2024-11-05 HTTP+SSE transport.
        self.transports: dict[str, int] = {}
        self.header_versions: dict[str, int] = {}
        self.body_versions: dict[str, int] = {}
        self.capability_names: set[str] = set()
        self.capabilities: Any = None
        self.capabilities_time = ""
        # era -> methods its own initialize/discover records advertised.
        self.advertised: dict[str, set[str]] = {}
        # (method, code) -> count; method None for requests that named none.
        self.errors: dict[tuple[str | None, int], int] = {}
        self.http_statuses: dict[int, int] = {}
        self.sessions: set[str] = set()
        self.streams = 0
        self.stream_events = 0
        self.stream_ends: dict[str, int] = {}
        self.latency: dict[str, Histogram] = {}
        self.ttfb: dict[str, Histogram] = {}
        # Listen requests that asked for resource updates (the 2026-07-28 subscriptions).
        self.listen_resources = 0
        # Task id -> the last status a record showed (an ended task's status is kept).
        self.tasks: dict[str, str] = {}


class Tally:
    """Everything counted so far, over all clients."""

    def __init__(self, record_filter: RecordFilter | None = None) -> None:
        self.filter = record_filter if record_filter is not None else RecordFilter()
        self.clients: dict[ClientKey, ClientStats] = {}
        self.overflow: ClientStats | None = None
        self.folded: set[ClientKey] = set()
        # era -> every method an initialize/discover record of that era advertised.
        self.advertised: dict[str, set[str]] = {}
        self.targets = Targets()
        # "YYYY-MM-DDTHH:MM" -> [requests, failed]
        self.minutes: dict[str, list[int]] = {}
        self.files: list[str] = []
        self.errors: list[str] = []
        self.lines = 0
        self.malformed = 0
        self.unknown_version = 0
        self.unknown_kind = 0
        self.filtered_out = 0


# Tasks followed per client (their last status seen); past it, new ones are not followed.
MAX_TASKS_PER_CLIENT = 100_000
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def follow_task(tasks: dict[str, str], task: Any) -> None:
    """A record's word on a task: its status now, unless the task was seen ending already."""
    if type(task) is not dict:
        return
    task_id, status = task.get("id"), task.get("status")
    if type(task_id) is not str or type(status) is not str:
        return
    known = tasks.get(task_id)
    if known is None and len(tasks) >= MAX_TASKS_PER_CLIENT:
        return
    if known not in _TERMINAL:
        tasks[task_id] = status


def tally(statuses: dict[str, str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    return counted
