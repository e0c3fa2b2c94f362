"""What a record sink is: the interface every sink implements, and how one says it kept lines
to write later.

Each sink takes batches of newline-terminated lines and raises ``OSError`` (or ``ValueError``)
when it cannot write them; a sink that keeps what it could not write says so with
:class:`SinkBacklogged`. Who calls them, off the request path, is
:class:`server.records.recorder.Recorder`; the flavours are in this folder.
"""

from __future__ import annotations

from typing import Protocol


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
