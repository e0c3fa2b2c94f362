"""The live report: the same report, kept up to date inside the server, for an admin path.

:class:`LiveReport` holds an :class:`~server.report.aggregate.Aggregator` and is fed record
lines as they are written: as one more record sink (the Recorder's writer thread hands it every
batch), or, when records go to a Redis stream, by :class:`~server.report.redis.StreamTail`,
which follows that stream and so sees every replica's records. It covers the records written
since the server started (or, with Redis, since this replica started following). The
aggregator's memory is bounded, with the live report's own, tighter limits
(:data:`~server.report.counters.LIVE_LIMITS`: a few hundred clients, a budget of distinct
values), so it can run as long as the server does and a report stays quick to draw.
Feeding and reading happen on different threads, so both take a lock; a report is built under
it and drawn outside it.

Who may see it is decided by its route, :mod:`server.transport.admin`: a caller on loopback
that did not come through a proxy, or one authenticated with the admin scope.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from server.records.schema import iso_time
from server.report.aggregate import Aggregator
from server.report.counters import LIVE_LIMITS
from server.report.html import render_html
from server.report.json import render_json
from server.report.model import Report

log = logging.getLogger(__name__)


class LiveReport:
    """A record sink (``write``, ``close``) that keeps the report; thread-safe."""

    name = "live"

    def __init__(self, *, refresh_s: float, source: str = "this process") -> None:
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._aggregator = Aggregator(limits=LIVE_LIMITS)
        self._aggregator.files.append(f"(live: {source}, since {iso_time(time.time())})")
        self._failures = 0

    def write(self, lines: Sequence[bytes]) -> None:
        """Count a batch of record lines (newline-terminated or not). Never raises: a report
        that cannot count must not make the records look unwritable."""
        try:
            with self._lock:
                self._aggregator.feed(lines)
        except Exception:
            self._failures += 1
            if self._failures == 1:
                log.exception("the live report could not count a batch of records")

    def close(self) -> None:
        return None

    def report(self) -> Report:
        with self._lock:
            return self._aggregator.report()

    def render(self, form: str) -> str:
        """The report as ``json`` or the live ``html`` page."""
        report = self.report()
        if form == "json":
            return render_json(report)
        return render_html(report, refresh_s=self.refresh_s)


def open_live_report(
    records: Sequence[str], redis_url: str, stream_key: str, refresh_s: float
) -> tuple[LiveReport, Any, list[LiveReport]]:
    """The live report, fed by the records stream in Redis when records go there (every
    replica's: its follower, to start and close with the app, is returned second), else as one
    more sink of this process's records (returned third, for the recorder)."""
    if "redis" in records:
        from server.report.redis import StreamTail  # imports redis: only with Redis records

        live = LiveReport(refresh_s=refresh_s, source="Redis stream")
        return live, StreamTail(redis_url, stream_key, live.write), []
    live = LiveReport(refresh_s=refresh_s)
    return live, None, [live]
