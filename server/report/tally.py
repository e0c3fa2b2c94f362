"""What the report measures in constant space, and its bounded tallies of calls by target.

A latency goes into a logarithmic bucket (32 per doubling: a quantile read back is within 1.1%),
so a histogram has a few hundred entries whatever the number of records and p50 <= p95 <= p99
<= max always holds. Outcomes are what a call came to (the record's ``outcome``); error codes
get their names here. A target is ``(kind, name)`` (``tool``, ``prompt``, ``resource``,
``template``) from the record's ``target`` (older records: ``params.name`` / ``params.uri``), a
call refused before it named anything under ``(unresolved)``; each counts, per client, calls,
outcomes, error codes and latency (a streamed answer ``unknown`` until its stream record ends
it). Names come from clients: cut to :data:`MAX_TARGET_CHARS`, past :data:`MAX_TARGETS` counted
as ``(other)``, clients past ``max_clients`` as ``(other clients)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from server.protocol import CALL_KIND_BY_METHOD

# 32 buckets per doubling of (1 + microseconds).
BUCKETS_PER_DOUBLING = 32
QUANTILES = (0.5, 0.95, 0.99)

Histogram = dict[int, int]

# Methods whose records carry a target (the tool, prompt or resource) and an outcome.
CALL_METHODS = CALL_KIND_BY_METHOD
OUTCOMES = ("ok", "is_error", "crash", "error", "input_required", "unknown")
# The outcomes that count as a failed request (with a JSON-RPC error or an HTTP status >= 400).
FAILED_OUTCOMES = frozenset({"is_error", "crash"})

# The codes of server.errors, by value: the report reads records, not the server (a test
# keeps the two in step).
ERROR_NAMES = {
    -32700: "Parse error",
    -32600: "Invalid request",
    -32601: "Method not found",
    -32602: "Invalid params",
    -32603: "Internal error",
    -32002: "Resource not found",
    -32020: "Header mismatch",
    -32021: "Missing client capability",
    -32022: "Unsupported protocol version",
    -32000: "Service unavailable",
}


def error_name(code: int) -> str:
    """The code's name; JSON-RPC's reserved range and the server range are named as such."""
    known = ERROR_NAMES.get(code)
    if known is not None:
        return known
    if -32099 <= code <= -32000:
        return "Server error"
    if -32768 <= code <= -32000:
        return "Reserved error"
    return "Application error"


def bucket(milliseconds: float) -> int:
    """The histogram bucket of a duration (negative durations count as zero)."""
    if milliseconds <= 0.0:
        return 0
    return int(math.log2(1.0 + milliseconds * 1000.0) * BUCKETS_PER_DOUBLING)


def bucket_value(index: int) -> float:
    """A bucket's representative duration in milliseconds: the middle of its range."""
    if index <= 0:
        return 0.0
    return float(2.0 ** ((index + 0.5) / BUCKETS_PER_DOUBLING) - 1.0) / 1000.0


def merge(target: Histogram, source: Histogram) -> None:
    for index, count in source.items():
        target[index] = target.get(index, 0) + count


