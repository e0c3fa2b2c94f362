"""The report as text: a table for a 100-column terminal, and Markdown.

Both draw the same sections: what was read, the totals, each feature the server offers, each
tool, prompt and resource, errors by method with their names, then one block per client (its
methods with their latency). Values from records pass through :func:`~server.report.json.plain`
(and Markdown's own escaping), never verbatim.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from server.report.json import (
    LABEL_WIDTH,
    MAX_VALUE_CHARS,
    SOURCE_NOTE,
    WIDTH,
    client_names,
    compact,
    counts,
    error_text,
    identity,
    input_lines,
    latency_text,
    milliseconds,
    other_text,
    percent,
    period,
    plain,
    stream_text,
    task_text,
)
from server.report.model import ClientReport, Report
from server.report.tally import OUTCOMES

# -- terminal table ------------------------------------------------------------------------


def render_table(report: Report) -> str:
    out = ["MCP client report"]
    for line in input_lines(report):
        out += textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    out.append("")
    out += overview(report)
    for client in report.clients:
        out.extend(table_block(client))
    return "\n".join(out) + "\n"


def overview(report: Report) -> list[str]:
    """Totals, features, targets and errors: the sections across clients."""
    totals = report.totals
    out = ["== totals " + "=" * (WIDTH - 10)]
    out += field(
        "requests",
        f"{totals.requests:,} | failed {totals.failed:,} "
        f"({percent(totals.failed, totals.requests)}) | streams {totals.streams:,} | "
        f"clients {totals.clients:,}",
    )
    out += field("latency", latency_text(totals.latency))
    out.append("")
    out.append("== features " + "=" * (WIDTH - 12))
    for feature in report.features:
        out += field(
            plain(feature.feature, LABEL_WIDTH - 2),
            f"used by {len(feature.used_by):,}: {client_names(report, feature.used_by) or '-'}",
        )
        if feature.used_without_discovery:
            out += field(
                "",
                "without discovering it: " + client_names(report, feature.used_without_discovery),
            )
        if feature.discovered_never_used:
            out += field(
                "", "discovered, never used: " + client_names(report, feature.discovered_never_used)
            )
    out.append("")
    if report.targets:
        out.append("== tools, prompts, resources " + "=" * (WIDTH - 29))
        name_width = WIDTH - 2 - 9 - 9 - 9 - 9 - 9 - 30
        out.append(
            f"  {'target':<{name_width}}{'calls':>9}{'isError':>9}{'crash':>9}{'error':>9}"
            f"{'inputReq':>9}{'p50/p95/p99 ms':>30}"
        )
        for target in report.targets:
            found = target.latency
            times = (
                "-"
                if found is None
                else "/".join(milliseconds(v) for v in (found.p50, found.p95, found.p99))
            )
            out.append(
                f"  {plain(target.kind + ' ' + target.name, name_width - 1):<{name_width}}"
                f"{target.calls:>9,}{percent(target.outcomes['is_error'], target.calls):>9}"
                f"{percent(target.outcomes['crash'], target.calls):>9}"
                f"{percent(target.outcomes['error'], target.calls):>9}"
                f"{percent(target.outcomes['input_required'], target.calls):>9}{times:>30}"
            )
        out.append("")
    if report.errors:
        out.append("== errors by method " + "=" * (WIDTH - 20))
        for row in report.errors:
            out += field(
                plain(row.method or "(no method)", LABEL_WIDTH - 2),
                f"{row.code} {row.name} x{row.count:,}: {client_names(report, row.clients)}",
            )
        out.append("")
    return out


def table_block(client: ClientReport) -> list[str]:
    title = (
        f"== {identity(client)} | {plain(client.user_agent or '(no user agent)')} [{client.id}] "
    )
    out = [title + "=" * max(3, WIDTH - len(title))]
    out += field(
        "requests",
        f"{client.requests:,} | failed {client.failed:,} | streams {client.streams:,} | "
        f"sessions {client.sessions:,}",
    )
    out += field("seen", period(client.first_seen, client.last_seen))
    out += field("eras", counts(client.eras))
    out += field("transports", counts(client.transports))
    out += field(
        "protocol",
        f"header {counts(client.header_versions, ' x')}; body {counts(client.body_versions, ' x')}",
    )
    out += field("capabilities", ", ".join(map(plain, client.capability_names)) or "-")
    out += field("latest caps", plain(compact(client.capabilities), 300))
    out += field("verbs", counts(client.verbs))
    name_width = WIDTH - 2 - 10 - 7 - 8 - 30
    out.append(
        f"  {'method':<{name_width}}{'requests':>10}{'notes':>7}{'errors':>8}{'p50/p95/p99 ms':>30}"
    )
    for method, use in client.methods.items():
        found = client.latency.get(method)
        times = (
            "-"
            if found is None
            else "/".join(milliseconds(v) for v in (found.p50, found.p95, found.p99))
        )
        errors = sum(client.errors_by_method.get(method, {}).values())
        out.append(
            f"  {plain(method, name_width - 1):<{name_width}}"
            f"{use.requests:>10,}{use.notifications:>7,}{errors:>8,}{times:>30}"
        )
    if not client.methods:
        out.append("  (no method requested)")
    if other := other_text(client):
        out += field("other", other)
    out += field(
        "never requested",
        ", ".join(map(plain, client.never_requested)) or "-",
    )
    out += field("", f"({SOURCE_NOTE[client.advertised_source]})")
    if client.not_advertised:
        out += field("not advertised", ", ".join(map(plain, client.not_advertised)))
    out += field("errors", error_text(client))
    out += field("streams", stream_text(client))
    out += field("tasks", task_text(client))
    out.append("")
    return out


def field(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=f"{label:<{LABEL_WIDTH}}",
        subsequent_indent=" " * LABEL_WIDTH,
        break_on_hyphens=False,
    ) or [label]


# -- Markdown ------------------------------------------------------------------------------

# Only what can start markup mid-line: values never begin a line here.
_MARKDOWN_SPECIAL = set("\\`*_[]<>|~&")


def md(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """Text that Markdown shows literally: no markup, links, HTML or table breaks."""
    return "".join(
        "\\" + char if char in _MARKDOWN_SPECIAL else char for char in plain(value, limit)
    )


def md_code(text: str) -> str:
    """A code span: shown verbatim, so only its fence and line breaks need care."""
    return "`" + plain(text, 300).replace("`", "'") + "`"


def md_list(items: Iterable[str]) -> str:
    return ", ".join(md(item) for item in items) or "none"


def md_overview(report: Report) -> list[str]:
    totals = report.totals
    out = [
        "",
        "## Totals",
        "",
        f"- **Requests:** {totals.requests:,}; **failed:** {totals.failed:,} "
        f"({percent(totals.failed, totals.requests)}); **streams:** {totals.streams:,}; "
        f"**clients:** {totals.clients:,}",
        f"- **Latency:** {latency_text(totals.latency)}",
        "",
        "## Features",
        "",
        "| feature | clients | used by | used without discovering it | discovered, never used |",
        "| --- | --: | --- | --- | --- |",
    ]
    for feature in report.features:
        out.append(
            f"| {md(feature.feature)} | {len(feature.used_by):,} | "
            f"{md(client_names(report, feature.used_by) or '-', 2000)} | "
            f"{md(client_names(report, feature.used_without_discovery) or '-', 2000)} | "
            f"{md(client_names(report, feature.discovered_never_used) or '-', 2000)} |"
        )
    if report.targets:
        out += ["", "## Tools, prompts and resources", ""]
        out.append("| kind | name | calls | " + " | ".join(OUTCOMES) + " | p50 / p95 / p99 |")
        out.append("| --- | --- | --: |" + " --: |" * len(OUTCOMES) + " --- |")
        for target in report.targets:
            outcomes = " | ".join(f"{target.outcomes[o]:,}" for o in OUTCOMES)
            out.append(
                f"| {target.kind} | {md(target.name)} | {target.calls:,} | {outcomes} | "
                f"{md(latency_text(target.latency))} |"
            )
    if report.errors:
        out += ["", "## Errors by method", "", "| method | code | name | count | clients |"]
        out.append("| --- | --: | --- | --: | --- |")
        for row in report.errors:
            out.append(
                f"| {md(row.method or '(no method)')} | {row.code} | {md(row.name)} | "
                f"{row.count:,} | {md(client_names(report, row.clients), 2000)} |"
            )
    return out


def render_markdown(report: Report) -> str:
    out = ["# MCP client report", ""]
    out += [f"- {md(line, 400)}" for line in input_lines(report)]
    out += ["", "| client | version | user agent | requests | streams | first seen | last seen |"]
    out.append("| --- | --- | --- | --: | --: | --- | --- |")
    for client in report.clients:
        out.append(
            f"| {md(client.label)} | {md(client.version or '-')} | "
            f"{md(client.user_agent or '-')} | {client.requests:,} | {client.streams:,} | "
            f"{md(client.first_seen or '-', 40)} | {md(client.last_seen or '-', 40)} |"
        )
    out += md_overview(report)
    for client in report.clients:
        out += ["", f"## {md(identity(client))}: {md(client.user_agent or '(no user agent)')}", ""]
        out += [
            f"- **Requests:** {client.requests:,}; **sessions:** {client.sessions:,}; "
            f"**seen:** {md(period(client.first_seen, client.last_seen))}",
            f"- **Eras:** {md(counts(client.eras))}; "
            f"**transports:** {md(counts(client.transports))}",
            f"- **Protocol versions:** header {md(counts(client.header_versions))}; "
            f"body {md(counts(client.body_versions))}",
            f"- **Capabilities:** {md_list(client.capability_names)}; "
            f"latest {md_code(compact(client.capabilities))}",
            f"- **Verbs:** {md(counts(client.verbs))}",
        ]
        if other := other_text(client):
            out.append(f"- **Other requests:** {md(other)}")
        out += [
            "",
            "| method | requests | notifications | errors | p50 ms | p95 ms | p99 ms |",
            "| --- | --: | --: | --: | --: | --: | --: |",
        ]
        for method, use in client.methods.items():
            found = client.latency.get(method)
            times = (
                ["-"] * 3
                if found is None
                else [milliseconds(v) for v in (found.p50, found.p95, found.p99)]
            )
            errors = sum(client.errors_by_method.get(method, {}).values())
            out.append(
                f"| {md(method)} | {use.requests:,} | {use.notifications:,} | {errors:,} | "
                + " | ".join(times)
                + " |"
            )
        out += [
            "",
            f"- **Advertised, never requested** ({md(SOURCE_NOTE[client.advertised_source])}): "
            f"{md_list(client.never_requested)}",
        ]
        if client.not_advertised:
            out.append(f"- **Requested, not advertised:** {md_list(client.not_advertised)}")
        out.append(f"- **Errors:** {md(error_text(client))}")
        out.append(f"- **Streams:** {md(stream_text(client))}")
        out.append(f"- **Tasks:** {md(task_text(client))}")
    return "\n".join(out) + "\n"
