"""Where request records are written: the sinks, and the one way to build them from settings.

A JSON Lines file with size-based rotation (rotated files optionally gzipped), stdout (for container
log collectors), a Redis stream (:mod:`server.records.sinks.redis`, imported only when named, so the
``redis`` package stays optional), or nothing. Each sink takes batches of newline-terminated lines
and raises ``OSError`` (or ``ValueError``) when it cannot write them; a sink that keeps what it
could not write says so with :class:`SinkBacklogged`. Who calls them, off the request path, is
:class:`server.records.recorder.Recorder`.
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path
from typing import Any, Protocol


class Sink(Protocol):
    name: str

    def write(self, lines: list[bytes]) -> None:
        """Write newline-terminated JSON lines; raise OSError (or ValueError) on failure."""

    def close(self) -> None: ...


class SinkBacklogged(OSError):
    """Raised by a sink that could not write now but kept the lines to write later.

    From ``write``: the batch joined the sink's backlog. From ``open`` (the readiness probe, which
    for such a sink delivers the backlog): some of the backlog is still there. The
    :class:`~server.records.recorder.Recorder` marks the sink failing, as for any failure, but
    counts nothing as ``failed`` and does not reset (close) the sink, whose backlog must survive.

    A sink that raises it keeps two numbers the Recorder reads after every call: ``backlog``,
    the lines it holds, and ``shed``, the lines it ever gave up on (its backlog was full, or
    they were still undelivered at ``close``). Lines leave the backlog oldest first, within a
    call delivered ones before shed ones; a ``write`` or ``open`` that returns normally has
    delivered the whole backlog.
    """


class StdoutSink:
    name = "stdout"

    def write(self, lines: list[bytes]) -> None:
        sys.stdout.buffer.write(b"".join(lines))
        sys.stdout.buffer.flush()

    def close(self) -> None:
        sys.stdout.buffer.flush()


# Rotation compresses in the record writer, which shares a CPU with the event loop: zlib's
# fastest level. Measured on 64 MB of varied request records, per record rotated: level 1 takes
# 1.9 us and writes a file 12 times smaller; 6 takes 4.2 us (15 times), 9 (gzip.open's
# default) 12 us (17 times), more than the rest of the writer's work for the record.
ROTATED_COMPRESSLEVEL = 1


class JsonlFileSink:
    """Appends to ``path``; past ``max_bytes`` it rotates to ``path.1`` (``.1.gz``) ... ``.N``."""

    name = "file"

    def __init__(self, path: str | Path, *, max_bytes: int, backups: int, compress: bool) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.compress = compress
        self._file: Any = None
        self._size = 0

    def open(self) -> None:
        """Open (create) the file now if it is not open yet; OSError if it cannot be."""
        if self._file is None:
            self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across batches
        self._size = self._file.tell()

    def write(self, lines: list[bytes]) -> None:
        if self._file is None:
            self._open()
        data = b"".join(lines)
        if self.max_bytes and self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def _rotate(self) -> None:
        file, self._file = self._file, None
        file.close()
        suffix = ".gz" if self.compress else ""
        for number in range(self.backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{number}{suffix}")
            if number == self.backups:
                older.unlink(missing_ok=True)
            elif older.exists():
                older.rename(self.path.with_name(f"{self.path.name}.{number + 1}{suffix}"))
        if self.backups:
            first = self.path.with_name(f"{self.path.name}.1{suffix}")
            if self.compress:
                with (
                    open(self.path, "rb") as source,
                    gzip.open(first, "wb", compresslevel=ROTATED_COMPRESSLEVEL) as target,
                ):
                    shutil.copyfileobj(source, target)
                self.path.unlink()
            else:
                self.path.rename(first)
        else:
            self.path.unlink(missing_ok=True)
        self._open()

    def close(self) -> None:
        # Forget the file first: if closing fails (a full disk fails the flush), the next
        # write must reopen, not write to a closed file forever.
        file, self._file = self._file, None
        if file is not None:
            file.close()


def build_sinks(
    names: list[str],
    *,
    path: str,
    max_bytes: int,
    backups: int,
    compress: bool,
    redis_url: str = "",
    redis_key: str = "mcp:records",
    redis_maxlen: int = 1_000_000,
    redis_timeout_s: float = 2.0,
) -> list[Sink]:
    if len(set(names)) != len(names):
        raise ValueError(f"MCP_RECORDS names a sink twice: {','.join(names)}")
    sinks: list[Sink] = []
    for name in names:
        if name == "file":
            sinks.append(
                JsonlFileSink(path, max_bytes=max_bytes, backups=backups, compress=compress)
            )
        elif name == "stdout":
            sinks.append(StdoutSink())
        elif name == "redis":
            sinks.append(_redis_sink(redis_url, redis_key, redis_maxlen, redis_timeout_s))
        elif name != "none":
            raise ValueError(f"unknown record sink {name!r}: use file, stdout, redis or none")
    return sinks


def _redis_sink(url: str, key: str, maxlen: int, timeout_s: float) -> Sink:
    if not url:
        raise ValueError("MCP_RECORDS=redis needs MCP_REDIS_URL (redis://host:port/db)")
    try:
        from server.records.sinks.redis import RedisStreamSink
    except ImportError as missing:
        raise ValueError(
            "MCP_RECORDS=redis needs the redis package: pip install 'mcp-http-server[redis]'"
        ) from missing
    return RedisStreamSink(url, key=key, maxlen=maxlen, timeout_s=timeout_s)