@dataclass(frozen=True, slots=True)
class Latency:
    """Quantiles of one histogram, in milliseconds (rounded to 3 decimals)."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float

    def to_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
            "max": self.max,
        }


def latency(histogram: Histogram) -> Latency | None:
    """The quantiles of ``histogram``; None when it is empty."""
    total = sum(histogram.values())
    if not total:
        return None
    ordered = sorted(histogram.items())
    wanted = [max(1, math.ceil(q * total)) for q in QUANTILES]
    found: list[float] = []
    seen = 0
    position = 0
    for index, count in ordered:
        seen += count
        while position < len(wanted) and seen >= wanted[position]:
            found.append(round(bucket_value(index), 3))
            position += 1
    top = round(bucket_value(ordered[-1][0]), 3)
    return Latency(total, found[0], found[1], found[2], top)


def merged(histograms: Iterable[Histogram]) -> Histogram:
    total: Histogram = {}
    for histogram in histograms:
        merge(total, histogram)
    return total


MAX_TARGETS = 2_000
OTHER_TARGET = "(other)"
UNKNOWN_TARGET = "(unresolved)"
_ABSENT = object()
MAX_TARGET_CHARS = 200
# Index of each outcome in a target's counters (index 0 counts calls).
OUTCOME_INDEX = {outcome: index for index, outcome in enumerate(OUTCOMES, 1)}
_UNKNOWN = OUTCOME_INDEX["unknown"]
_ERROR = OUTCOME_INDEX["error"]
_CRASH = OUTCOME_INDEX["crash"]
# What a handler that raised unexpectedly answers (prompts and resources; a tool's crash is
# an isError result).
INTERNAL_ERROR = -32603

TargetKey = tuple[str, str]


class TargetStats:
    """One target: counters per client (``[calls, then one per outcome]``, keyed by the
    client's counters object), JSON-RPC error codes and a latency histogram."""

    __slots__ = ("by_client", "codes", "latency")

    def __init__(self) -> None:
        self.by_client: dict[Any, list[int]] = {}
        self.codes: dict[int, int] = {}
        self.latency: Histogram = {}


class Targets:
    """Every target seen, bounded."""

    def __init__(self, max_clients: int, overflow: Callable[[], Any]) -> None:
        self.stats: dict[TargetKey, TargetStats] = {}
        self.max_clients = max_clients
        self.overflow = overflow

    def _counters(self, target: TargetStats, client: Any) -> list[int]:
        """A new client's counters on ``target``, or the overflow client's past the cap."""
        if len(target.by_client) >= self.max_clients:
            client = self.overflow()
            found = target.by_client.get(client)
            if found is not None:
                return found
        counters = target.by_client[client] = [0] * (len(OUTCOMES) + 1)
        return counters

    def call(
        self,
        client: Any,
        record: dict[str, Any],
        method: str,
        code: int | None,
        streaming: bool,
        duration: float | None,
    ) -> bool:
        """A request record of a call counted into its target; whether the call failed as a
        call (``is_error`` or ``crash``)."""
        target = self.target(record, method)
        counters = target.by_client.get(client)
        if counters is None:
            counters = self._counters(target, client)
        counters[0] += 1
        outcome = record.get("outcome")
        index = OUTCOME_INDEX.get(outcome) if type(outcome) is str else None
        if index is None:
            # A record written before outcomes were (or a streamed answer, whose stream record
            # will say): only a JSON-RPC error is known, and -32603 is what a crash gets.
            if code is None or streaming:
                index = _UNKNOWN
            else:
                index = _CRASH if code == INTERNAL_ERROR else _ERROR
        counters[index] += 1
        if code is not None:
            target.codes[code] = target.codes.get(code, 0) + 1
        if duration is not None:
            slot = bucket(duration)
            target.latency[slot] = target.latency.get(slot, 0) + 1
        return index == _CRASH or outcome == "is_error"

    def settle(
        self,
        client: Any,
        record: dict[str, Any],
        method: str,
        outcome: str,
        code: int | None,
        lasted: float | None,
    ) -> bool:
        """A streamed call's outcome, from its stream record, in place of the ``unknown`` its
        request record counted; whether it failed as a call."""
        failed = outcome in FAILED_OUTCOMES
        index = OUTCOME_INDEX.get(outcome)
        if index is None or type(record.get("target")) is not str:
            return failed
        target = self.target(record, method)
        counters = target.by_client.get(client)
        if counters is None and len(target.by_client) >= self.max_clients:
            counters = target.by_client.get(self.overflow())
        if counters is None or not counters[_UNKNOWN]:
            return failed  # its request record was not counted (filtered out, or missing)
        counters[_UNKNOWN] -= 1
        counters[index] += 1
        if code is not None:
            target.codes[code] = target.codes.get(code, 0) + 1
        if lasted is not None:
            slot = bucket(lasted)
            target.latency[slot] = target.latency.get(slot, 0) + 1
        return failed

    def target(self, record: dict[str, Any], method: str) -> TargetStats:
        kind = CALL_METHODS[method]
        name = record.get("target", _ABSENT)
        if name is _ABSENT:
            # A record from before the field: named by its params.
            params = record.get("params")
            field = "uri" if kind == "resource" else "name"
            name = params.get(field) if type(params) is dict else None
        if type(name) is not str:
            # Refused before it was resolved (a resource not found, a bad header): one target,
            # however many names clients tried.
            name = UNKNOWN_TARGET
        if kind == "resource" and "{" in name:
            kind = "template"
        key = (kind, name)
        found = self.stats.get(key)
        if found is None:
            if len(name) > MAX_TARGET_CHARS:
                key = (kind, name[: MAX_TARGET_CHARS - 3] + "...")
            if len(self.stats) >= MAX_TARGETS and key not in self.stats:
                key = (kind, OTHER_TARGET)
            found = self.stats.get(key)
            if found is None:
                found = self.stats[key] = TargetStats()
        return found
