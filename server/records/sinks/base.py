"""What a record sink is: the interface every sink implements, how one says it kept lines to
write later, and the bounded backlog such a sink keeps them in.

Each sink takes batches of newline-terminated lines and raises ``OSError`` (or ``ValueError``)
when it cannot write them; a sink that keeps what it could not write says so with
:class:`SinkBacklogged` and keeps it in a :class:`Backlog`. Who calls them, off the request
path, is :class:`server.records.recorder.Recorder`; the flavours are in this folder.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import Protocol

log = logging.getLogger(__name__)

# What a backlogging sink keeps at most while it cannot write: about a few minutes of a busy
# replica's records, in memory the process can spare.
BACKLOG_LINES = 100_000
BACKLOG_BYTES = 128 << 20


class Sink(Protocol):
    name: str

    def write(self, lines: list[bytes]) -> None:
        """Write newline-terminated JSON lines; raise OSError (or ValueError) on failure."""

    def close(self) -> None: ...


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
