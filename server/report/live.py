"""The live report: the same report, kept up to date inside the server, for an admin path.

:class:`LiveReport` holds an :class:`~server.report.aggregate.Aggregator` fed with record lines
as they are written: as one more sink, or, when records go to a Redis stream, by
:class:`~server.report.redis.StreamTail`, which sees every replica's records. Its memory is
bounded by :data:`~server.report.counters.LIVE_LIMITS`, so it runs as long as the server does.
Feeding and reading are on different threads under one lock. Who may see it is decided by its
route, :mod:`server.transport.admin`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson

from server.records.schema import iso_time
from server.report.aggregate import Aggregator
from server.report.counters import LIVE_LIMITS
from server.report.html import render_html, with_section
from server.report.json import render_json
from server.report.model import Report
from server.report.retire import RetireScan, with_retire_section
from server.report.tenants import TENANT_FORMS, TenantScan, render_tenants_html

log = logging.getLogger(__name__)


class LiveReport:
    """A record sink (``write``, ``close``) that keeps the report; thread-safe."""

    name = "live"

    def __init__(
        self, *, refresh_s: float, source: str = "this process", retire: Sequence[str] = ()
    ) -> None:
        self.refresh_s = refresh_s
        # Who still uses each item of MCP_RETIRE, since this process started (?retire=ITEM).
        self.retire_scans = {item: RetireScan(item) for item in retire}
        # Every tenant's traffic since this process started (?by-tenant, ?tenant=T).
        self.tenants = TenantScan()
        self._lock = threading.Lock()
        self._aggregator = Aggregator(limits=LIVE_LIMITS)
        self._aggregator.files.append(f"(live: {source}, since {iso_time(time.time())})")
        self._aggregator.also = self._scan
        self._failures = 0

    def write(self, lines: Sequence[bytes]) -> None:
        """Count a batch of record lines (newline-terminated or not). Never raises: a report
        that cannot count must not make the records look unwritable."""
        try:
            with self._lock:
                self._aggregator.feed(lines)  # and the scans, each line it decodes (_scan)
        except Exception:
            self._failed()

    def _scan(self, record: dict[str, Any]) -> None:
        """A line the aggregator decoded, into the retire and tenant scans; a scan that cannot
        count it does not stop the aggregator counting the rest."""
        try:
            for scan in self.retire_scans.values():
                scan.read_record(record)
            self.tenants.read_record(record)
        except Exception:
            self._failed()

    def _failed(self) -> None:
        self._failures += 1
        if self._failures == 1:
            log.exception("the live report could not count a batch of records")

    def close(self) -> None:
        return None

    def report(self) -> Report:
        with self._lock:
            return self._aggregator.report()

    def render(self, form: str, retire: str | None = None, tenants: str | None = None) -> str:
        """The report as ``json`` or the live ``html`` page; with ``retire`` (an item of
        MCP_RETIRE), who still uses it: as JSON, or a section on top of the page; with
        ``tenants`` ("" for all, else one tenant), the traffic by tenant as the file report's
        ``--by-tenant [--tenant T]`` draws it (``json``, ``markdown``, ``table``), or a
        section on top of the page."""
        if tenants is not None:
            return self.render_tenants(form, tenants)
        scan = self.retire_scans.get(retire) if retire is not None else None
        if scan is not None and form == "json":  # the scan alone: no report to build
            with self._lock:
                return orjson.dumps(scan.to_json()).decode()
        report = self.report()
        page = (
            render_json(report) if form == "json" else render_html(report, refresh_s=self.refresh_s)
        )
        if scan is None or form == "json":
            return page
        with self._lock:
            return with_retire_section(page, scan)

    def render_tenants(self, form: str, tenant: str) -> str:
        with self._lock:
            view = self.tenants.only_view(tenant) if tenant else self.tenants
            if form in TENANT_FORMS:
                return TENANT_FORMS[form](view)
            section = render_tenants_html(view)
        return with_section(render_html(self.report(), refresh_s=self.refresh_s), section)


def open_live_report(
    records: Sequence[str],
    redis_url: str,
    stream_key: str,
    refresh_s: float,
    retire: Sequence[str] = (),
) -> tuple[LiveReport, Any, list[LiveReport]]:
    """The live report, fed by the records stream in Redis when records go there (every
    replica's: its follower, to start and close with the app, is returned second), else as one
    more sink of this process's records (returned third, for the recorder)."""
    if "redis" in records:
        from server.report.redis import StreamTail  # imports redis: only with Redis records

        live = LiveReport(refresh_s=refresh_s, source="Redis stream", retire=retire)
        return live, StreamTail(redis_url, stream_key, live.write), []
    live = LiveReport(refresh_s=refresh_s, retire=retire)
    return live, None, [live]
