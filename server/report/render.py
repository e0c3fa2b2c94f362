"""Drawing a :class:`~server.report.model.Report`: terminal table, JSON, Markdown (HTML is in
:mod:`server.report.html`).

Client names, versions, user agents and method names come from the network, so every format
treats them as hostile: the table replaces control and format characters (no terminal escape
sequences, no bidi tricks) and cuts very long values; Markdown also backslash-escapes its own
punctuation; JSON writes them as they are, which JSON quoting makes safe. The JSON document's
keys are fixed and documented in ``docs/records.md`` ("Report").
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from server.report.model import ClientReport, Report

JSON_FORMAT_VERSION = 1
WIDTH = 100
LABEL_WIDTH = 17
MAX_VALUE_CHARS = 120
SOURCE_NOTE = {
    "client": "advertised list: from its own initialize/discover records",
    "input": "advertised list: it sent no initialize/discover, so every list in the input",
    "none": "advertised list: the input has none, so nothing to compare",
}


# -- JSON ----------------------------------------------------------------------------------


def to_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON data (error codes and statuses become string keys)."""
    summary = report.input
    return {
        "report": JSON_FORMAT_VERSION,
        "input": {
            "files": summary.files,
            "lines": summary.lines,
            "records": summary.records,
            "requests": summary.requests,
            "streams": summary.streams,
            "malformed": summary.malformed,
            "unknown_version": summary.unknown_version,
            "unknown_kind": summary.unknown_kind,
            "folded_clients": summary.folded_clients,
            "errors": summary.errors,
        },
        "first_seen": report.first_seen,
        "last_seen": report.last_seen,
        "advertised": report.advertised,
        "methods": report.methods,
        "clients": [client_json(client) for client in report.clients],
    }


def client_json(client: ClientReport) -> dict[str, Any]:
    return {
        "label": client.label,
        "name": client.name,
        "version": client.version,
        "user_agent": client.user_agent,
        "requests": client.requests,
        "first_seen": client.first_seen,
        "last_seen": client.last_seen,
        "eras": client.eras,
        "protocol_versions": {"header": client.header_versions, "body": client.body_versions},
        "capabilities": {"names": client.capability_names, "latest": client.capabilities},
        "methods": {
            method: {"requests": use.requests, "notifications": use.notifications}
            for method, use in client.methods.items()
        },
        "pseudo_methods": client.pseudo_methods,
        "no_method": client.no_method,
        "verbs": client.verbs,
        "advertised": {"source": client.advertised_source, "methods": client.advertised},
        "advertised_never_requested": client.never_requested,
        "requested_not_advertised": client.not_advertised,
        "errors": {
            "jsonrpc": {str(code): count for code, count in client.jsonrpc_errors.items()},
            "http": {str(status): count for status, count in client.http_statuses.items()},
        },
        "sessions": client.sessions,
        "streams": {
            "count": client.streams,
            "events": client.stream_events,
            "end": client.stream_ends,
        },
        "tasks": client.tasks,
    }


def render_json(report: Report) -> str:
    return orjson.dumps(to_json(report), option=orjson.OPT_INDENT_2).decode() + "\n"


# -- shared text helpers -------------------------------------------------------------------


