"""What a record sink is: the interface every sink implements (:class:`Sink`, and
:class:`BackloggingSink` for one that keeps what it could not write), and the shared half of
such a sink: its bounded :class:`Backlog` and its retry interval (:class:`RetryingSink`).

Each sink takes batches of newline-terminated lines and raises ``OSError`` (or ``ValueError``)
when it cannot write them; a sink that keeps what it could not write says so with
:class:`SinkBacklogged`. Who calls them, off the request path, is
:class:`server.records.recorder.Recorder`; the flavours are in this folder.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

# What a backlogging sink keeps at most while it cannot write: about a few minutes of a busy
# replica's records, in memory the process can spare.
BACKLOG_LINES = 100_000
BACKLOG_BYTES = 128 << 20
DELIVER_LINES = 1000  # backlog lines per write when catching up
# After a failure, batches join the backlog without a try for this long: a destination that
# fails (a full disk, a Redis that times out) costs a failing try per interval, not per batch.
RETRY_S = 0.5


class Sink(Protocol):
    name: str

    def write(self, lines: list[bytes]) -> None:
        """Write newline-terminated JSON lines; raise OSError (or ValueError) on failure."""

    def close(self) -> None: ...


@runtime_checkable
class BackloggingSink(Sink, Protocol):
    """A sink that keeps what it could not write, raising :class:`SinkBacklogged`; the
    :class:`~server.records.recorder.Recorder` reads ``backlog`` and ``shed`` after every call
    to it, and calls ``open`` as its readiness probe."""

    @property
    def backlog(self) -> int:
        """Lines kept, waiting to be written."""

    @property
    def shed(self) -> int:
        """Lines given up on, ever (the backlog was full, or undelivered at close)."""

    def open(self) -> None:
        """Deliver the backlog, or check the destination takes lines; ``OSError``
        (:class:`SinkBacklogged` while lines are kept) if not."""


class SinkBacklogged(OSError):
    """Raised by a sink that could not write now but kept the lines to write later.

    From ``write``: the batch joined the sink's backlog. From ``open`` (the readiness probe,
    which for such a sink delivers the backlog): some of the backlog is still there. The
    :class:`~server.records.recorder.Recorder` marks the sink failing, as for any failure, but
    counts nothing as ``failed`` and does not reset (close) the sink, whose backlog must
    survive.

    A sink that raises it keeps two numbers the Recorder reads after every call: ``backlog``,
    the lines it holds, and ``shed``, the lines it ever gave up on (its backlog was full, or
    they were still undelivered at ``close``). Lines leave the backlog oldest first, within a
    call delivered ones before shed ones; a ``write`` or ``open`` that returns normally has
    delivered the whole backlog.
    """


class Backlog:
    """Lines a sink could not write yet, oldest first, bounded in count and bytes: past either
    bound the oldest are shed (counted in ``shed``, logged once per streak)."""

    def __init__(self, where: str, *, max_lines: int, max_bytes: int) -> None:
        self.where = where  # for the log: "the Redis stream", "the records file"
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._lines: deque[bytes] = deque()
        self.size = 0  # bytes held
        self.shed = 0  # lines given up on, ever
        self._shedding = False

    def __len__(self) -> int:
        return len(self._lines)

    def keep(self, lines: list[bytes]) -> None:
        self._lines.extend(lines)
        self.size += sum(len(line) for line in lines)
        while len(self._lines) > self.max_lines or self.size > self.max_bytes:
            self.size -= len(self._lines.popleft())
            self.shed += 1
            if not self._shedding:
                self._shedding = True
                log.error(
                    "request records: the backlog for %s is full (%d lines); dropping the oldest",
                    self.where,
                    len(self._lines),
                )

    def oldest(self, count: int) -> list[bytes]:
        """Up to ``count`` of the oldest lines, left in place until :meth:`delivered`."""
        return list(itertools.islice(self._lines, count))

    def delivered(self, count: int) -> None:
        """The ``count`` oldest lines were written: forget them."""
        for _ in range(count):
            self.size -= len(self._lines.popleft())
        if not self._lines:
            self._shedding = False

    def give_up(self) -> int:
        """Shed everything (the sink is closing); how many lines that was."""
        lost = len(self._lines)
        self.shed += lost
        self._lines.clear()
        self.size = 0
        return lost


class RetryingSink:
    """The shared half of a :class:`BackloggingSink`: what fails joins a :class:`Backlog`, which
    the next write (or ``open``, the Recorder's probe) delivers first, oldest first, at most one
    failing try per ``retry_s``; ``close`` tries once more and counts what it gives up.

    A sink names what it does with lines (``verb``: "write", "add") and implements ``_send``
    (deliver lines: how many went, and whether all did, the fault noted by :meth:`_fault`),
    ``_reach`` (check the destination while nothing is kept), ``_release`` and ``_lost_to``.
    """

    name: str
    verb: str

    def __init__(
        self, where: str, *, backlog_lines: int, backlog_bytes: int, retry_s: float
    ) -> None:
        self.retry_s = retry_s
        self._backlog = Backlog(where, max_lines=backlog_lines, max_bytes=backlog_bytes)
        self._error = ""
        self._retry_at = 0.0

    @property
    def backlog(self) -> int:
        """Lines kept, waiting to be written."""
        return len(self._backlog)

    @property
    def shed(self) -> int:
        """Lines given up on, ever (backlog full, or undelivered at close)."""
        return self._backlog.shed

    def open(self) -> None:
        """Deliver the backlog, or check the destination; OSError (SinkBacklogged while lines
        are kept) if it cannot be."""
        if self._backlog:
            if not self._deliver():
                raise self._backlogged()
            return
        self._reach()

    def write(self, lines: list[bytes]) -> None:
        lines = self._entries(lines)
        if self._deliver():
            sent, whole = self._send(lines)
            if whole:
                return
            lines = lines[sent:]
        self._backlog.keep(lines)
        raise self._backlogged()

    def close(self) -> None:
        self._retry_at = 0.0  # one last try, whatever the retry interval says
        if not self._deliver():
            lost = self._backlog.give_up()
            log.error(
                "request records: %d records could not be %s (%s)",
                lost,
                self._lost_to(),
                self._error,
            )
        self._release()

    def _deliver(self) -> bool:
        """The backlog to the destination, oldest first; True once it is empty."""
        backlog = self._backlog
        while backlog:
            if time.monotonic() < self._retry_at:
                return False
            chunk = backlog.oldest(DELIVER_LINES)
            sent, whole = self._send(chunk)
            backlog.delivered(sent)
            if not whole:
                return False
        return True

    def _fault(self, failure: BaseException) -> None:
        self._error = str(failure) or type(failure).__name__
        self._retry_at = time.monotonic() + self.retry_s

    def _backlogged(self) -> SinkBacklogged:
        return SinkBacklogged(
            f"{self._why()}; {len(self._backlog)} records kept to {self.verb} later"
        )

    # -- what each sink says ---------------------------------------------------------------

    def _entries(self, lines: list[bytes]) -> list[bytes]:
        """What the backlog keeps of a batch (the lines themselves, unless the sink says)."""
        return lines

    def _send(self, lines: list[bytes]) -> tuple[int, bool]:
        raise NotImplementedError

    def _reach(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def _lost_to(self) -> str:
        raise NotImplementedError

    def _why(self) -> str:
        return self._error
