"""``/metrics`` in the Prometheus text format: the counting, and the endpoint.

Counting costs the request path one call per finished request: the recorder hands every record
to :meth:`Metrics.observe`, which finds its counters with one lookup by the draft's raw values
and bumps plain numbers; what ``prometheus-client`` makes of them is
:mod:`server.observe.exposition`, imported at the first scrape, and gauges are read at scrape
time (:mod:`server.observe.gauges`). Label values are bounded: methods from the protocol's set,
tools from the catalog (else ``other``), outcomes from fixed sets, tenants the top N
(:mod:`server.observe.tenants`). With
``PROMETHEUS_MULTIPROC_DIR`` (gunicorn workers) counters live in its files and a scrape sums
every worker (docs/operations.md#metrics).
"""

from __future__ import annotations

import os
import sys
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from server.asgi import Receive, Scope, Send
from server.observe.gauges import StateReaders
from server.observe.tenants import TenantCounts
from server.protocol import CLIENT_NOTIFICATIONS, LEGACY_METHODS, MODERN_METHODS, TOOLS_CALL
from server.security.networks import Network, forwarded_client, in_networks

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

KNOWN_METHODS = frozenset(
    {
        *MODERN_METHODS,
        *LEGACY_METHODS,
        *CLIENT_NOTIFICATIONS,
    }
)
OTHER = "other"
INTERNAL_ERROR = -32603  # what a handler that raised is answered with (server.errors)
REFUSALS = {401: "auth", 403: "forbidden", 413: "too_large", 429: "rate_limit"}
# Request durations: MCP calls run from a millisecond (tools/list) to minutes (a slow tool).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


def multiprocess() -> bool:
    """Whether prometheus-client keeps its values in files (``PROMETHEUS_MULTIPROC_DIR``): the
    library's own answer once it is imported, else the test it makes when imported."""
    values = sys.modules.get("prometheus_client.values")
    if values is not None:
        return bool(getattr(values.ValueClass, "_multiprocess", False))
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ


class Kind:
    """One kind of request (era, method, status, error code): its labels, and in one process
    its counts as plain numbers (cheaper than the library's locked values; the scrape turns
    them into the library's metric families)."""

    __slots__ = ("buckets", "children", "count", "labels", "refusal", "seconds")

    def __init__(self, labels: tuple[str, str, str, str], refusal: str | None) -> None:
        self.labels = labels
        self.refusal = refusal
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last: above every bound (+Inf)
        self.children: tuple[Any, Any, Any] | None = None  # multiprocess: the library's


