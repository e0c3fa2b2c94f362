"""The report as one self-contained HTML page: the operator's view.

From the top: what was read, requests and failures over time (inline SVG), totals per method,
the clients-by-methods grid (a cell's colour: requested, requested though not advertised,
advertised but never requested, not advertised), the per-feature view, targets with their
outcomes, errors by method, then every client in a collapsible section. Inline CSS and one
inline script allowed by its hash (:mod:`server.report.html_assets`), no other URL, so it can
be mailed and opened offline; every value from the records is made printable and escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from server.report.html_assets import SCRIPT, STYLE, content_security_policy, svg_chart
from server.report.json import (
    MAX_VALUE_CHARS,
    SOURCE_NOTE,
    compact,
    counts,
    error_text,
    identity,
    input_lines,
    milliseconds,
    other_text,
    percent,
    period,
    plain,
    stream_text,
    task_text,
    who,
)
from server.report.model import ClientReport, Report
from server.report.tally import Latency

# Methods nobody was advertised get a column each up to this many; a client inventing method
# names must not make the grid unreadable (the per-client tables still list them all).
MAX_UNADVERTISED_COLUMNS = 30

CELL_TITLE = {
    "requested": "requested",
    "unadvertised": "requested, though not advertised to this client",
    "advertised": "advertised to this client, never requested",
    "absent": "not advertised to this client, not requested",
}
SECTIONS = (
    ("timeline", "Over time"),
    ("totals", "Methods"),
    ("grid", "Clients by method"),
    ("features", "Features"),
    ("targets", "Tools, prompts, resources"),
    ("errors", "Errors"),
    ("clients", "Clients"),
)


def with_section(page: str, section: str) -> str:
    """The report's page with ``section`` (HTML, escaped already) right under its title."""
    cut = page.index("</h1>") + len("</h1>") if "</h1>" in page else 0
    return page[:cut] + section + page[cut:]


