"""The tenant label of ``/metrics``: ``mcp_tenant_requests_total{tenant}`` and
``mcp_tenant_errors_total{tenant}``, the top ``MCP_METRICS_TENANTS`` tenants by requests with a
series each and every other tenant summed as ``other``.

Counted per tenant in the process (at most :data:`MAX_COUNTED` tenants apart, later ones go
straight to ``other``); the top N are chosen at scrape time, from this process's counts or,
with ``PROMETHEUS_MULTIPROC_DIR``, from every worker's files summed (:func:`fold_files`), so a
scrape never shows more than N + 1 series whatever tenants callers bring. A request with no
tenant is not counted here; nothing here runs for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

OTHER = "other"
# Tenants counted apart in one process at most: past it a new tenant counts as ``other``.
MAX_COUNTED = 1000
Pair = tuple[float, float]  # requests, errors
REQUESTS = "mcp_tenant_requests"
ERRORS = "mcp_tenant_errors"
REQUESTS_HELP = "Requests on the MCP endpoint by tenant (the top MCP_METRICS_TENANTS, else other)."
ERRORS_HELP = "Requests that failed (error or crash) by tenant (as mcp_tenant_requests)."


class TenantCounts:
    """Requests and errors per tenant: plain numbers in one process, the library's counters
    (whose values live in the workers' files) with ``files``."""

    def __init__(self, top: int, *, files: bool) -> None:
        self.top = top
        self.files = files
        self.counts: dict[str, list[int]] = {}  # tenant -> [requests, errors]
        self._children: dict[str, tuple[Any, Any]] = {}
        if files:
            from prometheus_client import Counter

            self.requests = Counter(REQUESTS, REQUESTS_HELP, ["tenant"], registry=None)
            self.errors = Counter(ERRORS, ERRORS_HELP, ["tenant"], registry=None)

    def count(self, tenant: str, failed: bool) -> None:
        if not self.files:
            pair = self.counts.get(tenant)
            if pair is None:
                if len(self.counts) >= MAX_COUNTED:
                    tenant = OTHER
                pair = self.counts.setdefault(tenant, [0, 0])
            pair[0] += 1
            pair[1] += failed
            return
        children = self._children.get(tenant)
        if children is None:
            if len(self._children) >= MAX_COUNTED:
                tenant = OTHER
            children = self._children.get(tenant)
            if children is None:
                children = self._children[tenant] = (
                    self.requests.labels(tenant),
                    self.errors.labels(tenant),
                )
        children[0].inc()
        if failed:
            children[1].inc()

    def families(self) -> Iterator[Any]:
        """One process: the top N and ``other`` as the library's metric families."""
        if self.counts:
            totals = {tenant: (pair[0], pair[1]) for tenant, pair in list(self.counts.items())}
            yield from tenant_families(fold(totals, self.top))


def fold(counts: Mapping[str, Pair], top: int) -> dict[str, Pair]:
    """The ``top`` tenants by requests (ties by name), each as it is, and all others summed
    as ``other`` (present only when there are others)."""
    ranked = sorted(
        ((tenant, pair) for tenant, pair in counts.items() if tenant != OTHER),
        key=lambda item: (-item[1][0], item[0]),
    )
    kept = dict(ranked[:top])
    rest = [pair for _, pair in ranked[top:]]
    if OTHER in counts:
        rest.append(counts[OTHER])
    if rest:
        kept[OTHER] = (sum(pair[0] for pair in rest), sum(pair[1] for pair in rest))
    return kept


def tenant_families(folded: Mapping[str, Pair]) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    requests = CounterMetricFamily(REQUESTS, REQUESTS_HELP, labels=["tenant"])
    errors = CounterMetricFamily(ERRORS, ERRORS_HELP, labels=["tenant"])
    for tenant, (count, failed) in folded.items():
        requests.add_metric([tenant], count)
        errors.add_metric([tenant], failed)
    yield requests
    yield errors


def fold_files(metrics: Iterable[Any], top: int) -> Iterator[Any]:
    """Multiprocess: every worker's metrics as the library read them from the files, the
    tenant families folded to the top ``top`` and ``other``; the rest as they are."""
    summed: dict[str, list[float]] = {}
    for metric in metrics:
        if metric.name not in (REQUESTS, ERRORS):
            yield metric
            continue
        column = 0 if metric.name == REQUESTS else 1
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                pair = summed.setdefault(sample.labels["tenant"], [0.0, 0.0])
                pair[column] += sample.value
    if summed:
        yield from tenant_families(fold({t: (p[0], p[1]) for t, p in summed.items()}, top))
