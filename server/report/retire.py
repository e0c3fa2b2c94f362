"""Who is still affected by a retirement: ``python -m server report --retire ITEM``.

For an item of ``MCP_RETIRE`` (:mod:`server.retirement.plan`), every client whose requests in
the period used it: name and version (else its user agent), the callers (subjects) it came
as, first and last seen, how many requests, on how many server processes (the request id's
per-process prefix), and what to tell it. A line is looked at closely only when its bytes
could match (a substring test first), so a million records take about as long as reading
them. The command exits 1 while anyone was seen, so a pipeline can gate the switch on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from server.report.html import h, with_section
from server.report.json import plain
from server.report.sources import RequestScan
from server.retirement.plan import FEATURE_CAPABILITY, Item, parse_item

MAX_CLIENTS = 1000
MAX_SUBJECTS = 20
MAX_PROCESSES = 100
# What to tell a client that still uses an item, by a word of its name or user agent.
ADVICE: dict[str, tuple[tuple[str, str], ...]] = {
    "sse": (
        ("mcp-remote", "mcp-remote: drop --transport sse-only (http-first is its default)"),
        ("fastmcp", "FastMCP: connect with StreamableHttpTransport to the MCP path"),
        ("python", "official Python SDK: streamable_http_client instead of sse_client"),
        ("mcp", "the official SDKs: their Streamable HTTP client instead of the SSE one"),
    ),
}
DEFAULT_ADVICE = {
    "sse": "switch the client to Streamable HTTP: POST to the MCP path",
    "initialize": "upgrade to a client that speaks protocol 2026-07-28",
    "version": "upgrade the client: it still negotiates this protocol version",
    "method": "update the client so it no longer relies on this method",
}


@dataclass(slots=True)
class Affected:
    name: str | None
    version: str | None
    user_agent: str | None
    first: str
    last: str
    requests: int = 0
    subjects: set[str] = field(default_factory=set)
    processes: set[str] = field(default_factory=set)

    def to_json(self, item: Item) -> dict[str, Any]:
        return {
            "client": {"name": self.name, "version": self.version},
            "user_agent": self.user_agent,
            "subjects": sorted(self.subjects),
            "first_seen": self.first,
            "last_seen": self.last,
            "requests": self.requests,
            "processes": len(self.processes),
            "advice": advice(item, self.name, self.user_agent),
        }


def advice(item: Item, name: str | None, user_agent: str | None) -> str:
    words = f"{name or ''} {user_agent or ''}".lower()
    for needle, said in ADVICE.get(item.kind, ()):
        if needle in words:
            return said
    return DEFAULT_ADVICE[item.kind]


class RetireScan(RequestScan):
    """The clients that used one item, from record lines in any order."""

    def __init__(self, item: str, since: str | None = None, until: str | None = None) -> None:
        self.item = parse_item(item)
        self.since = since
        self.until = until
        self.clients: dict[tuple[Any, ...], Affected] = {}
        self.records = 0
        self.other_clients = 0  # past MAX_CLIENTS, counted but not listed
        self.with_report = False  # whether the whole report is drawn beside (HTML)
        self.needle, self._matches = self._matcher()

    def _matcher(self) -> tuple[bytes, Any]:
        item = self.item
        if item.kind == "sse":
            return b'"sse"', lambda r: r.get("transport") == "sse"
        if item.kind == "initialize":
            return b'"legacy"', lambda r: r.get("era") == "legacy"
        if item.kind == "version":
            version = item.value

            def uses_version(record: dict[str, Any]) -> bool:
                versions = _object(record.get("protocol_version"))
                return version in (versions.get("header"), versions.get("body"))

            return version.encode(), uses_version
        if item.client_feature:
            capability = FEATURE_CAPABILITY[item.value]

            def declares(record: dict[str, Any]) -> bool:
                capabilities = _object(record.get("client")).get("capabilities")
                return isinstance(capabilities, dict) and capability in capabilities

            return f'"{capability}"'.encode(), declares
        method = item.value
        return method.encode(), lambda r: r.get("method") == method

    def count(self, record: dict[str, Any]) -> None:
        when: str = record["time"]
        if not self._matches(record):
            return
        self.records += 1
        # Lines are read as they are (a hand-edited or foreign file): a field of the wrong
        # type counts as absent, as the report's aggregator counts it.
        client = _object(record.get("client"))
        name, version = _string(client.get("name")), _string(client.get("version"))
        agent = _string(record.get("user_agent"))
        key = (name, version) if name is not None else (None, agent)
        found = self.clients.get(key)
        if found is None:
            if len(self.clients) >= MAX_CLIENTS:
                self.other_clients += 1
                return
            found = self.clients[key] = Affected(name, version, agent, when, when)
        found.requests += 1
        found.first, found.last = min(found.first, when), max(found.last, when)
        subject = record.get("subject")
        if isinstance(subject, str) and len(found.subjects) < MAX_SUBJECTS:
            found.subjects.add(subject)
        request_id = record.get("request_id")
        if isinstance(request_id, str) and len(found.processes) < MAX_PROCESSES:
            found.processes.add(request_id[:8])

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.clients.values(), key=lambda a: (-a.requests, a.name or ""))
        return {
            "item": self.item.name,
            "since": self.since,
            "until": self.until,
            "requests": self.records,
            "clients": [affected.to_json(self.item) for affected in ordered],
            "other_clients": self.other_clients,
        }


def render_retire_text(scan: RetireScan) -> str:
    """The affected clients as a plain table, with the advice for each."""
    view = scan.to_json()
    period = f" since {view['since']}" if view["since"] else ""
    lines = [
        f"Clients that used {view['item']}{period}: {len(view['clients'])}"
        f" ({view['requests']} requests)"
    ]
    if view["other_clients"]:
        lines.append(f"... and {view['other_clients']} requests of clients past {MAX_CLIENTS}")
    for client in view["clients"]:
        who = client["client"]["name"] or f"(unidentified: {client['user_agent']})"
        version = client["client"]["version"] or "-"
        subjects = ", ".join(client["subjects"]) or "-"
        lines.append(
            f"- {plain(who)} {plain(version)}: {client['requests']} requests,"
            f" {client['first_seen']} .. {client['last_seen']}, {client['processes']}"
            f" server process(es), callers: {plain(subjects)}\n  advice: {client['advice']}"
        )
    if not view["clients"] and not view["other_clients"]:
        lines.append("Nobody: it can be switched off.")
    return "\n".join(lines) + "\n"


def row_cells(client: dict[str, Any]) -> tuple[str, ...]:
    """A client's row of the table, as Markdown and HTML draw it (each escapes it its way)."""
    return (
        client["client"]["name"] or client["user_agent"] or "(unidentified)",
        client["client"]["version"] or "-",
        str(client["requests"]),
        client["first_seen"],
        client["last_seen"],
        str(client["processes"]),
        client["advice"],
    )