def h(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """Printable, cut, and escaped for text and attribute values alike."""
    return html.escape(plain(value, limit), quote=True)


def render_html(report: Report, *, refresh_s: float | None = None) -> str:
    """The page; with ``refresh_s``, the live page, which fetches itself again that often."""
    live = refresh_s is not None and refresh_s > 0
    body = f'<body data-refresh="{refresh_s:g}">' if live else "<body>"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        # Nothing may be fetched or run but this page's own script, whatever is in the page.
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy(live)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>MCP client report{' (live)' if live else ''}</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        body,
        "<main>",
        f"<h1>MCP client report{' (live)' if live else ''}</h1>",
        '<div class="controls"><nav>',
        *(f'<a href="#{anchor}-section">{title}</a>' for anchor, title in SECTIONS),
        '</nav><input id="filter" type="search" placeholder="filter rows (client, method, tool)"'
        ' aria-label="filter table rows"></div>',
        '<div id="report">',
        "<ul>",
        *(f"<li>{h(line, 400)}</li>" for line in input_lines(report)),
        "</ul>",
        *section("timeline", "Requests and failures over time", [svg_chart(report.timeline)]),
        *section("totals", "Methods", totals_table(report)),
        *section("grid", "Clients by method", matrix(report)),
        *section("features", "Features: who uses what the server offers", features_table(report)),
        *section("targets", "Tools, prompts and resources", targets_table(report)),
        *section("errors", "Errors by method", errors_table(report)),
        *section("clients", "Clients", clients_table(report)),
    ]
    for client in report.clients:
        parts.extend(details(client))
    parts += ["</div>", "</main>", f"<script>{SCRIPT}</script>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


def section(anchor: str, title: str, content: list[str]) -> list[str]:
    return [f'<section id="{anchor}-section">', f"<h2>{title}</h2>", *content, "</section>"]


def num(value: int) -> str:
    return f'<td data-v="{value}">{value:,}</td>'


def code(value: int) -> str:
    """A JSON-RPC code or HTTP status: a number, but an identifier (-32602, never -32,602)."""
    return f'<td data-v="{value}">{value}</td>'


def ms_cells(found: Latency | None) -> str:
    if found is None:
        return '<td data-v="-1">-</td>' * 3
    return "".join(
        f'<td data-v="{value}">{milliseconds(value)}</td>'
        for value in (found.p50, found.p95, found.p99)
    )


def table(table_id: str, headers: Iterable[str], rows: list[str], foot: str = "") -> list[str]:
    if not rows:
        return ['<p class="note">None.</p>']
    head = "".join(f'<th scope="col">{header}</th>' for header in headers)
    out = ['<div class="scroll">', f'<table class="data" id="{table_id}">']
    out += [f"<thead><tr>{head}</tr></thead>", "<tbody>", *rows, "</tbody>"]
    if foot:
        out.append(f"<tfoot>{foot}</tfoot>")
    return [*out, "</table>", "</div>"]


def client_link(report: Report, client_id: str, count: int | None = None) -> str:
    client = report.client(client_id)
    suffix = f" ({count:,})" if count is not None else ""
    return f'<a href="#client-{client.id}">{h(who(client))}</a>{suffix}'


def client_links(report: Report, ids: list[str] | dict[str, int]) -> str:
    if isinstance(ids, dict):
        links = [client_link(report, key, count) for key, count in ids.items()]
    else:
        links = [client_link(report, key) for key in ids]
    return ", ".join(links) or "-"


def totals_table(report: Report) -> list[str]:
    totals = report.totals
    rows = []
    for method in report.methods:
        total = totals.methods[method]
        rows.append(
            f'<tr><th scope="row"><code>{h(method)}</code></th>'
            f"{num(total.requests)}{num(total.notifications)}{num(total.failed)}"
            f"{num(total.clients)}{ms_cells(total.latency)}</tr>"
        )
    foot = (
        f'<tr><th scope="row">all ({totals.clients:,} clients)</th>{num(totals.requests)}'
        f"<td></td>{num(totals.failed)}{num(totals.clients)}{ms_cells(totals.latency)}</tr>"
    )
    headers = (
        "method",
        "requests",
        "notifications",
        "errors",
        "clients",
        "p50 ms",
        "p95 ms",
        "p99 ms",
    )
    return table("totals", headers, rows, foot)


def features_table(report: Report) -> list[str]:
    rows = [
        f'<tr><th scope="row"><code>{h(feature.feature)}</code></th>'
        f"{num(len(feature.used_by))}"
        f'<td class="text">{client_links(report, feature.used_by)}</td>'
        f'<td class="text">{client_links(report, feature.used_without_discovery)}</td>'
        f'<td class="text">{client_links(report, feature.discovered_never_used)}</td></tr>'
        for feature in report.features
    ]
    headers = (
        "feature",
        "clients",
        "used by (calls)",
        "used without discovering it",
        "discovered, never used",
    )
    return [
        '<p class="note">A client discovered a feature when it listed it (tools/list, ...) or, '
        "for one without a list, its initialize or discover was told of it.</p>",
        *table("features-table", headers, rows),
    ]


def targets_table(report: Report) -> list[str]:
    rows = []
    for target in report.targets:
        outcomes = target.outcomes
        is_error = f'<td data-v="{target.rate("is_error")}">'
        crash = f'<td data-v="{target.rate("crash")}">'
        users = {use.client: use.calls for use in target.clients}
        rows.append(
            f'<tr><td class="text">{target.kind}</td>'
            f'<th scope="row"><code>{h(target.name, 200)}</code></th>{num(target.calls)}'
            f"{num(outcomes['ok'])}{num(outcomes['is_error'])}"
            f"{is_error}{percent(outcomes['is_error'], target.calls)}</td>"
            f"{num(outcomes['crash'])}{crash}{percent(outcomes['crash'], target.calls)}</td>"
            f"{num(outcomes['error'])}{num(outcomes['input_required'])}{num(outcomes['unknown'])}"
            f"{ms_cells(target.latency)}"
            f'<td class="text">{client_links(report, users)}</td></tr>'
        )
    headers = (
        "kind",
        "name",
        "calls",
        "ok",
        "isError",
        "isError %",
        "crash",
        "crash %",
        "error",
        "input_required",
        "unknown",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "clients (calls)",
    )
    return table("targets-table", headers, rows)


def errors_table(report: Report) -> list[str]:
    rows = [
        f'<tr><th scope="row"><code>{h(row.method or "(no method)")}</code></th>'
        f'{code(row.code)}<td class="text">{h(row.name)}</td>{num(row.count)}'
        f'<td class="text">{client_links(report, row.clients)}</td></tr>'
        for row in report.errors
    ]
    return table("errors-table", ("method", "code", "name", "count", "clients"), rows)


def clients_table(report: Report) -> list[str]:
    rows = [
        f'<tr><th scope="row">{client_link(report, client.id)}</th>'
        f'<td class="text">{h(client.user_agent or "-")}</td>{num(client.requests)}'
        f"{num(client.failed)}{num(client.streams)}{num(client.sessions)}"
        f'<td class="text">{h(counts(client.eras))}</td>'
        f'<td class="text">{h(counts(client.transports))}</td>'
        f'<td class="text">{h(client.first_seen or "-", 40)}</td>'
        f'<td class="text">{h(client.last_seen or "-", 40)}</td></tr>'
        for client in report.clients
    ]
    headers = (
        "client",
        "user agent",
        "requests",
        "failed",
        "streams",
        "sessions",
        "eras",
        "transports",
        "first seen",
        "last seen",
    )
    return table("clients-table", headers, rows)


def columns(report: Report) -> tuple[list[str], int]:
    """The grid's methods, most used first, and how many were left out."""
    advertised = set(report.advertised)
    kept: list[str] = []
    extra = dropped = 0
    for method in report.methods:
        if method not in advertised:
            if extra >= MAX_UNADVERTISED_COLUMNS:
                dropped += 1
                continue
            extra += 1
        kept.append(method)
    return kept, dropped


def matrix(report: Report) -> list[str]:
    methods, dropped = columns(report)
    out = [
        '<p class="legend">',
        '<span class="requested">12</span>requested (count)',
        '<span class="unadvertised">3</span>requested, not advertised to it',
        '<span class="advertised">&ndash;</span>advertised, never requested',
        '<span class="absent">&nbsp;</span>not advertised',
        "</p>",
    ]
    if not report.clients:
        return [*out, '<p class="note">No records.</p>']
    out += ['<div class="scroll">', '<table class="matrix" id="grid">', "<thead><tr>"]
    out.append('<th class="client">client</th>')
    out += [f'<th class="method" scope="col"><span>{h(method)}</span></th>' for method in methods]
    out += ["</tr></thead>", "<tbody>"]
    for client in report.clients:
        row = [
            f'<tr><th class="client" scope="row"><a href="#client-{client.id}">'
            f"{h(identity(client))}</a><small>{h(client.user_agent or '(no user agent)')}"
            "</small></th>"
        ]
        for method in methods:
            state, count = client.cell(method)
            shown = f"{count:,}" if count else ("&ndash;" if state == "advertised" else "")
            title = f"{h(client.label)} / {h(method)}: {CELL_TITLE[state]}"
            row.append(f'<td class="{state}" title="{title}">{shown}</td>')
        out.append("".join(row) + "</tr>")
    out += ["</tbody>", "</table>", "</div>"]
    if dropped:
        out.append(
            f'<p class="note">{dropped:,} more methods that were never advertised are not '
            "shown as columns; each client's table below lists them.</p>"
        )
    return out


def details(client: ClientReport) -> list[str]:
    out = [
        f'<details class="client" id="client-{client.id}">',
        f"<summary>{h(identity(client))} <small>{h(client.user_agent or '(no user agent)')}"
        f" &middot; {client.requests:,} requests, {client.failed:,} failed</small></summary>",
        "<dl>",
    ]
    rows = [
        ("requests", f"{client.requests:,} ({client.failed:,} failed)"),
        ("sessions", f"{client.sessions:,}"),
        ("seen", period(client.first_seen, client.last_seen)),
        ("eras", counts(client.eras)),
        ("transports", counts(client.transports)),
        ("protocol, header", counts(client.header_versions)),
        ("protocol, body", counts(client.body_versions)),
        ("capabilities", ", ".join(client.capability_names) or "-"),
        ("verbs", counts(client.verbs)),
        ("other requests", other_text(client) or "-"),
        ("errors", error_text(client)),
        ("streams", stream_text(client)),
        ("tasks", task_text(client)),
    ]
    out += [f"<dt>{name}</dt><dd>{h(text, 2000)}</dd>" for name, text in rows]
    out.append(f"<dt>latest capabilities</dt><dd><code>{h(compact(client.capabilities), 2000)}")
    out.append("</code></dd>")
    out.append(
        f"<dt>advertised, never requested</dt><dd>{code_list(client.never_requested)} "
        f'<span class="note">({h(SOURCE_NOTE[client.advertised_source])})</span></dd>'
    )
    if client.not_advertised:
        out.append(f"<dt>requested, not advertised</dt><dd>{code_list(client.not_advertised)}</dd>")
    out.append("</dl>")
    rows_html = []
    for method, use in client.methods.items():
        errors = client.errors_by_method.get(method, {})
        rows_html.append(
            f'<tr><th scope="row"><code>{h(method)}</code></th>{num(use.requests)}'
            f"{num(use.notifications)}{num(sum(errors.values()))}"
            f"{ms_cells(client.latency.get(method))}{ms_cells(client.ttfb.get(method))}</tr>"
        )
    headers = (
        "method",
        "requests",
        "notifications",
        "errors",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "first message p50",
        "p95",
        "p99",
    )
    out += table(f"methods-{client.id}", headers, rows_html)
    return [*out, "</details>"]


def code_list(items: Iterable[str]) -> str:
    return ", ".join(f"<code>{h(item)}</code>" for item in items) or "none"
