"""The report's frozen shape, and the per-feature view derived for it.

:class:`Report` holds what was read (files, lines, what was skipped and why, the filters), the
methods seen or advertised, a :class:`ClientReport` per client (name, version, user agent;
``(unidentified)`` without a name), and the views across clients: totals, errors by method,
targets (:class:`TargetReport`), features (:class:`FeatureReport`) and the :class:`Timeline`;
every mapping ordered most frequent first, so one input always draws the same. The per-feature
view answers "if I ship resources, will clients fetch them?": for each feature (``tools`` and
each ``tool:NAME``, ``resources``, ``templates``, ``prompts``, ``completions``,
``subscriptions``, ``logging``, ``listen``), who used it, who used it without discovering it
(hard-wired calls), and who discovered it and never used it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.protocol import TOOLS_CALL
from server.report.counters import ClientStats, Tally
from server.report.tally import OTHER_TARGET, UNKNOWN_TARGET, Latency

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


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    # Methods that use it (for target-based features, the targets' method).
    methods: tuple[str, ...]
    # The list method whose call discovers it; None: being advertised one of ``offered_by``.
    listed_by: str | None
    offered_by: tuple[str, ...]
    # For target-based features: which targets count as using it.
    target_kind: str | None = None
    target_name: str | None = None


FEATURES = (
    Feature("tools", (TOOLS_CALL,), "tools/list", (TOOLS_CALL,)),
    Feature("resources", ("resources/read",), "resources/list", ("resources/read",), "resource"),
    Feature(
        "templates",
        ("resources/read",),
        "resources/templates/list",
        ("resources/read",),
        "template",
    ),
    Feature("prompts", ("prompts/get",), "prompts/list", ("prompts/get",)),
    Feature("completions", ("completion/complete",), None, ("completion/complete",)),
    Feature(
        "subscriptions",
        ("resources/subscribe", "resources/unsubscribe"),
        None,
        ("resources/subscribe", "subscriptions/listen"),
    ),
    Feature("logging", ("logging/setLevel",), None, ("logging/setLevel",)),
    Feature("listen", ("subscriptions/listen",), None, ("subscriptions/listen",)),
)


def features(
    everyone: list[ClientStats], ids: dict[Any, str], aggregator: Tally
) -> list[FeatureReport]:
    by_kind: dict[str, dict[Any, int]] = {}
    by_tool: dict[str, dict[Any, int]] = {}
    for (kind, name), stats in aggregator.targets.stats.items():
        per = by_kind.setdefault(kind, {})
        for client, counters in stats.by_client.items():
            per[client] = per.get(client, 0) + counters[0]
        if kind == "tool" and name not in (UNKNOWN_TARGET, OTHER_TARGET):
            by_tool[name] = {client: counters[0] for client, counters in stats.by_client.items()}
    rows = []
    for feature in FEATURES:
        rows.append(_row(feature, everyone, ids, _uses(feature, everyone, by_kind)))
        if feature.name == "tools":
            for name in sorted(by_tool, key=lambda tool: (-sum(by_tool[tool].values()), tool)):
                tool = Feature(f"tool:{name}", (TOOLS_CALL,), "tools/list", (TOOLS_CALL,))
                rows.append(_row(tool, everyone, ids, by_tool[name]))
    return rows


def _uses(
    feature: Feature, everyone: list[ClientStats], by_kind: dict[str, dict[Any, int]]
) -> dict[Any, int]:
    if feature.target_kind is not None:
        return by_kind.get(feature.target_kind, {})
    uses = {}
    for stats in everyone:
        count = sum(stats.calls.get(method, 0) for method in feature.methods)
        if feature.name == "subscriptions":
            count += stats.listen_resources
        if count:
            uses[stats] = count
    return uses


def _discovered(feature: Feature, stats: ClientStats) -> bool:
    if feature.listed_by is not None:
        return stats.calls.get(feature.listed_by, 0) > 0
    return any(
        method in offered for offered in stats.advertised.values() for method in feature.offered_by
    )


def _row(
    feature: Feature, everyone: list[ClientStats], ids: dict[Any, str], uses: dict[Any, int]
) -> FeatureReport:
    discovered = [stats for stats in everyone if _discovered(feature, stats)]
    used = [stats for stats in everyone if uses.get(stats)]
    known = set(discovered)
    return FeatureReport(
        feature=feature.name,
        methods=list(feature.methods),
        used_by={ids[stats]: uses[stats] for stats in used},
        discovered=[ids[stats] for stats in discovered],
        used_without_discovery=[ids[stats] for stats in used if stats not in known],
        discovered_never_used=[ids[stats] for stats in discovered if not uses.get(stats)],
    )
