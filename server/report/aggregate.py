"""Adding request records up per client, for ``python -m server report``.

A client is (client name, client version, user agent); records without a client name fall
under ``(unidentified)``, one group per user agent. Bad input is counted, never fatal: lines
that are not records are ``malformed``, records of another schema version
``unknown_version``, records of a kind this reader does not know ``unknown_kind``; a file that
cannot be read to its end (a corrupt or truncated gzip) is noted and what came before it kept.

:class:`Aggregator` is the hot loop (a million records in a few seconds on one core): it keeps
plain counters per client and touches only the fields it needs; :meth:`Aggregator.report`
turns them into the immutable :class:`~server.report.model.Report` the renderers draw.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO, TypeVar

import orjson

from server.records.schema import SCHEMA_VERSION
from server.report.model import ClientReport, InputSummary, MethodUse, Report
from server.report.read import READ_ERRORS, line_batches

PSEUDO_METHODS = frozenset({"(response)", "(batch)"})
RECORD_KINDS = frozenset({"request", "stream"})
# Past this many distinct clients, new ones are folded into one group: a flood of made-up
# user agents must not exhaust memory.
MAX_CLIENTS = 10_000
# Tasks followed per client (their last status seen); past it, new ones are not followed.
MAX_TASKS_PER_CLIENT = 100_000
_TERMINAL = frozenset({"completed", "failed", "cancelled"})
OVERFLOW_NAME = "(other clients)"
# ISO 8601 times of one format compare as strings; "~" sorts after every digit.
_NO_FIRST = "~"

ClientKey = tuple[str | None, str | None, str | None]
K = TypeVar("K", str, int)


class ClientStats:
    """Running counters for one client (mutable, only touched by :class:`Aggregator`)."""

    __slots__ = (
        "advertised",
        "body_versions",
        "calls",
        "capabilities",
        "capabilities_time",
        "capability_names",
        "eras",
        "first",
        "header_versions",
        "http_statuses",
        "jsonrpc_errors",
        "key",
        "last",
        "no_method",
        "notes",
        "pseudo",
        "requests",
        "sessions",
        "stream_ends",
        "stream_events",
        "streams",
        "tasks",
        "verbs",
    )

    def __init__(self, key: ClientKey) -> None:
        self.key = key
        self.first = _NO_FIRST
        self.last = ""
        self.requests = 0
        self.calls: dict[str, int] = {}
        self.notes: dict[str, int] = {}
        self.pseudo: dict[str, int] = {}
        self.no_method = 0
        self.verbs: dict[str, int] = {}
        self.eras: dict[str, int] = {}
        self.header_versions: dict[str, int] = {}
        self.body_versions: dict[str, int] = {}
        self.capability_names: set[str] = set()
        self.capabilities: Any = None
        self.capabilities_time = ""
        self.advertised: set[str] = set()
        self.jsonrpc_errors: dict[int, int] = {}
        self.http_statuses: dict[int, int] = {}
        self.sessions: set[str] = set()
        self.streams = 0
        self.stream_events = 0
        self.stream_ends: dict[str, int] = {}
        # Task id -> the last status a record showed (an ended task's status is kept).
        self.tasks: dict[str, str] = {}


class Aggregator:
    """Feed it lines (or whole streams); ask for the :class:`Report` at the end."""

    def __init__(self) -> None:
        self.clients: dict[ClientKey, ClientStats] = {}
        self.overflow: ClientStats | None = None
        self.folded: set[ClientKey] = set()
        self.advertised: set[str] = set()
        self.files: list[str] = []
        self.errors: list[str] = []
        self.lines = 0
        self.malformed = 0
        self.unknown_version = 0
        self.unknown_kind = 0

    # -- input -----------------------------------------------------------------------------

    def read(self, stream: BinaryIO, name: str) -> None:
        """Every line of ``stream`` (plain or gzipped); read errors are noted, not raised."""
        self.read_batches(line_batches(stream), name)

    def read_batches(self, batches: Iterable[Sequence[bytes]], name: str) -> None:
        """Every batch of lines from one source (a file, a Redis stream); a read error (one of
        :data:`~server.report.read.READ_ERRORS`) ends the source with a note, not a raise."""
        self.files.append(name)
        try:
            for lines in batches:
                self.feed(lines)
        except READ_ERRORS as failure:
            self.errors.append(f"{name}: {str(failure) or type(failure).__name__}")

    def feed(self, lines: Sequence[bytes]) -> None:
        """Count each line into its client: the hot loop, so plain dicts and locals only."""
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        clients = self.clients
        count_request = self._request
        self.lines += len(lines)
        for line in lines:
            try:
                record = loads(line)
            except decode_error:
                record = None
            if not (
                type(record) is dict
                and record.get("v") == SCHEMA_VERSION
                and record.get("kind") in RECORD_KINDS
            ):
                self._reject(line, record)
                continue
            name = client_version = capabilities = None
            client = record.get("client")
            if type(client) is dict:
                name = client.get("name")
                if type(name) is str:
                    client_version = client.get("version")
                    if type(client_version) is not str:
                        client_version = None
                else:
                    name = None
                capabilities = client.get("capabilities")
            agent = record.get("user_agent")
            if type(agent) is not str:
                agent = None
            key = (name, client_version, agent)
            stats = clients.get(key)
            if stats is None:
                stats = self._client(key)
            when = record.get("time")
            if type(when) is not str:
                when = ""
            if record["kind"] == "request":
                count_request(stats, record, when, capabilities)
            else:
                self._stream(stats, record, when)

    def _reject(self, line: bytes, record: Any) -> None:
        """Say why a line is not a record this reader knows (off the hot path)."""
        if record is None and not line.strip():
            self.lines -= 1  # a blank line is not a line of input
            return
        version = record.get("v") if type(record) is dict else None
        kind = record.get("kind") if type(record) is dict else None
        if type(version) is int and version != SCHEMA_VERSION:
            self.unknown_version += 1
        elif type(version) is int and type(kind) is str:
            self.unknown_kind += 1
        else:
            self.malformed += 1

    def _request(
        self, stats: ClientStats, record: dict[str, Any], when: str, capabilities: Any
    ) -> None:
        stats.requests += 1
        if when:
            stats.first = min(stats.first, when)
            stats.last = max(stats.last, when)
        method = record.get("method")
        if type(method) is str:
            if method in PSEUDO_METHODS:
                counts = stats.pseudo
            elif record.get("notification") is True:
                counts = stats.notes
            else:
                counts = stats.calls
            counts[method] = counts.get(method, 0) + 1
        else:
            stats.no_method += 1
        verb = record.get("verb")
        if type(verb) is str:
            stats.verbs[verb] = stats.verbs.get(verb, 0) + 1
        era = record.get("era")
        if type(era) is str:
            stats.eras[era] = stats.eras.get(era, 0) + 1
        versions = record.get("protocol_version")
        if type(versions) is dict:
            header = versions.get("header")
            if type(header) is str:
                stats.header_versions[header] = stats.header_versions.get(header, 0) + 1
            body = versions.get("body")
            if type(body) is str:
                stats.body_versions[body] = stats.body_versions.get(body, 0) + 1
        if type(capabilities) is dict:
            stats.capability_names.update(capabilities)
            if when >= stats.capabilities_time:
                stats.capabilities = capabilities
                stats.capabilities_time = when
        error = record.get("error")
        if type(error) is dict:
            code = error.get("code")
            if type(code) is int:
                stats.jsonrpc_errors[code] = stats.jsonrpc_errors.get(code, 0) + 1
        status = record.get("status")
        if type(status) is int and not 200 <= status < 300:
            stats.http_statuses[status] = stats.http_statuses.get(status, 0) + 1
        self._sessions_tasks_offers(stats, record)

    def _sessions_tasks_offers(self, stats: ClientStats, record: dict[str, Any]) -> None:
        session = record.get("session_id")
        if type(session) is str:
            stats.sessions.add(session)
        task = record.get("task")
        if type(task) is dict:
            _follow_task(stats.tasks, task)
        offered = record.get("advertised")
        if type(offered) is list:
            for item in offered:
                if type(item) is str:
                    stats.advertised.add(item)
                    self.advertised.add(item)

    def _client(self, key: ClientKey) -> ClientStats:
        if len(self.clients) < MAX_CLIENTS:
            stats = self.clients[key] = ClientStats(key)
            return stats
        self.folded.add(key)
        if self.overflow is None:
            self.overflow = ClientStats((OVERFLOW_NAME, None, None))
        return self.overflow

    @staticmethod
    def _stream(stats: ClientStats, record: dict[str, Any], ended: str) -> None:
        stats.streams += 1
        events = record.get("events")
        if type(events) is int:
            stats.stream_events += events
        end = record.get("end")
        if type(end) is str:
            stats.stream_ends[end] = stats.stream_ends.get(end, 0) + 1
        opened = record.get("opened")
        if type(opened) is str and opened < stats.first:
            stats.first = opened
        stats.last = max(stats.last, ended)

    # -- output ----------------------------------------------------------------------------

    def report(self) -> Report:
        everyone = list(self.clients.values())
        if self.overflow is not None:
            everyone.append(self.overflow)
        clients = sorted(
            (self._client_report(stats) for stats in everyone),
            key=lambda c: (-c.requests, -c.streams, c.label, c.version or "", c.user_agent or ""),
        )
        totals: dict[str, int] = dict.fromkeys(self.advertised, 0)
        for client in clients:
            for method, use in client.methods.items():
                totals[method] = totals.get(method, 0) + use.total
        firsts = [c.first_seen for c in clients if c.first_seen is not None]
        lasts = [c.last_seen for c in clients if c.last_seen is not None]
        requests = sum(client.requests for client in clients)
        streams = sum(client.streams for client in clients)
        summary = InputSummary(
            files=list(self.files),
            lines=self.lines,
            records=requests + streams,
            requests=requests,
            streams=streams,
            malformed=self.malformed,
            unknown_version=self.unknown_version,
            unknown_kind=self.unknown_kind,
            folded_clients=len(self.folded),
            errors=list(self.errors),
        )
        return Report(
            input=summary,
            first_seen=min(firsts, default=None),
            last_seen=max(lasts, default=None),
            advertised=sorted(self.advertised),
            methods=sorted(totals, key=lambda method: (-totals[method], method)),
            clients=clients,
        )

    def _client_report(self, stats: ClientStats) -> ClientReport:
        methods = {
            method: MethodUse(stats.calls.get(method, 0), stats.notes.get(method, 0))
            for method in stats.calls.keys() | stats.notes.keys()
        }
        if stats.advertised:
            advertised, source = stats.advertised, "client"
        elif self.advertised:
            advertised, source = self.advertised, "input"
        else:
            advertised, source = set(), "none"
        name, version, agent = stats.key
        return ClientReport(
            name=name,
            version=version,
            user_agent=agent,
            requests=stats.requests,
            first_seen=None if stats.first == _NO_FIRST else stats.first,
            last_seen=stats.last or None,
            eras=by_count(stats.eras),
            header_versions=by_count(stats.header_versions),
            body_versions=by_count(stats.body_versions),
            capability_names=sorted(stats.capability_names),
            capabilities=encodable(stats.capabilities),
            methods=dict(sorted(methods.items(), key=lambda item: (-item[1].total, item[0]))),
            pseudo_methods=by_count(stats.pseudo),
            no_method=stats.no_method,
            verbs=by_count(stats.verbs),
            advertised=sorted(advertised),
            advertised_source=source,
            never_requested=sorted(advertised - methods.keys()),
            # Notifications are not offered, so only requests can be unadvertised.
            not_advertised=sorted(
                method
                for method, use in methods.items()
                if use.requests and method not in advertised
            )
            if advertised
            else [],
            jsonrpc_errors=by_count(stats.jsonrpc_errors),
            http_statuses=by_count(stats.http_statuses),
            sessions=len(stats.sessions),
            streams=stats.streams,
            stream_events=stats.stream_events,
            stream_ends=by_count(stats.stream_ends),
            tasks=by_count(_tally(stats.tasks)),
        )


def by_count(counts: dict[K, int]) -> dict[K, int]:
    """Most frequent first, ties in key order, so every rendering is stable."""
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def encodable(value: Any) -> Any:
    """``value`` if it can be written back as JSON (a record may nest deeper than orjson
    writes), else a marker saying it could not."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return {"_unrenderable": True}
    return value


def aggregate(sources: Iterable[tuple[str, BinaryIO]]) -> Report:
    """The report over named binary streams, in order."""
    aggregator = Aggregator()
    for name, stream in sources:
        aggregator.read(stream, name)
    return aggregator.report()


def _follow_task(tasks: dict[str, str], task: dict[str, Any]) -> None:
    """A record's word on a task: its status now, unless the task was seen ending already."""
    task_id, status = task.get("id"), task.get("status")
    if type(task_id) is not str or type(status) is not str:
        return
    known = tasks.get(task_id)
    if known is None and len(tasks) >= MAX_TASKS_PER_CLIENT:
        return
    if known not in _TERMINAL:
        tasks[task_id] = status


def _tally(statuses: dict[str, str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for status in statuses.values():
        counted[status] = counted.get(status, 0) + 1
    return counted
