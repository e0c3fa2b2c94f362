"""The library's side of ``/metrics``: prometheus-client's registry, metric families and text
format, over the counts :mod:`server.observe.metrics` keeps and the gauges
:mod:`server.observe.gauges` reads.

Imported at the first scrape (in one process) or when the metrics are made (with
``PROMETHEUS_MULTIPROC_DIR``, where the request path counts into the library's own values):
an idle server that nobody scrapes does not hold the library (2.9 MiB resident).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as generate
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from server.observe.gauges import StateReaders
from server.observe.tenants import fold_files

__all__ = [
    "CONTENT_TYPE",
    "StateCollector",
    "Totals",
    "families",
    "generate",
    "library_metrics",
    "registry_of",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()
KIND_LABELS = ["era", "method", "status", "outcome"]
REQUESTS_HELP = "Requests on the MCP endpoint."
DURATION_HELP = "Time to answer a request (to the stream's opening for a stream)."
TOOLS_HELP = "tools/call by tool and outcome."
REFUSALS_HELP = "Requests refused, by reason."

# The counts of one process, as server.observe.metrics.Metrics.totals gives them: requests by
# labels, refusals by reason, durations by method (bucket counts, seconds), tool calls by
# (tool, outcome).
Totals = tuple[
    dict[tuple[str, ...], int],
    dict[str, int],
    dict[str, tuple[list[int], float]],
    dict[tuple[str, str], int],
]


def registry_of(
    tallies: Callable[[], Iterable[Metric]] | None,
    readers: StateReaders | None,
    tenants: int | None = None,
) -> CollectorRegistry:
    """What a scrape reads: one process's counts (``tallies``), or with None every worker's
    files (multiprocess, the tenant series folded to the top ``tenants``), and the gauges
    ``readers`` read."""
    registry = CollectorRegistry(auto_describe=True)
    if tallies is None:
        # The library's metrics are not registered: MultiProcessCollector reads their files
        # (registering would count them twice).
        files = MultiProcessCollector(None)  # type: ignore[no-untyped-call]
        registry.register(_Files(files, tenants))
    else:
        registry.register(_Tallies(tallies))
    if readers is not None:
        registry.register(StateCollector(readers))
    return registry


def library_metrics(buckets: tuple[float, ...]) -> tuple[Any, Any, Any, Any]:
    """Multiprocess: the library's requests, duration, tool calls and refusals metrics, whose
    values live in the files a scrape sums."""
    return (
        Counter("mcp_requests", REQUESTS_HELP, KIND_LABELS, registry=None),
        Histogram(
            "mcp_request_duration_seconds",
            DURATION_HELP,
            ["method"],
            buckets=buckets,
            registry=None,
        ),
        Counter("mcp_tool_calls", TOOLS_HELP, ["tool", "outcome"], registry=None),
        Counter("mcp_refusals", REFUSALS_HELP, ["reason"], registry=None),
    )


class _Files(Collector):
    """Every worker's files (multiprocess), the tenant series folded to the top N."""

    def __init__(self, files: Any, tenants: int | None) -> None:
        self.files = files
        self.tenants = tenants

    def collect(self) -> Iterable[Metric]:
        metrics = self.files.collect()
        return metrics if self.tenants is None else fold_files(metrics, self.tenants)


class _Tallies(Collector):
    """The request counts of one process, at scrape time."""

    def __init__(self, tallies: Callable[[], Iterable[Metric]]) -> None:
        self.tallies = tallies

    def collect(self) -> Iterable[Metric]:
        return self.tallies()


def families(totals: Totals, buckets: tuple[float, ...]) -> Iterator[Metric]:
    """One process's counts (``totals``, durations in ``buckets``) as the library's metric
    families."""
    by_labels, refused, by_method, tool_counts = totals
    bounds = [*(repr(float(bound)) for bound in buckets), "+Inf"]  # the "le" labels
    requests = CounterMetricFamily("mcp_requests", REQUESTS_HELP, labels=KIND_LABELS)
    for labels, count in by_labels.items():
        requests.add_metric(list(labels), count)
    yield requests
    duration = HistogramMetricFamily(
        "mcp_request_duration_seconds", DURATION_HELP, labels=["method"]
    )
    for method, (counts, seconds) in by_method.items():
        cumulative = list(itertools.accumulate(counts))
        duration.add_metric([method], list(zip(bounds, cumulative, strict=True)), seconds)
    yield duration
    tools = CounterMetricFamily("mcp_tool_calls", TOOLS_HELP, labels=["tool", "outcome"])
    for tool_labels, count in tool_counts.items():
        tools.add_metric(list(tool_labels), count)
    yield tools
    refusals = CounterMetricFamily("mcp_refusals", REFUSALS_HELP, labels=["reason"])
    for reason, count in refused.items():
        refusals.add_metric([reason], count)
    yield refusals


class StateCollector(Collector):
    """The gauges, and the records' counters, from the state the server already keeps."""

    def __init__(self, readers: StateReaders) -> None:
        self.readers = readers

    def collect(self) -> Iterable[Metric]:
        read = self.readers
        streams = GaugeMetricFamily("mcp_open_streams", "Open SSE streams.", labels=["kind"])
        streams.add_metric(["listen"], read.listen_streams())
        streams.add_metric(["legacy_get"], read.legacy_get_streams())
        yield streams
        yield GaugeMetricFamily(
            "mcp_legacy_sessions", "Legacy sessions live here.", value=read.legacy_sessions()
        )
        records = CounterMetricFamily(
            "mcp_records", "Request records by what became of them.", labels=["state"]
        )
        for state, count in read.records().items():
            records.add_metric([state], count)
        yield records
        up = read.redis_up()
        if up is not None:
            yield GaugeMetricFamily("mcp_redis_up", "1 while Redis answers.", value=float(up))
        lag = read.bus_lag_s()
        if lag is not None:
            yield GaugeMetricFamily("mcp_bus_lag_seconds", "Change bus delivery lag.", value=lag)
        retirements = read.retirements()
        if retirements:
            retired = GaugeMetricFamily(
                "mcp_retirement_retired",
                "1 while an MCP_RETIRE item is retired (brownout or sunset), 0 while deprecated.",
                labels=["item"],
            )
            for item, now_retired in retirements:
                retired.add_metric([item], float(now_retired))
            yield retired
