"""The request records' way out: a bounded queue in, a writer thread out.

:class:`Recorder` takes records into a bounded queue (full: dropped and counted) and a writer
thread writes them in batches to the :mod:`server.records.sinks`, when a batch is full or every
``flush_s`` (``MCP_RECORDS_FLUSH_MS``: what a SIGKILL can lose). A failing sink never stops the
server: logged once per streak, counted, shown by :attr:`Recorder.healthy` and
:meth:`Recorder.status`, retried with the next batch; a sink that keeps what failed loses
nothing while it fits in memory. While idle the writer reopens its sinks once a second, so a
deleted records file comes back without traffic. ``close`` drains the queue.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from server.records.sinks.base import BackloggingSink, Sink, SinkBacklogged

log = logging.getLogger(__name__)

FLUSH_S = 0.2
PROBE_S = 1.0  # how often an idle writer opens its healthy sinks
REASON_CHARS = 300


class Deferred(Protocol):
    """A record the writer builds itself (the request path only hands it over)."""

    def build(self) -> dict[str, Any]: ...


class Recorder:
    """Bounded queue in, writer thread out; counts what it wrote, dropped and failed."""

    def __init__(
        self,
        sinks: list[Sink],
        *,
        capacity: int,
        batch: int = 64,
        flush_s: float = FLUSH_S,
        prepare: Callable[[dict[str, Any]], None] | None = None,
        line: Callable[[Deferred], bytes | None] | None = None,
        observer: Callable[[dict[str, Any] | Deferred], None] | None = None,
    ) -> None:
        self.sinks = sinks
        # The sinks that keep what they could not write, probed and asked for their backlog
        # (by id: a Protocol's isinstance is too slow for every batch).
        self._keeping = {id(sink): sink for sink in sinks if isinstance(sink, BackloggingSink)}
        # Told of every record handed over, sinks or not (the metrics count requests here).
        self._observer = observer
        # Work a record needs before it is written (privacy rules), done here in the writer
        # thread so the request path only hands the record over.
        self._prepare = prepare
        # A cheaper way from a handed-over record to its prepared line (None: take the general
        # way, build, prepare, encode), e.g. LineWriter.line.
        self._line = line
        self.capacity = capacity
        self.batch = batch
        self.flush_s = flush_s
        self._queue: deque[dict[str, Any] | Deferred] = deque()
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.accepted = 0  # records queued
        self.written = 0  # records at least one sink wrote
        self.dropped = 0  # records refused because the queue was full
        self.failed = 0  # (record, sink) pairs a failing sink could not write
        self.backlog = 0  # lines sinks kept to write later (see SinkBacklogged)
        self.backlogged = 0  # lines that ever joined a sink's backlog
        # Failing sinks, and how: "open" failures clear when the sink opens again; "write"
        # failures (a full disk opens fine) only when a write succeeds. And why: the latest
        # failure's message, for /readyz.
        self._failing: dict[str, str] = {}
        self._reasons: dict[str, str] = {}
        self._probed = 0.0
        # Per sink with a backlog: what it holds, oldest first, as [lines, 1 if another sink
        # wrote those records already (they are in ``written``) else 0]; and how many lines it
        # had shed when last asked.
        self._held: dict[str, deque[list[int]]] = {}
        self._shed: dict[str, int] = {}

    @property
    def healthy(self) -> bool:
        return not self._failing

    def status(self) -> dict[str, Any]:
        # Read from the event loop while the writer thread changes these: copies, no lookups
        # that a recovery in between could fail.
        failing = sorted(self._failing)
        reasons = dict(self._reasons)
        return {
            "sinks": [sink.name for sink in self.sinks],
            "healthy": not failing,
            "failing": failing,
            "errors": {name: reasons.get(name, "") for name in failing},
            "written": self.written,
            "dropped": self.dropped,
            "failed": self.failed,
            "queued": len(self._queue),
            "backlog": self.backlog,
        }

    def start(self) -> None:
        # Open every sink now, so an unwritable path shows in readiness before any traffic.
        self._probe()
        if self.sinks and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="records-writer", daemon=True)
            self._thread.start()

    def record(self, record: dict[str, Any] | Deferred) -> None:
        """Never blocks: the request path hands the record over and moves on."""
        if self._observer is not None:
            self._observer(record)
        if not self.sinks:
            return
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            return
        self._queue.append(record)
        self.accepted += 1
        # Past a batch, until the writer drains, only the first record sets the event (set
        # takes a lock and notifies, on the event loop). Not later: the writer's longer bursts
        # would hold the GIL (docs/decisions.md#records-writer-batch).
        if len(self._queue) >= self.batch and not self._wakeup.is_set():
            self._wakeup.set()

    def close(self, timeout: float = 30.0) -> None:
        """Write everything still queued, then close the sinks."""
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._drain()
        for sink in self.sinks:
            try:
                sink.close()  # a sink with a backlog tries to deliver it one last time
            except OSError:
                log.exception("closing the %s record sink failed", sink.name)
            self._settle(sink)

    def _run(self) -> None:
        # The process's malloc policy (serving.heap, set by serving) keeps the writer's freed
        # batches: a component embedded elsewhere does not change its host's.
        while not self._stopping:
            # Wake on a full batch, or at every interval: no record waits longer.
            self._wakeup.wait(self.flush_s)
            self._wakeup.clear()
            self._drain()
            if self._queue:
                continue
            # Without traffic too: retry a failed sink, so it can recover, and now and then
            # open the healthy ones, so a file removed under them is back.
            if self._failing or time.monotonic() - self._probed >= PROBE_S:
                self._probe()

    def _drain(self) -> None:
        queue, line, general = self._queue, self._line, self._general
        while queue:
            lines: list[bytes] = []
            for _ in range(self.batch):
                try:
                    item = queue.popleft()
                except IndexError:  # emptied (close may drain beside a stuck writer)
                    break
                # The cheaper way to the line first (None: it does not cover this record).
                encoded = None if line is None or isinstance(item, dict) else line(item)
                lines.append(general(item) if encoded is None else encoded)
            if lines:
                self._write(lines)

    def _general(self, item: dict[str, Any] | Deferred) -> bytes:
        """The general way: build the record, prepare it, encode it; whatever the client sent,
        the writer never dies of it."""
        record = item if isinstance(item, dict) else item.build()
        if self._prepare is not None:
            try:
                self._prepare(record)
            except Exception:
                log.exception("preparing a request record failed; writing it without params")
                record["params"] = None
        try:
            return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            pass
        # Client-sent values orjson cannot encode (nesting past its limit): keep the rest.
        record["params"] = None
        client = record.get("client")
        if isinstance(client, dict):
            client["capabilities"] = {"_unencodable": True}
        try:
            return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            log.exception("a request record could not be encoded")
            stub = {key: record.get(key) for key in ("v", "kind", "time", "request_id", "status")}
            stub["unencodable"] = True
            return orjson.dumps(stub, option=orjson.OPT_APPEND_NEWLINE)

    def _probe(self) -> None:
        """Open each sink that can be opened ahead of writing; note failures and recoveries."""
        self._probed = time.monotonic()
        for sink in self._keeping.values():
            try:
                sink.open()
            except (OSError, ValueError) as failure:
                self._failed(sink, failure, "open")
                continue
            finally:
                self._settle(sink)
            if self._failing.get(sink.name) == "open":
                self._recovered(sink)

    def _failed(self, sink: Sink, failure: Exception, how: str) -> None:
        reason = str(failure) or type(failure).__name__
        self._reasons[sink.name] = reason[:REASON_CHARS]
        if sink.name not in self._failing:
            self._failing[sink.name] = how
            log.error("request records: the %s sink failed (%s); still serving", sink.name, failure)

    def _recovered(self, sink: Sink) -> None:
        del self._failing[sink.name]
        self._reasons.pop(sink.name, None)
        log.warning("request records: the %s sink works again", sink.name)

    def _write(self, lines: list[bytes]) -> None:
        wrote = False
        kept: list[Sink] = []
        for sink in self.sinks:
            try:
                sink.write(lines)
            except SinkBacklogged as failure:
                # Kept, not lost; its open() delivers the backlog, so the probe sees it recover.
                kept.append(sink)
                self._failed(sink, failure, "open")
                continue
            except (OSError, ValueError) as failure:
                self.failed += len(lines)  # records this sink could not write
                self._failed(sink, failure, "write")
                self._reset(sink)
                continue
            wrote = True
            if sink.name in self._failing:
                self._recovered(sink)
        if wrote:
            self.written += len(lines)
        for sink in self.sinks:
            self._settle(sink, len(lines) if sink in kept else 0, wrote)

    def _settle(self, sink: Sink, added: int = 0, written: bool = False) -> None:
        """Count what left a backlogging sink's backlog in the call just made, where ``added``
        lines (``written`` by another sink or not) joined it: oldest first, delivered ones
        (now written, if no other sink had) before shed ones (failed)."""
        keeping = self._keeping.get(id(sink))
        if keeping is None:
            return
        backlog = keeping.backlog
        held = self._held.setdefault(sink.name, deque())
        total_shed = keeping.shed
        shed = total_shed - self._shed.get(sink.name, 0)
        self._shed[sink.name] = total_shed
        before = sum(part[0] for part in held)
        delivered = before + added - backlog - shed
        self.written += self._take(held, delivered)
        if added:
            self.backlogged += added
            if held and held[-1][1] == written:
                held[-1][0] += added
            else:
                held.append([added, int(written)])
        self._take(held, shed)
        self.failed += shed
        self.backlog += backlog - before

    @staticmethod
    def _take(held: deque[list[int]], count: int) -> int:
        """Remove ``count`` lines from the front; how many of them no other sink wrote."""
        unwritten = 0
        while count > 0 and held:
            part = held[0]
            taken = min(count, part[0])
            part[0] -= taken
            count -= taken
            if not part[1]:
                unwritten += taken
            if not part[0]:
                held.popleft()
        return unwritten

    @staticmethod
    def _reset(sink: Sink) -> None:
        with contextlib.suppress(OSError, ValueError):
            sink.close()
