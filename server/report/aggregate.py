"""Adding request records up per client, for ``python -m server report`` and the live report.

A client is (name, version, user agent); records without a name fall under ``(unidentified)``,
one group per user agent. Bad input is counted, never fatal (``malformed``,
``unknown_version``, ``unknown_kind``, a truncated file noted). :class:`Aggregator` is the hot
loop (a million records in a few seconds): plain counters per client, target and minute,
latency histograms, only the fields it needs; its memory is bounded whatever it reads
(:class:`~server.report.counters.Limits`), so the live report can feed one for as long as the
server runs. :func:`server.report.build.build_report` turns the counters into the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import log2 as _log2
from typing import Any, BinaryIO

import orjson

from server.records.schema import SCHEMA_VERSION
from server.report.build import build_report
from server.report.counters import (
    ClientKey,
    ClientStats,
    Limits,
    Tally,
    follow_task,
)
from server.report.model import Report
from server.report.sources import READ_ERRORS, line_batches
from server.report.tally import BUCKETS_PER_DOUBLING as _PER_DOUBLING
from server.report.tally import CALL_METHODS
from server.report.tally import bucket as _bucket

PSEUDO_METHODS = frozenset({"(response)", "(batch)"})
# The transport of a record without a ``transport`` field (the field names only HTTP+SSE).
STREAMABLE_HTTP = "streamable-http"
RECORD_KINDS = frozenset({"request", "stream"})
# Minutes kept for the timeline (30 days); the oldest go first.
MAX_MINUTES = 43_200
# Streams whose lifetime is not a latency: listening, and the legacy GET stream (no method).
NOT_LATENCY = frozenset({"subscriptions/listen", None})
_NUMBERS = frozenset({int, float})
# A request record's string fields counted alike, with the ClientStats counter of each; and
# those under its ``protocol_version``.
COUNTED = (("verb", "verbs"), ("era", "eras"))
VERSIONS_COUNTED = (("header", "header_versions"), ("body", "body_versions"))


class Aggregator(Tally):
    """Feed it lines (or whole streams); ask for the :class:`Report` at the end."""

    # -- input -----------------------------------------------------------------------------

    def read(self, stream: BinaryIO, name: str) -> None:
        """Every line of ``stream`` (plain or gzipped); read errors are noted, not raised."""
        self.read_batches(line_batches(stream), name)

    def read_batches(self, batches: Iterable[Sequence[bytes]], name: str) -> None:
        """Every batch of lines from one source (a file, a Redis stream); a read error (one of
        :data:`~server.report.sources.READ_ERRORS`) ends the source with a note, not a raise."""
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
        count_stream = self._stream
        record_filter = self.filter if self.filter.active else None
        small = self.limits.capabilities_bytes
        also = self.also
        self.lines += len(lines)
        for line in lines:
            try:
                record = loads(line)
            except decode_error:
                record = None
            if also is not None and type(record) is dict:
                also(record)
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
            when = record.get("time")
            if type(when) is not str:
                when = ""
            if record_filter is not None and not (
                record_filter.keeps_time(when)
                and record_filter.keeps_client(key)
                and record_filter.keeps_method(record.get("method"))
            ):
                self.filtered_out += 1
                continue
            stats = clients.get(key)
            if stats is None:
                stats = self._client(key)
            if record["kind"] == "request":
                if len(line) > small and type(capabilities) is dict:
                    capabilities = self.small_capabilities(capabilities)
                count_request(stats, record, when, capabilities)
            else:
                count_stream(stats, record, when)

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
        """One request record into its client's counters: the hot loop's body, so the fields
        counted alike go through :data:`COUNTED` and the rest is written out."""
        get = record.get
        stats.requests += 1
        if when:
            if when < stats.first:  # noqa: PLR1730 - min() is a call, on every record
                stats.first = when
            if when > stats.last:  # noqa: PLR1730
                stats.last = when
        method = self._method(stats, get("method"), get("notification") is True)
        self._strings(stats, record, COUNTED)
        era = get("era")
        if type(era) is not str:
            era = None
        transport = get("transport")
        # Records before the field, and every Streamable HTTP one, have no transport.
        key = f"{transport if type(transport) is str else STREAMABLE_HTTP}/{era or '-'}"
        counts = stats.transports
        counts[key] = counts.get(key, 0) + 1
        versions = get("protocol_version")
        if type(versions) is dict:
            self._strings(stats, versions, VERSIONS_COUNTED)
        if type(capabilities) is dict:
            self._capabilities(stats, capabilities, when)
        code, failed = self._failure(stats, method, get("error"), get("status"))
        session = get("session_id")
        if type(session) is str and session not in stats.sessions:
            self.add_session(stats.sessions, session)
        task = get("task")
        if task is not None:
            follow_task(self, stats.tasks, task)
        streaming = get("streaming") is True
        duration = None if streaming else self._latency(stats, method, get("duration_ms"))
        if method in CALL_METHODS:
            failed = self.targets.call(stats, record, method, code, streaming, duration) or failed
        elif method == "subscriptions/listen":
            self._listen(stats, record)
        if failed:
            stats.failed += 1
        minute = self.minutes.get(when[:16])
        if minute is None:
            minute = self._minute(when[:16])
        minute[0] += 1
        if failed:
            minute[1] += 1
        offered = get("advertised")
        if offered is not None:
            self._advertised(stats, era, offered)

    def _latency(self, stats: ClientStats, method: str | None, duration: Any) -> Any:
        """A request's duration counted in its method's histogram; None if it has none."""
        if method is None or type(duration) not in _NUMBERS:
            return None
        histograms = stats.latency
        histogram = histograms.get(method)
        if histogram is None:
            histogram = self.histogram_for(histograms, method)
        # tally.bucket, written out.
        index = int(_log2(1.0 + duration * 1000.0) * _PER_DOUBLING) if duration > 0 else 0
        histogram[index] = histogram.get(index, 0) + 1
        return duration

    def _method(self, stats: ClientStats, method: Any, notification: bool) -> str | None:
        """The record's method counted (a call, a notification, or a pseudo-method) and
        returned as the tally keeps it; None if it has none."""
        if type(method) is not str:
            stats.no_method += 1
            return None
        name = self.methods.get(method) or self.method_of(method)
        if name in PSEUDO_METHODS:
            counts = stats.pseudo
        elif notification:
            counts = stats.notes
        else:
            counts = stats.calls
        if name in counts:
            counts[name] += 1
        else:
            self.count_new(counts, name)
        return name

    def _strings(
        self, stats: ClientStats, fields: dict[str, Any], table: tuple[tuple[str, str], ...]
    ) -> None:
        """Each string field of ``table`` counted in its counter of ``stats``; a key a client
        names is counted as it is only while there is room (``Tally.count_new``)."""
        get = fields.get
        for field, attribute in table:
            value = get(field)
            if type(value) is str:
                counts = getattr(stats, attribute)
                if value in counts:
                    counts[value] += 1
                else:
                    self.count_new(counts, value)

    def _capabilities(self, stats: ClientStats, capabilities: dict[str, Any], when: str) -> None:
        if capabilities:
            names = stats.capability_names
            for name in capabilities:
                if name not in names:
                    names.add(self.admit(names, self.limits.values, str(name)))
        if when >= stats.capabilities_time:
            stats.capabilities = capabilities
            stats.capabilities_time = when

    def _failure(
        self, stats: ClientStats, method: str | None, error: Any, status: Any
    ) -> tuple[int | None, bool]:
        """The JSON-RPC error's code (counted) and whether the request failed (an error, or an
        HTTP status of 400 or more; any status but 2xx is counted)."""
        code, failed = (None, False) if error is None else self._error(stats, method, error)
        if type(status) is int and not 200 <= status < 300:
            stats.http_statuses[status] = stats.http_statuses.get(status, 0) + 1
            if status >= 400:
                failed = True
        return code, failed

    def _error(self, stats: ClientStats, method: str | None, error: Any) -> tuple[int | None, bool]:
        """A JSON-RPC error counted; its code (None if it has none) and whether it is one."""
        if type(error) is not dict:
            return None, False
        code = error.get("code")
        if type(code) is not int:
            return None, True
        self.count_error(stats.errors, method, code)
        return code, True

    def _advertised(self, stats: ClientStats, era: str | None, offered: Any) -> None:
        if type(offered) is not list or era is None:
            return
        own = stats.advertised.setdefault(era, set())
        everyone = self.advertised.setdefault(era, set())
        for item in offered:
            if type(item) is str and item not in own:
                key = self.admit(own, self.limits.values, item)
                own.add(key)
                everyone.add(key)

    @staticmethod
    def _listen(stats: ClientStats, record: dict[str, Any]) -> None:
        params = record.get("params")
        wanted = params.get("notifications") if type(params) is dict else None
        if type(wanted) is dict and wanted.get("resourceSubscriptions"):
            stats.listen_resources += 1

    def _minute(self, minute: str) -> list[int]:
        """A new minute's counters (a record without a time counts under "")."""
        minutes = self.minutes
        if len(minutes) >= MAX_MINUTES:
            del minutes[min(minutes)]
        counts = minutes[minute] = [0, 0]
        return counts

    def _client(self, key: ClientKey) -> ClientStats:
        """A client not found under its key as the record gave it: found under its key cut to
        ``value_chars``, or new, or folded into the overflow client past ``Limits.clients``."""
        limits = self.limits
        chars = limits.value_chars
        key = (
            None if key[0] is None else key[0][:chars],
            None if key[1] is None else key[1][:chars],
            None if key[2] is None else key[2][:chars],
        )
        stats = self.clients.get(key)
        if stats is not None:
            return stats
        if len(self.clients) < limits.clients:
            stats = self.clients[key] = ClientStats(key)
            return stats
        if len(self.folded) < limits.folded:
            self.folded.add(hash(key))
        return self.overflow_stats()

    def _stream(  # noqa: PLR0915 - the hot loop, written out: calls cost more
        self, stats: ClientStats, record: dict[str, Any], ended: str
    ) -> None:
        stats.streams += 1
        events = record.get("events")
        if type(events) is int:
            stats.stream_events += events
        end = record.get("end")
        if type(end) is str:
            counts = stats.stream_ends
            if end in counts:
                counts[end] += 1
            else:
                self.count_new(counts, end)
        opened = record.get("opened")
        if type(opened) is not str:
            opened = ""
        if opened and opened < stats.first:
            stats.first = opened
        stats.last = max(stats.last, ended)
        method = record.get("method")
        if type(method) is not str or method in NOT_LATENCY:
            return
        method = self.methods.get(method) or self.method_of(method)
        # A streamed answer: its stream record has the whole exchange and how it ended.
        lasted = record.get("open_ms")
        if type(lasted) is float or type(lasted) is int:
            histogram = stats.latency.get(method)
            if histogram is None:
                histogram = self.histogram_for(stats.latency, method)
            index = _bucket(lasted)
            histogram[index] = histogram.get(index, 0) + 1
        else:
            lasted = None
        first = record.get("ttfb_ms")
        if type(first) is float or type(first) is int:
            histogram = stats.ttfb.get(method)
            if histogram is None:
                histogram = self.histogram_for(stats.ttfb, method)
            index = _bucket(first)
            histogram[index] = histogram.get(index, 0) + 1
        failed = False
        code = None
        error = record.get("error")
        if type(error) is dict:
            failed = True
            code = error.get("code")
            if type(code) is int:
                self.count_error(stats.errors, method, code)
            else:
                code = None
        outcome = record.get("outcome")
        if method in CALL_METHODS and type(outcome) is str:
            failed = self.targets.settle(stats, record, method, outcome, code, lasted) or failed
        if failed:
            stats.failed += 1
            minute = self.minutes.get(opened[:16]) if len(opened) >= 16 else None
            if minute is not None:
                minute[1] += 1

    # -- output ----------------------------------------------------------------------------

    def report(self) -> Report:
        return build_report(self)


def aggregate(sources: Iterable[tuple[str, BinaryIO]], limits: Limits | None = None) -> Report:
    """The report over named binary streams, in order."""
    aggregator = Aggregator(limits=limits)
    for name, stream in sources:
        aggregator.read(stream, name)
    return aggregator.report()
