"""The report's running counters: per client (:class:`ClientStats`) and for the whole input
(:class:`Tally`), bounded by their :class:`Limits`.

Most of what is counted is named by clients, so every collection keyed by such a value is
capped: clients (past it, ``(other clients)``), values per counter and methods (``(other)``),
session and task ids, clients per target, and one budget of distinct values over all of it,
each value cut at ``value_chars``. Totals stay true: what gets no key of its own is counted
under the overflow key. The live report uses the tighter :data:`LIVE_LIMITS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from server.report.sources import RecordFilter
from server.report.tally import Histogram, Targets

# Past this many distinct clients, new ones are folded into one group: a flood of made-up
# user agents must not exhaust memory.
MAX_CLIENTS = 10_000
OVERFLOW_NAME = "(other clients)"
# ISO 8601 times of one format compare as strings; "~" sorts after every digit.
NO_FIRST = "~"
# What a client-named value counts under once its counter (or the budget) is full.
OTHER_VALUE = "(other)"

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


@dataclass(frozen=True, slots=True)
class Limits:
    """How much a report keeps of what clients name (see the module's docstring)."""

    clients: int = MAX_CLIENTS
    # Distinct values per counter of one client: its methods, verbs, versions, error kinds,
    # capability names, methods with a latency.
    values: int = 1_000
    # Distinct methods over all clients (the report has a row per method, a column per client).
    methods: int = 1_000
    # A value (a method, a version, a part of a client's key) is kept to this many characters.
    value_chars: int = 256
    sessions: int = 100_000
    tasks: int = 100_000
    # Clients counted apart per target; the rest of a target's calls count under the overflow.
    clients_per_target: int = MAX_CLIENTS
    # A client's declared capabilities are kept when they encode to at most this many bytes.
    capabilities_bytes: int = 64 * 1024
    # Folded clients told apart (for their number in the report; a lower bound past it).
    folded: int = 100_000
    # Distinct values kept over everything (each a counter key, a session or a task id).
    budget: int = 10_000_000


# The live report: a few hundred clients, a few MB whatever the server is sent (the abuse
# bench's live-report class measures it).
LIVE_LIMITS = Limits(
    clients=500,
    values=32,
    methods=128,
    value_chars=128,
    sessions=1_000,
    tasks=1_000,
    clients_per_target=100,
    capabilities_bytes=1024,
    folded=10_000,
    budget=50_000,
)


class Tally:
    """Everything counted so far, over all clients."""

    def __init__(
        self, record_filter: RecordFilter | None = None, limits: Limits | None = None
    ) -> None:
        self.filter = record_filter if record_filter is not None else RecordFilter()
        self.limits = limits if limits is not None else Limits()
        # What is left of the budget of distinct values (Limits.budget).
        self.budget = self.limits.budget
        # Each method seen, as counted (itself, cut, or OTHER_VALUE past Limits.methods).
        self.methods: dict[str, str] = {}
        self.clients: dict[ClientKey, ClientStats] = {}
        self.overflow: ClientStats | None = None
        # The hashes of the folded clients' keys (their number is all the report tells).
        self.folded: set[int] = set()
        # era -> every method an initialize/discover record of that era advertised.
        self.advertised: dict[str, set[str]] = {}
        self.targets = Targets(self.limits.clients_per_target, self.overflow_stats)
        # "YYYY-MM-DDTHH:MM" -> [requests, failed]
        self.minutes: dict[str, list[int]] = {}
        self.files: list[str] = []
        self.errors: list[str] = []
        self.lines = 0
        self.malformed = 0
        self.unknown_version = 0
        self.unknown_kind = 0
        self.filtered_out = 0
        # Given every line decoded to an object, before it is counted (the live report's
        # retire and tenant scans: one decode for all).
        self.also: Callable[[dict[str, Any]], None] | None = None

    def overflow_stats(self) -> ClientStats:
        """The one client everything past the caps on clients counts into."""
        if self.overflow is None:
            self.overflow = ClientStats((OVERFLOW_NAME, None, None))
        return self.overflow

    def admit(self, held: Any, cap: int, value: str) -> str:
        """The key a new ``value`` counts under in ``held`` (a collection that may hold
        ``cap`` keys): the value cut at ``value_chars``, if ``held`` has it already or there is
        room in it and in the budget, else :data:`OTHER_VALUE`."""
        chars = self.limits.value_chars
        key = value if len(value) <= chars else value[:chars] + "…"
        if key in held:
            return key
        if len(held) >= cap or self.budget <= 0:
            return OTHER_VALUE
        self.budget -= 1
        return key

    def count_new(self, counts: dict[Any, int], value: str) -> None:
        """One more of ``value``, not yet a key of ``counts`` (a client's counter)."""
        key = self.admit(counts, self.limits.values, value)
        counts[key] = counts.get(key, 0) + 1

    def method_of(self, method: str) -> str:
        """A method seen for the first time, as it is counted from now on."""
        if len(self.methods) >= self.limits.methods or self.budget <= 0:
            return OTHER_VALUE  # past the cap nothing more is remembered
        self.budget -= 1
        chars = self.limits.value_chars
        key = self.methods[method] = method if len(method) <= chars else method[:chars] + "…"
        return key

    def count_error(
        self, errors: dict[tuple[str | None, int], int], method: str | None, code: int
    ) -> None:
        key = (method, code)
        if key not in errors:
            if len(errors) >= self.limits.values or self.budget <= 0:
                key = (OTHER_VALUE, code)
            else:
                self.budget -= 1
        errors[key] = errors.get(key, 0) + 1

    def add_session(self, sessions: set[str], session: str) -> None:
        """A session id not seen yet for this client, told apart while there is room."""
        key = self.admit(sessions, self.limits.sessions, session)
        if key != OTHER_VALUE:
            sessions.add(key)

    def histogram_for(self, histograms: dict[str, Any], method: str) -> dict[int, int]:
        """A method's new latency histogram (or ``(other)``'s past the cap)."""
        key = self.admit(histograms, self.limits.values, method)
        histogram: dict[int, int] | None = histograms.get(key)
        if histogram is None:
            histogram = histograms[key] = {}
        return histogram

    def small_capabilities(self, capabilities: dict[str, Any]) -> dict[str, Any]:
        """Declared capabilities as a client's counters keep them: as they are when they
        encode within ``Limits.capabilities_bytes``, else their names only."""
        try:
            size = len(orjson.dumps(capabilities))
        except orjson.JSONEncodeError:
            size = self.limits.capabilities_bytes + 1
        if size <= self.limits.capabilities_bytes:
            return capabilities
        return {
            str(name)[: self.limits.value_chars]: {"_truncated": True}
            for name in list(capabilities)[: self.limits.values]
        }


_TERMINAL = frozenset({"completed", "failed", "cancelled"})


def follow_task(tally: Tally, tasks: dict[str, str], task: Any) -> None:
    """A record's word on a task: its status now, unless the task was seen ending already.
    Past the cap on tasks (or the budget), new tasks are not followed."""
    if type(task) is not dict:
        return
    task_id, status = task.get("id"), task.get("status")
    if type(task_id) is not str or type(status) is not str:
        return
    known = tasks.get(task_id)
    if known is None:
        key = tally.admit(tasks, tally.limits.tasks, task_id)
        if key == OTHER_VALUE:
            return
        task_id = key
        known = tasks.get(task_id)
    if known not in _TERMINAL:
        tasks[task_id] = status[:32]


def tally(statuses: dict[str, str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    return counted