class Tally:
    """One count of the one-process case (a plain number: no lock, no label lookup)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Cell:
    """What one kind of draft counts into: its request kind and, for a finished tool call,
    its (tool, outcome) count."""

    __slots__ = ("kind", "tool")

    def __init__(self, kind: Kind, tool: Any) -> None:
        self.kind = kind
        self.tool = tool


class Metrics:
    """The request counters and histogram, fed from finished records, and the scrape.

    In one process the counts are plain numbers that :meth:`collect` hands the library at
    scrape time; with ``PROMETHEUS_MULTIPROC_DIR`` they are the library's own metrics, whose
    values live in the files every worker's scrape sums."""

    def __init__(self, known_tool: Callable[[str], bool], tenants: int = 20) -> None:
        self.known_tool = known_tool
        self._kinds: dict[tuple[Any, ...], Kind] = {}
        # What a draft counts into, by its raw values (see observe), for known names only.
        self._cells: dict[tuple[Any, ...], Cell] = {}
        self._tools: dict[tuple[str, str], Tally] = {}
        self._readers: StateReaders | None = None
        # The library's side (server.observe.exposition), made at the first scrape in one
        # process: prometheus-client is not imported before (2.9 MiB of an idle server).
        self._registry: CollectorRegistry | None = None
        self.files = multiprocess()
        if self.files:
            # The request path counts into the library's own values from the first request.
            from server.observe.exposition import library_metrics

            self.requests, self.duration, self.tool_calls, self.refusals = library_metrics(BUCKETS)
            self._children: dict[tuple[str, str], Any] = {}
        # Requests by tenant, the top N labelled (MCP_METRICS_TENANTS; 0: not counted).
        self.tenants = TenantCounts(tenants, files=self.files) if tenants else None

    @property
    def registry(self) -> CollectorRegistry:
        """The library's registry of everything a scrape reads (made when first asked)."""
        if self._registry is None:
            from server.observe.exposition import registry_of

            tallies = None if self.files else self.collect
            top = self.tenants.top if self.tenants is not None else None
            self._registry = registry_of(tallies, self._readers, top)
        return self._registry

    def watch(self, readers: StateReaders) -> None:
        """Report the gauges ``readers`` read, at every scrape."""
        self._readers = readers
        if self._registry is not None:
            from server.observe.exposition import StateCollector

            self._registry.register(StateCollector(readers))

    def _kind(self, key: tuple[str | None, str, int, int | None]) -> Kind:
        # Every part is the server's own (era, a known method or "other", the status and error
        # code it sent), so there are few kinds and no cap is needed.
        era, method, status, code = key
        if code == INTERNAL_ERROR or status >= 500:
            outcome = "crash"
        elif code is not None or status >= 400:
            outcome = "error"
        else:
            outcome = "ok"
        kind = self._kinds[key] = Kind(
            (era or "none", method, str(status), outcome), REFUSALS.get(status)
        )
        if self.files:
            kind.children = (
                self.requests.labels(*kind.labels),
                self.duration.labels(method),
                None if kind.refusal is None else self.refusals.labels(kind.refusal),
            )
        return kind

    def _cell_of(self, key: tuple[Any, ...], item: Any) -> Cell:
        """The cell of a draft whose raw key is not remembered yet, remembered when every
        part of the key is the server's own: a known method and, for a tool call, a tool of
        the catalog (a client's own method and tool names are many; they share ``other``,
        found through this path each time)."""
        method = item.method
        label = method if method in KNOWN_METHODS else (OTHER if method else "none")
        status, code = item.status or 0, item.error_code
        kind_key = (item.era, label, status, code)
        kind = self._kinds.get(kind_key) or self._kind(kind_key)
        tool: Any = None
        target = item.target
        known = target is None or (type(target) is str and self.known_tool(target))
        if method == TOOLS_CALL and not item.streaming:  # a stream's is counted at its end
            # A call refused before it named a tool has no target: ``other``, never a None
            # label (the exposition cannot write one, and every later scrape would fail).
            label_tool = target if known and target is not None else OTHER
            tool = self._tool_tally(label_tool, item.call_outcome(), code)
        cell = Cell(kind, tool)
        if label is method and (method != TOOLS_CALL or known):
            self._cells[key] = cell
        return cell

    def _count(self, kind: Kind, seconds: float | None) -> None:
        if kind.children is None:
            kind.count += 1
            if seconds is not None:
                kind.seconds += seconds
                kind.buckets[bisect_left(BUCKETS, seconds)] += 1
            return
        requests, duration, refusals = kind.children
        requests.inc()
        if seconds is not None:
            duration.observe(seconds)
        if refusals is not None:
            refusals.inc()

    def observe(self, item: Any) -> None:
        """Count one record the recorder was handed: a finished request's draft, or a built
        record (a stream's request record at its opening, its stream record at its end).
        Runs on the request path for every request: one lookup by the draft's raw values."""
        if type(item) is dict:
            self._observe_record(item)
            return
        method = item.method
        if method == TOOLS_CALL:
            key: tuple[Any, ...] = (
                item.era,
                method,
                item.status,
                item.error_code,
                item.target,
                item.outcome,
                item.streaming,
            )
        else:
            key = (item.era, method, item.status, item.error_code)
        cell = self._cells.get(key) or self._cell_of(key, item)
        kind, tool, ended = cell.kind, cell.tool, item.ended_clock
        if item.tenant is not None and self.tenants is not None:
            self.tenants.count(item.tenant, kind.labels[3] != "ok")
        if kind.children is None:  # _count, inlined for the one-process case
            kind.count += 1
            if ended is not None:
                seconds = ended - item.clock
                kind.seconds += seconds
                kind.buckets[bisect_left(BUCKETS, seconds)] += 1
            if tool is not None:
                tool.count += 1
            return
        self._count(kind, None if ended is None else ended - item.clock)
        if tool is not None:
            tool.inc()

    def _observe_record(self, record: dict[str, Any]) -> None:
        method = record.get("method")
        label = method if method in KNOWN_METHODS else (OTHER if method else "none")
        error = record.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        if record.get("kind") == "stream":
            # A streamed call's outcome is known when its stream ends.
            if method == TOOLS_CALL:
                self._tool_outcome(record.get("target"), record.get("outcome"), code)
            return
        key = (record.get("era"), label, record.get("status") or 0, code)
        kind = self._kinds.get(key) or self._kind(key)
        self._count(kind, record.get("duration_ms", 0) / 1000)
        tenant = record.get("tenant")
        if type(tenant) is str and self.tenants is not None:
            self.tenants.count(tenant, kind.labels[3] != "ok")

    def _tool_outcome(self, target: Any, outcome: Any, code: int | None) -> None:
        tool = target if type(target) is str and self.known_tool(target) else OTHER
        tally = self._tool_tally(tool, outcome, code)
        if isinstance(tally, Tally):
            tally.count += 1
        else:
            tally.inc()

    def _tool_tally(self, tool: str, outcome: Any, code: int | None) -> Any:
        """The count of one (tool, outcome): a :class:`Tally`, or the library's child."""
        if outcome is None or outcome == "error":
            outcome = "ok" if code is None else "crash" if code == INTERNAL_ERROR else "error"
        key = (tool, str(outcome))
        if not self.files:
            tally = self._tools.get(key)
            if tally is None:
                tally = self._tools[key] = Tally()
            return tally
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.tool_calls.labels(*key)
        return child

    def collect(self) -> Iterator[Metric]:
        """In one process: the counts as the library's metric families."""
        from server.observe.exposition import families

        yield from families(self.totals(), BUCKETS)
        if self.tenants is not None:
            yield from self.tenants.families()

    def totals(
        self,
    ) -> tuple[
        dict[tuple[str, ...], int],
        dict[str, int],
        dict[str, tuple[list[int], float]],
        dict[tuple[str, str], int],
    ]:
        """In one process: the requests by labels, the refusals by reason, the durations by
        method (bucket counts, total seconds) and the tool calls by (tool, outcome)."""
        by_labels: dict[tuple[str, ...], int] = {}
        refused: dict[str, int] = {}
        by_method: dict[str, tuple[list[int], float]] = {}
        for kind in list(self._kinds.values()):
            by_labels[kind.labels] = by_labels.get(kind.labels, 0) + kind.count
            if kind.refusal is not None:
                refused[kind.refusal] = refused.get(kind.refusal, 0) + kind.count
            buckets, seconds = by_method.get(kind.labels[1], ([0] * len(kind.buckets), 0.0))
            buckets = [a + b for a, b in zip(buckets, kind.buckets, strict=True)]
            by_method[kind.labels[1]] = (buckets, seconds + kind.seconds)
        tools = {labels: tally.count for labels, tally in list(self._tools.items())}
        return by_labels, refused, by_method, tools

    def scrape(self) -> bytes:
        from server.observe.exposition import generate

        return generate(self.registry)

    def samples(self) -> Iterator[tuple[str, dict[str, str], float]]:
        """Every sample of a scrape (tests and the metric list of docs/operations.md)."""
        for metric in self.registry.collect():
            for sample in metric.samples:
                yield sample.name, sample.labels, sample.value


