"""The traffic split by tenant: ``python -m server report --by-tenant [--tenant T]``, and the
live report's ``?by-tenant[&tenant=T]``.

Per tenant (the record's ``tenant``: a named token's, a JWT's tenant claim; ``(none)`` for
callers without one): requests, errors, latency percentiles, the callers seen and the tools
called. Bounded whatever it reads: at most :data:`MAX_TENANTS` tenants (past them,
``(other)``), :data:`MAX_TOOLS` tools and :data:`MAX_SUBJECTS` callers per tenant, and a
fixed reservoir of latencies per tenant, so a million records take one pass and little memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.protocol import TOOLS_CALL
from server.report.html import h
from server.report.json import plain
from server.report.sources import RequestScan

MAX_TENANTS = 200
MAX_TOOLS = 100
MAX_SUBJECTS = 100
RESERVOIR = 2048
NONE = "(none)"
OTHER = "(other)"


@dataclass(slots=True)
class TenantStats:
    requests: int = 0
    errors: int = 0
    seen: int = 0  # latencies offered to the reservoir
    latencies: list[float] = field(default_factory=list)
    subjects: set[str] = field(default_factory=set)
    tools: dict[str, int] = field(default_factory=dict)
    # Each tenant's own reservoir draws, so its latencies do not depend on the other tenants
    # read beside it: a view of one tenant (--tenant, the live ?tenant=) is the same either way.
    draws: random.Random = field(default_factory=lambda: random.Random(0))

    def percentile(self, share: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class TenantScan(RequestScan):
    """Request records counted by tenant, optionally only ``tenant``'s, within a period."""

    def __init__(
        self, tenant: str | None = None, since: str | None = None, until: str | None = None
    ) -> None:
        self.only = tenant
        self.since = since
        self.until = until
        self.tenants: dict[str, TenantStats] = {}
        self.with_report = False  # the report proper is not drawn beside it

    def count(self, record: dict[str, Any]) -> None:
        tenant = record.get("tenant")
        name = tenant if isinstance(tenant, str) else NONE
        if self.only is not None and name != self.only:
            return
        stats = self.tenants.get(name)
        if stats is None:
            if len(self.tenants) >= MAX_TENANTS:
                name = OTHER
                stats = self.tenants.setdefault(OTHER, TenantStats())
            else:
                stats = self.tenants[name] = TenantStats()
        stats.requests += 1
        status = record.get("status")
        if record.get("error") is not None or (isinstance(status, int) and status >= 400):
            stats.errors += 1
        duration = record.get("duration_ms")
        if isinstance(duration, int | float):
            stats.seen += 1
            if len(stats.latencies) < RESERVOIR:
                stats.latencies.append(float(duration))
            else:
                slot = stats.draws.randrange(stats.seen)
                if slot < RESERVOIR:
                    stats.latencies[slot] = float(duration)
        subject = record.get("subject")
        if isinstance(subject, str) and len(stats.subjects) < MAX_SUBJECTS:
            stats.subjects.add(subject)
        if record.get("method") == TOOLS_CALL:
            tool = record.get("target")
            if isinstance(tool, str):
                if tool not in stats.tools and len(stats.tools) >= MAX_TOOLS:
                    tool = OTHER
                stats.tools[tool] = stats.tools.get(tool, 0) + 1

    def only_view(self, tenant: str) -> TenantScan:
        """This scan as ``--tenant`` would have made it: ``tenant`` alone (the live report's
        ``?tenant=``, from its scan of every tenant)."""
        view = TenantScan(tenant, self.since, self.until)
        if tenant in self.tenants:
            view.tenants[tenant] = self.tenants[tenant]
        return view

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.tenants.items(), key=lambda item: (-item[1].requests, item[0]))
        return {
            "since": self.since,
            "until": self.until,
            "tenants": [
                {
                    "tenant": name,
                    "requests": stats.requests,
                    "errors": stats.errors,
                    "p50_ms": stats.percentile(0.5),
                    "p95_ms": stats.percentile(0.95),
                    "callers": sorted(stats.subjects),
                    "tools": dict(sorted(stats.tools.items(), key=lambda item: -item[1])),
                }
                for name, stats in ordered
            ],
        }


def render_tenants_text(scan: TenantScan) -> str:
    view = scan.to_json()
    lines = ["tenant: requests, errors, p50/p95 ms, callers, tools"]
    for row in view["tenants"]:
        tools = ", ".join(f"{name} {count}" for name, count in list(row["tools"].items())[:10])
        lines.append(
            f"- {plain(row['tenant'])}: {row['requests']} requests, {row['errors']} errors,"
            f" {row['p50_ms']}/{row['p95_ms']} ms, {len(row['callers'])} callers"
            + (f", tools: {plain(tools)}" if tools else "")
        )
    return "\n".join(lines) + "\n"


COLUMNS = ("tenant", "requests", "errors", "p50 ms", "p95 ms", "callers", "tools")


def table_cells(scan: TenantScan) -> list[tuple[str, ...]]:
    """Each tenant's row as the markdown and HTML tables show it (its ten busiest tools)."""
    return [
        (
            row["tenant"],
            str(row["requests"]),
            str(row["errors"]),
            str(row["p50_ms"]),
            str(row["p95_ms"]),
            str(len(row["callers"])),
            ", ".join(f"{name} {count}" for name, count in list(row["tools"].items())[:10]),
        )
        for row in scan.to_json()["tenants"]
    ]


def render_tenants_markdown(scan: TenantScan) -> str:
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for cells in table_cells(scan):
        rows.append("| " + " | ".join(plain(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def render_tenants_json(scan: TenantScan) -> str:
    """The view as JSON: ``--by-tenant --format json``, and the live ``?format=json``."""
    return orjson.dumps(scan.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_tenants_html(scan: TenantScan) -> str:
    """A section for the live report's page (the markdown table's columns), every value
    escaped (tenants and tools come from callers' tokens and requests)."""
    head = "".join(f"<th>{name}</th>" for name in COLUMNS)
    rows = []
    for cells in table_cells(scan):
        rows.append("<tr>" + "".join(f"<td>{h(cell)}</td>" for cell in cells) + "</tr>")
    title = "By tenant" if scan.only is None else f"Tenant {h(scan.only)}"
    return (
        f'<section id="tenants"><h2>{title}</h2>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</section>"
    )


# Each format the tenant view is drawn in, by the name ``--format`` and ``?format=`` use (the
# text table for any other).
TENANT_FORMS = {
    "json": render_tenants_json,
    "markdown": render_tenants_markdown,
    "table": render_tenants_text,
}
