"""Drawing a :class:`~server.report.model.Report` as JSON, and the text helpers every format
shares (the terminal table and Markdown are in :mod:`server.report.text`, HTML in
:mod:`server.report.html`).

Client names, versions, user agents, method and tool names come from the network, so every
format treats them as hostile: text formats replace control and format characters (no terminal
escape sequences, no bidi tricks) and cut very long values; Markdown also backslash-escapes its
own punctuation; JSON writes them as they are, which JSON quoting makes safe. The JSON
document's keys are fixed and documented in ``docs/records.md`` ("Report").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from server.report.model import ClientReport, FeatureReport, Report, TargetReport
from server.report.tally import Latency, error_name

JSON_FORMAT_VERSION = 1
WIDTH = 100
LABEL_WIDTH = 17
MAX_VALUE_CHARS = 120
SOURCE_NOTE = {
    "client": "advertised list: from its own initialize/discover records",
    "input": "advertised list: it sent no initialize/discover, so every list of its eras in "
    "the input",
    "mixed": "advertised list: its own initialize/discover where it sent one, else every list "
    "of that era in the input",
    "none": "advertised list: the input has none for its eras, so nothing to compare",
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
            "filtered_out": summary.filtered_out,
            "filters": summary.filters,
        },
        "first_seen": report.first_seen,
        "last_seen": report.last_seen,
        "advertised": report.advertised,
        "methods": report.methods,
        "clients": [client_json(client) for client in report.clients],
        "advertised_by_era": report.advertised_by_era,
        "totals": totals_json(report),
        "errors": [
            {
                "method": row.method,
                "code": row.code,
                "name": row.name,
                "count": row.count,
                "clients": row.clients,
            }
            for row in report.errors
        ],
        "tools": [target_json(t) for t in report.targets if t.kind == "tool"],
        "prompts": [target_json(t) for t in report.targets if t.kind == "prompt"],
        "resources": [target_json(t) for t in report.targets if t.kind in ("resource", "template")],
        "features": [feature_json(feature) for feature in report.features],
        "timeline": {
            "minutes": report.timeline.minutes,
            "points": [list(point) for point in report.timeline.points],
        },
    }


def latency_json(found: Latency | None) -> dict[str, float | int] | None:
    return None if found is None else found.to_json()


def totals_json(report: Report) -> dict[str, Any]:
    totals = report.totals
    return {
        "requests": totals.requests,
        "streams": totals.streams,
        "failed": totals.failed,
        "clients": totals.clients,
        "latency": latency_json(totals.latency),
        "methods": {
            method: {
                "requests": total.requests,
                "notifications": total.notifications,
                "failed": total.failed,
                "clients": total.clients,
                "latency": latency_json(total.latency),
            }
            for method in report.methods
            if (total := totals.methods.get(method)) is not None
        },
    }


def target_json(target: TargetReport) -> dict[str, Any]:
    return {
        "kind": target.kind,
        "name": target.name,
        "calls": target.calls,
        "outcomes": target.outcomes,
        "is_error_rate": target.rate("is_error"),
        "crash_rate": target.rate("crash"),
        "error_codes": {
            str(code): {"name": error_name(code), "count": count}
            for code, count in target.error_codes.items()
        },
        "latency": latency_json(target.latency),
        "clients": [
            {"client": use.client, "calls": use.calls, "outcomes": use.outcomes}
            for use in target.clients
        ],
    }


def feature_json(feature: FeatureReport) -> dict[str, Any]:
    return {
        "feature": feature.feature,
        "methods": feature.methods,
        "clients_used": len(feature.used_by),
        "used_by": feature.used_by,
        "discovered": feature.discovered,
        "used_without_discovery": feature.used_without_discovery,
        "discovered_never_used": feature.discovered_never_used,
    }


def client_json(client: ClientReport) -> dict[str, Any]:
    return {
        "id": client.id,
        "label": client.label,
        "name": client.name,
        "version": client.version,
        "user_agent": client.user_agent,
        "requests": client.requests,
        "failed": client.failed,
        "first_seen": client.first_seen,
        "last_seen": client.last_seen,
        "eras": client.eras,
        "transports": client.transports,
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
            "names": {str(code): error_name(code) for code in client.jsonrpc_errors},
            "by_method": {
                method: {str(code): count for code, count in codes.items()}
                for method, codes in client.errors_by_method.items()
            },
        },
        "latency": {method: found.to_json() for method, found in client.latency.items()},
        "ttfb": {method: found.to_json() for method, found in client.ttfb.items()},
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


def who(client: ClientReport) -> str:
    """How a person tells a client apart in a list: its identity, and for an unidentified
    client its user agent."""
    if client.name is None and client.user_agent:
        return f"{identity(client)} {plain(client.user_agent, 60)}"
    return identity(client)


def milliseconds(value: float) -> str:
    """A duration for people: 0.412 ms, 12.3 ms, 1,250 ms."""
    if value < 1:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def latency_text(found: Latency | None) -> str:
    if found is None:
        return "-"
    return (
        f"p50 {milliseconds(found.p50)} / p95 {milliseconds(found.p95)} / "
        f"p99 {milliseconds(found.p99)} ms"
    )


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def client_names(report: Report, ids: list[str] | dict[str, int]) -> str:
    """Clients named by id, as people tell them apart, with counts for a mapping."""
    if isinstance(ids, dict):
        return ", ".join(f"{who(report.client(key))} ({count:,})" for key, count in ids.items())
    return ", ".join(who(report.client(key)) for key in ids)


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
    filters = summary.filters or {}
    shown = {key: value for key, value in filters.items() if value}
    if shown:
        said = "; ".join(
            f"{key} {', '.join(map(plain, value)) if isinstance(value, list) else plain(value)}"
            for key, value in shown.items()
        )
        lines.append(f"filters: {said}; {summary.filtered_out:,} records left out")
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
        named = {
            f"{code} {error_name(code)}": count for code, count in client.jsonrpc_errors.items()
        }
        parts.append("JSON-RPC " + counts(named, " x"))
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


def compact(value: Any) -> str:
    return "-" if value is None else orjson.dumps(value).decode()
