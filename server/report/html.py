"""The report as one self-contained HTML page: a clients-by-methods grid, then each client.

The page stands alone: inline CSS, no script, no fonts, images or any other URL, and a
Content-Security-Policy that forbids loading anything, so it can be mailed or archived and
opened anywhere. Every value from the records (client names, user agents, methods, times) is
made printable and HTML-escaped, attributes included: they are whatever a client chose to send.

In the grid a row is a client and a column a method; a cell is the count when the client
requested the method, and its colour says how that method stood for that client: requested,
requested though not advertised to it, advertised but never requested, or not advertised.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from server.report.model import ClientReport, Report
from server.report.render import (
    MAX_VALUE_CHARS,
    SOURCE_NOTE,
    compact,
    counts,
    error_text,
    identity,
    input_lines,
    other_text,
    period,
    plain,
    stream_text,
    task_text,
)

# Methods nobody was advertised get a column each up to this many; a client inventing method
# names must not make the grid unreadable (the per-client tables still list them all).
MAX_UNADVERTISED_COLUMNS = 30

CELL_TITLE = {
    "requested": "requested",
    "unadvertised": "requested, though not advertised to this client",
    "advertised": "advertised to this client, never requested",
    "absent": "not advertised to this client, not requested",
}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
h3 { font-size: 1.05rem; border-bottom: 1px solid #ccc; padding-bottom: .2rem; }
code, .num { font-family: ui-monospace, monospace; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; }
.matrix th, .matrix td { border: 1px solid #d0d0d0; padding: .2rem .35rem; }
.matrix thead th.method { vertical-align: bottom; white-space: nowrap; }
.matrix thead th.method span { writing-mode: vertical-rl; transform: rotate(180deg); }
.matrix th.client { text-align: left; white-space: nowrap; max-width: 22rem; overflow: hidden; }
.matrix th.client small { display: block; color: #666; font-weight: normal; }
.matrix td { text-align: right; min-width: 3.2rem; font-family: ui-monospace, monospace; }
.requested { background: #c7ecc9; }
.unadvertised { background: #f8c9a0; }
.advertised { background: #fff3b0; color: #8a6d00; text-align: center; }
.absent { background: #f2f2f2; color: #aaa; }
.legend span { display: inline-block; min-width: 2.2rem; padding: 0 .4rem; margin: 0 .2rem 0 .8rem;
  border: 1px solid #d0d0d0; text-align: center; }
.methods th, .methods td { padding: .1rem .6rem; border-bottom: 1px solid #eee; }
.methods td { text-align: right; font-family: ui-monospace, monospace; }
.methods th { text-align: left; font-weight: normal; }
.methods thead th { font-weight: bold; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; }
dt { font-weight: bold; } dd { margin: 0; overflow-wrap: anywhere; }
.note { color: #666; }
"""


def h(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """Printable, cut, and escaped for text and attribute values alike."""
    return html.escape(plain(value, limit), quote=True)


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        # Nothing may be fetched or run, whatever ends up in the page.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>MCP client report</title>",
        f"<style>{STYLE}</style>",
        "</head>",
        "<body>",
        "<h1>MCP client report</h1>",
        "<ul>",
        *(f"<li>{h(line, 400)}</li>" for line in input_lines(report)),
        "</ul>",
        "<h2>Clients by method</h2>",
        *matrix(report),
        "<h2>Clients</h2>",
    ]
    for number, client in enumerate(report.clients, 1):
        parts.extend(details(number, client))
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


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
    out += ['<div class="scroll">', '<table class="matrix">', "<thead><tr>"]
    out.append('<th class="client">client</th>')
    out += [f'<th class="method" scope="col"><span>{h(method)}</span></th>' for method in methods]
    out += ["</tr></thead>", "<tbody>"]
    for number, client in enumerate(report.clients, 1):
        row = [
            f'<tr><th class="client" scope="row"><a href="#client-{number}">'
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


def details(number: int, client: ClientReport) -> list[str]:
    out = [
        f'<section id="client-{number}">',
        f"<h3>{h(identity(client))} <small>{h(client.user_agent or '(no user agent)')}</small>"
        "</h3>",
        "<dl>",
    ]
    rows = [
        ("requests", f"{client.requests:,}"),
        ("sessions", f"{client.sessions:,}"),
        ("seen", period(client.first_seen, client.last_seen)),
        ("eras", counts(client.eras)),
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
    out += ['<table class="methods">', "<thead><tr><th>method</th><th>requests</th>"]
    out.append(
        "<th>notifications</th></tr></thead>",
    )
    out.append("<tbody>")
    out += [
        f"<tr><th><code>{h(method)}</code></th><td>{use.requests:,}</td>"
        f"<td>{use.notifications:,}</td></tr>"
        for method, use in client.methods.items()
    ]
    out += ["</tbody>", "</table>", "</section>"]
    return out


def code_list(items: Iterable[str]) -> str:
    return ", ".join(f"<code>{h(item)}</code>" for item in items) or "none"
