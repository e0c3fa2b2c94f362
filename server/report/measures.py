"""What the report measures, in constant space: latency histograms, outcomes, error names.

A latency is counted in a logarithmic bucket (32 per doubling, so a bucket is 2.2% wide and a
quantile read back from it is within 1.1% of the true value, from a microsecond to days) rather
than kept: a histogram has a few hundred entries whatever the number of records, so the live
report can run for months and a million records need no sorting. Quantiles are read from the
buckets in order, so p50 <= p95 <= p99 <= max always holds.

Outcomes are what a tool call, prompt get or resource read came to (``outcome`` in the record,
docs/records.md); error codes get their names here, the ones :mod:`server.errors` defines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

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
