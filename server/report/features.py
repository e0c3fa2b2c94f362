"""The per-feature view: for each thing the server offers, which clients used it.

It answers the question the report exists for, per feature rather than per client: "if I ship
resources, will clients fetch them?" A feature is used through some methods (or, for tools,
resources and templates, calls of some targets), and is *discovered* by a client that listed it
(its list method) or, for a feature that has no list, whose own ``initialize`` or
``server/discover`` was told of it (one of its methods was advertised to it). Each feature
names the clients that used it (with their calls), those that used it without discovering it
(hard-wired calls), and those that discovered it and never used it.

The features: ``tools``, each tool (``tool:NAME``, every tool some client called by a name the
server resolved), ``resources``
(reads of plain resources; reads in records older than the ``target`` field count here too),
``templates`` (reads through a URI template), ``prompts``, ``completions``, ``subscriptions``
(``resources/subscribe``, or a ``subscriptions/listen`` asking for resource updates),
``logging`` (``logging/setLevel``: the 2026-07-28 era's per-request log level is not in
records) and ``listen`` (``subscriptions/listen``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.protocol import TOOLS_CALL
from server.report.counters import ClientStats, Tally
from server.report.model import FeatureReport
from server.report.targets import OTHER_TARGET, UNKNOWN_TARGET


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