class MetricsEndpoint:
    """``GET /metrics``, answered only to clients in ``networks`` (loopback by default; the
    forwarded address behind a trusted proxy, so a proxy on the same host opens nothing, and
    nobody through a proxy that is not trusted, whose clients all look like it); others get
    404, as if there were nothing there."""

    def __init__(
        self, metrics: Metrics, networks: tuple[Network, ...], proxies: tuple[Network, ...]
    ) -> None:
        self.metrics = metrics
        self.networks = networks
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        forwarded = None
        proxied = False
        for name, value in scope.get("headers", ()):
            if name == b"x-forwarded-for":
                forwarded = value.decode("latin-1")
                proxied = True
            elif name == b"forwarded":
                proxied = True
        # Through a proxy this server does not trust, the caller is unknown: not allowed.
        address = forwarded_client(peer[0] if peer else None, forwarded, proxied, self.proxies)
        if address is None or not in_networks(address, self.networks):
            status, body, kind = 404, b"Not Found", b"text/plain; charset=utf-8"
        elif scope.get("method") not in ("GET", "HEAD"):
            status, body, kind = 405, b"Method Not Allowed", b"text/plain; charset=utf-8"
        else:
            from server.observe.exposition import CONTENT_TYPE

            status, body, kind = 200, self.metrics.scrape(), CONTENT_TYPE
        headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body}
        )