def plain(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """``value`` safe to print, cut to ``limit`` characters: control and format characters
    (terminal escapes, bidi overrides) and separators other than the space (line breaks) are
    shown as Python escapes."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def counts(mapping: Mapping[Any, int], times: str = " ") -> str:
    """``{"legacy": 3, "modern": 1}`` -> ``legacy 3, modern 1``."""
    return ", ".join(f"{plain(key)}{times}{count:,}" for key, count in mapping.items()) or "-"


def identity(client: ClientReport) -> str:
    parts = [plain(client.label)]
    if client.version is not None:
        parts.append(plain(client.version))
    return " ".join(parts)


def period(first: str | None, last: str | None) -> str:
    return f"{plain(first, 40)} .. {plain(last, 40)}" if first and last else "-"


def input_lines(report: Report) -> list[str]:
    summary = report.input
    lines = [
        f"{len(summary.files)} file(s): {', '.join(plain(name) for name in summary.files)}",
        f"{summary.lines:,} lines: {summary.requests:,} request records, "
        f"{summary.streams:,} stream records; skipped {summary.malformed:,} malformed, "
        f"{summary.unknown_version:,} of an unknown version, "
        f"{summary.unknown_kind:,} of an unknown kind",
        f"period {period(report.first_seen, report.last_seen)}; {len(report.clients):,} clients",
    ]
    if summary.folded_clients:
        lines.append(
            f"{summary.folded_clients:,} clients past the first {len(report.clients) - 1:,} "
            "are folded into '(other clients)'"
        )
    lines.extend(f"read error: {plain(error, 300)}" for error in summary.errors)
    return lines


def error_text(client: ClientReport) -> str:
    parts = []
    if client.jsonrpc_errors:
        parts.append("JSON-RPC " + counts(client.jsonrpc_errors, " x"))
    if client.http_statuses:
        parts.append("HTTP " + counts(client.http_statuses, " x"))
    return "; ".join(parts) or "none"


def stream_text(client: ClientReport) -> str:
    if not client.streams:
        return "none"
    return (
        f"{client.streams:,} streams, {client.stream_events:,} events; "
        f"ended {counts(client.stream_ends)}"
    )


def task_text(client: ClientReport) -> str:
    """The client's tasks by the last status its requests saw."""
    if not client.tasks:
        return "none"
    return f"{sum(client.tasks.values()):,}: last seen {counts(client.tasks)}"


def other_text(client: ClientReport) -> str:
    """The requests that name no method of their own (answers, batches, bodiless)."""
    other = dict(client.pseudo_methods)
    if client.no_method:
        other["no method"] = client.no_method
    return counts(other) if other else ""


# -- terminal table ------------------------------------------------------------------------


def render_table(report: Report) -> str:
    out = ["MCP client report"]
    for line in input_lines(report):
        out += textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    out.append("")
    for client in report.clients:
        out.extend(table_block(client))
    return "\n".join(out) + "\n"


def table_block(client: ClientReport) -> list[str]:
    title = f"== {identity(client)} | {plain(client.user_agent or '(no user agent)')} "
    out = [title + "=" * max(3, WIDTH - len(title))]
    out += field(
        "requests",
        f"{client.requests:,} | streams {client.streams:,} | sessions {client.sessions:,}",
    )
    out += field("seen", period(client.first_seen, client.last_seen))
    out += field("eras", counts(client.eras))
    out += field(
        "protocol",
        f"header {counts(client.header_versions, ' x')}; body {counts(client.body_versions, ' x')}",
    )
    out += field("capabilities", ", ".join(map(plain, client.capability_names)) or "-")
    out += field("latest caps", plain(compact(client.capabilities), 300))
    out += field("verbs", counts(client.verbs))
    name_width = WIDTH - 2 - 12 - 15
    out.append(f"  {'method':<{name_width}}{'requests':>12}{'notifications':>15}")
    for method, use in client.methods.items():
        out.append(
            f"  {plain(method, name_width - 1):<{name_width}}"
            f"{use.requests:>12,}{use.notifications:>15,}"
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


def compact(value: Any) -> str:
    return "-" if value is None else orjson.dumps(value).decode()


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
    for client in report.clients:
        out += ["", f"## {md(identity(client))}: {md(client.user_agent or '(no user agent)')}", ""]
        out += [
            f"- **Requests:** {client.requests:,}; **sessions:** {client.sessions:,}; "
            f"**seen:** {md(period(client.first_seen, client.last_seen))}",
            f"- **Eras:** {md(counts(client.eras))}",
            f"- **Protocol versions:** header {md(counts(client.header_versions))}; "
            f"body {md(counts(client.body_versions))}",
            f"- **Capabilities:** {md_list(client.capability_names)}; "
            f"latest {md_code(compact(client.capabilities))}",
            f"- **Verbs:** {md(counts(client.verbs))}",
        ]
        if other := other_text(client):
            out.append(f"- **Other requests:** {md(other)}")
        out += ["", "| method | requests | notifications |", "| --- | --: | --: |"]
        out += [
            f"| {md(method)} | {use.requests:,} | {use.notifications:,} |"
            for method, use in client.methods.items()
        ]
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