def render_retire_markdown(scan: RetireScan) -> str:
    view = scan.to_json()
    rows = [
        f"## Who still uses `{view['item']}`\n",
        "| client | version | requests | first seen | last seen | processes | advice |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for client in view["clients"]:
        cells = row_cells(client)
        rows.append("| " + " | ".join(plain(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def with_retire_section(page: str, scan: RetireScan) -> str:
    """The report's HTML page with the section of ``scan`` right under its title."""
    return with_section(page, render_retire_html(scan))


def render_retire_html(scan: RetireScan) -> str:
    """A section for the HTML report: every value escaped (clients chose them)."""
    view = scan.to_json()
    rows = "".join(
        "<tr>" + "".join(f"<td>{h(cell)}</td>" for cell in row_cells(client)) + "</tr>"
        for client in view["clients"]
    )
    head = "".join(
        f"<th>{name}</th>"
        for name in ("client", "version", "requests", "first seen", "last seen", "processes")
    )
    return (
        f'<section id="retire"><h2>Who still uses {h(view["item"])}</h2>'
        f"<p>{len(view['clients'])} clients, {view['requests']} requests.</p>"
        f"<table><thead><tr>{head}<th>advice</th></tr></thead><tbody>{rows}</tbody></table>"
        "</section>"
    )


def _object(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


def _string(value: Any) -> str | None:
    return value if type(value) is str else None
