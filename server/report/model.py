"""What ``python -m server report`` found: the immutable result the renderers draw.

:class:`Report` holds a summary of the input (files, lines, what was skipped and why, the
filters), the methods seen or advertised, one :class:`ClientReport` per client, where a client
is (client name, client version, user agent) and records without a name are
``(unidentified)``, and the views across clients: totals, errors by method, each tool, prompt
and resource (:class:`TargetReport`), each feature the server offers (:class:`FeatureReport`)
and requests per minute (:class:`Timeline`). Every mapping is ordered most frequent first, so
every rendering of one input is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.report.measures import Latency

UNIDENTIFIED = "(unidentified)"


@dataclass(frozen=True, slots=True)
class MethodUse:
    """How often one client sent one method, as requests and as notifications."""

    requests: int
    notifications: int

    @property
    def total(self) -> int:
        return self.requests + self.notifications


@dataclass(frozen=True, slots=True)
class ClientReport:
    """Everything the report says about one client."""

    # "c1", "c2", ... in the report's order: how the other views name this client.
    id: str
    name: str | None
    version: str | None
    user_agent: str | None
    requests: int
    # Requests that failed: a JSON-RPC error, an HTTP status >= 400, or a call whose outcome
    # was is_error or crash.
    failed: int
    first_seen: str | None
    last_seen: str | None
    eras: dict[str, int]
    # "<transport>/<era>" -> requests ("sse/legacy": the 2024-11-05 HTTP+SSE transport).
    transports: dict[str, int]
    header_versions: dict[str, int]
    body_versions: dict[str, int]
    capability_names: list[str]
    capabilities: Any
    methods: dict[str, MethodUse]
    pseudo_methods: dict[str, int]
    no_method: int
    verbs: dict[str, int]
    advertised: list[str]
    # Per era the client used: "client" when its own initialize/discover records said what was
    # advertised, "input" when it sent none, so every list of that era in the input; "mixed":
    # some eras one way, some the other; "none": no list for any of its eras.
    advertised_source: str
    never_requested: list[str]
    not_advertised: list[str]
    jsonrpc_errors: dict[int, int]
    # method -> JSON-RPC error code -> count.
    errors_by_method: dict[str, dict[int, int]]
    latency: dict[str, Latency]
    # Streamed answers: from arrival to the first message on the stream.
    ttfb: dict[str, Latency]
    http_statuses: dict[int, int]
    sessions: int
    streams: int
    stream_events: int
    stream_ends: dict[str, int]
    # Tasks by the last status their records showed (created: "working", then what polls saw).
    tasks: dict[str, int]

    @property
    def label(self) -> str:
        return self.name if self.name is not None else UNIDENTIFIED

    @property
    def identity(self) -> str:
        """Label and version: how a person tells clients apart (with the user agent)."""
        return self.label if self.version is None else f"{self.label} {self.version}"

    def cell(self, method: str) -> tuple[str, int]:
        """This client's standing on ``method`` and its count: ``requested``,
        ``unadvertised`` (requested though not advertised to it), ``advertised`` (but never
        requested) or ``absent`` (neither)."""
        use = self.methods.get(method)
        if use is not None:
            return ("unadvertised" if method in self.not_advertised else "requested"), use.total
        return ("advertised" if method in self.never_requested else "absent"), 0


@dataclass(frozen=True, slots=True)
class InputSummary:
    """What was read: ``records`` = ``requests`` + ``streams``; the rest were skipped."""

    files: list[str]
    lines: int
    records: int
    requests: int
    streams: int
    malformed: int
    unknown_version: int
    unknown_kind: int
    folded_clients: int
    errors: list[str]
    # Records left out by the filters (they are not in ``records``).
    filtered_out: int = 0
    filters: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class MethodTotal:
    """One method over every client."""

    requests: int
    notifications: int
    failed: int
    clients: int
    latency: Latency | None


@dataclass(frozen=True, slots=True)
class Totals:
    requests: int
    streams: int
    failed: int
    clients: int
    latency: Latency | None
    methods: dict[str, MethodTotal]


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One JSON-RPC error code as one method got it; clients by id."""

    method: str | None
    code: int
    name: str
    count: int
    clients: dict[str, int]


@dataclass(frozen=True, slots=True)
class TargetUse:
    """One client's calls of one target: ``outcomes`` maps each outcome to its count."""

    client: str
    calls: int
    outcomes: dict[str, int]


@dataclass(frozen=True, slots=True)
class TargetReport:
    """One tool, prompt, resource or resource template, as called."""

    kind: str  # "tool", "prompt", "resource" or "template"
    name: str
    calls: int
    outcomes: dict[str, int]
    error_codes: dict[int, int]
    latency: Latency | None
    clients: list[TargetUse]

    def rate(self, outcome: str) -> float:
        return round(self.outcomes.get(outcome, 0) / self.calls, 4) if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class FeatureReport:
    """One thing the server offers, across clients (clients by id).

    ``discovered``: the client listed it (its list method) or, for a feature without a list,
    its initialize or discover was told of it."""

    feature: str
    methods: list[str]
    used_by: dict[str, int]
    discovered: list[str]
    used_without_discovery: list[str]
    discovered_never_used: list[str]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Requests and failed requests per bucket of ``minutes``, oldest first; ``points`` are
    (bucket start as ``YYYY-MM-DDTHH:MM``, requests, failed)."""

    minutes: int
    points: list[tuple[str, int, int]]


@dataclass(frozen=True, slots=True)
class Report:
    """The whole report: clients ordered by requests, most first."""

    input: InputSummary
    first_seen: str | None
    last_seen: str | None
    advertised: list[str]
    # Every method some client requested or the server advertised, most used first.
    methods: list[str]
    clients: list[ClientReport]
    advertised_by_era: dict[str, list[str]]
    totals: Totals
    errors: list[ErrorRow]
    targets: list[TargetReport]
    features: list[FeatureReport]
    timeline: Timeline

    def client(self, client_id: str) -> ClientReport:
        return self.clients[int(client_id[1:]) - 1]
