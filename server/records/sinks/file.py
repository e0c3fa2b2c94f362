"""The sinks that need nothing but the standard library: a JSON Lines file with size-based
rotation (rotated files optionally gzipped), and stdout (for container log collectors).

The file sink writes each batch with one ``os.write`` (no Python buffer: what it wrote is the
kernel's, so a killed process loses nothing it wrote) and keeps the file made of whole lines:
a write the disk could only take part of (``ENOSPC``) is cut back to the batch's start, and the
lines not written wait in a bounded :class:`~server.records.sinks.base.Backlog` until the disk
takes them (the sink reports itself failing meanwhile). Before each batch it compares the
path with the file it has open, so a file deleted, moved away (logrotate) or replaced is
noticed and the path reopened, its directory created again if needed.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import os
import shutil
import stat
import sys
from pathlib import Path

from server.records.sinks.base import BACKLOG_BYTES, BACKLOG_LINES, RETRY_S, RetryingSink

log = logging.getLogger(__name__)


class PartlyWritten(OSError):
    """A write that failed after the disk took part of it, and could not be taken back: its
    first ``lines`` lines are in the file whole."""

    lines = 0


class StdoutSink:
    name = "stdout"

    def __init__(self) -> None:
        # The stdout of when it was made: ``python -m server`` then points sys.stdout at
        # stderr, so that nothing but records reaches the real one.
        self._out = sys.stdout.buffer

    def write(self, lines: list[bytes]) -> None:
        self._out.write(b"".join(lines))
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


# Rotation compresses in the record writer, which shares a CPU with the event loop: zlib's
# fastest level, since higher ones cost more than the rest of the writer's work for a record
# (docs/decisions.md#rotation-compression).
ROTATED_COMPRESSLEVEL = 1
OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class JsonlFileSink(RetryingSink):
    """Appends to ``path``; past ``max_bytes`` it rotates to ``path.1`` (``.1.gz``) ... ``.N``.

    Rotation is decided line by line: a line that would take the file past ``max_bytes`` goes
    to a new file, unless it is larger than half of ``max_bytes`` (it would fill a file of its
    own): then it joins the current file, which is rotated right after. So every rotated file
    holds more than half of ``max_bytes``, a huge line costs one rotation (one backup), and no
    file but one holding such a line passes ``max_bytes``.
    """

    name = "file"
    verb = "write"

    def __init__(
        self,
        path: str | Path,
        *,
        max_bytes: int,
        backups: int,
        compress: bool,
        backlog_lines: int = BACKLOG_LINES,
        backlog_bytes: int = BACKLOG_BYTES,
        retry_s: float = RETRY_S,
    ) -> None:
        self.path = Path(path)
        super().__init__(
            f"the records file {self.path}",
            backlog_lines=backlog_lines,
            backlog_bytes=backlog_bytes,
            retry_s=retry_s,
        )
        self.max_bytes = max_bytes
        self.backups = backups
        self.compress = compress
        self._fd: int | None = None
        self._identity = (0, 0)  # (st_dev, st_ino) of the open file
        self._size = 0
        # The file ends inside a line (a crash mid-write, or a cut that failed): the next write
        # starts a new line, so that fragment stays one malformed line, not a corrupt record.
        self._open_line = False

    # -- what RetryingSink asks of it --------------------------------------------------------

    def _send(self, lines: list[bytes]) -> tuple[int, bool]:
        written, failure = self._append(lines)
        return written, failure is None

    def _reach(self) -> None:
        """Open the file (again, if it was removed or replaced)."""
        try:
            self._check()
        except OSError as failure:
            self._fault(failure)
            raise

    def _release(self) -> None:
        self._close_file()

    def _lost_to(self) -> str:
        return f"written to {self.path}"

    # -- internals -----------------------------------------------------------------------------

    def _append(self, lines: list[bytes]) -> tuple[int, OSError | None]:
        """Write ``lines`` whole, rotating where they pass ``max_bytes``: how many were written
        before a failure (the failure noted), and the failure (None: all were)."""
        done = 0
        try:
            self._check()
            limit = self.max_bytes
            data = b"".join(lines)
            if not limit or self._size + len(data) <= limit:
                self._put(lines, data)
                return len(lines), None
            # The batch passes the limit: find where each file ends.
            start, filled, room = 0, 0, limit - self._size
            for index, line in enumerate(lines):
                if filled + len(line) <= room:
                    filled += len(line)
                    continue
                if len(line) > limit // 2:  # joins this file, which then rotates
                    self._put(lines[start : index + 1])
                    start = done = index + 1
                    self._rotate()
                    filled, room = 0, limit
                else:  # starts the next file
                    self._put(lines[start:index])
                    start = done = index
                    self._rotate()
                    filled, room = len(line), limit
            self._put(lines[start:])
            return len(lines), None
        except OSError as failure:
            if isinstance(failure, PartlyWritten):
                done += failure.lines
            self._fault(failure)
            return done, failure

    def _check(self) -> None:
        """Have the file at ``path`` open: open it, or reopen it if the one open was removed,
        moved away or replaced. One stat per batch; it also refreshes the size, which another
        process (logrotate's copytruncate) may have changed."""
        if self._fd is None:
            self._open()
            return
        try:
            found = os.stat(self.path)
        except OSError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != self._identity:
            self._close_file()
            self._open()
            return
        self._size = found.st_size

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, OPEN_FLAGS, 0o666)
        try:
            found = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._identity = (found.st_dev, found.st_ino)
        self._size = found.st_size
        self._open_line = bool(found.st_size) and stat.S_ISREG(found.st_mode) and self._unended()

    def _unended(self) -> bool:
        """Whether the file's last byte is not a newline (unknown: assume it is one)."""
        try:
            with open(self.path, "rb") as reader:
                reader.seek(-1, os.SEEK_END)
                return reader.read(1) != b"\n"
        except OSError:
            return False

    def _put(self, lines: list[bytes], data: bytes | None = None) -> None:
        """One write of whole lines (``data``, if given, is them joined); a write the disk took
        only part of is cut back, and if that fails too, :class:`PartlyWritten` says how many
        lines are in the file whole."""
        if not lines:
            return
        if data is None:
            data = b"".join(lines)
        lead = b"\n" if self._open_line else b""
        if lead:
            data = lead + data
        fd = self._fd
        if fd is None:  # _check opened it; a closed sink is a failure, never a crash
            raise OSError(errno.EBADF, f"{self.path} is not open")
        written = 0
        try:
            written = os.write(fd, data)
            if written < len(data):  # the disk is full, or nearly: the rest fails or fits
                view = memoryview(data)
                while written < len(data):
                    count = os.write(fd, view[written:])
                    if not count:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    written += count
        except OSError as failure:
            if written and not self._cut(fd, written):
                raise self._stranded(failure, lines, written - len(lead)) from failure
            raise
        self._size += len(data)
        self._open_line = False

    def _cut(self, fd: int, written: int) -> bool:
        """Take back the ``written`` bytes of a write that failed, so no line is left half;
        False if that failed too."""
        try:
            end = os.lseek(fd, 0, os.SEEK_CUR)  # O_APPEND: just past what was written
            os.ftruncate(fd, end - written)
        except OSError:
            return False
        return True

    def _stranded(self, failure: OSError, lines: list[bytes], body: int) -> PartlyWritten:
        """What a failed write whose cut failed left: ``body`` bytes of ``lines`` (after the
        newline that began it, if any). The lines in it whole count as written; a fragment
        of the next stays, and the next write starts a new line after it."""
        whole = 0
        for line in lines:
            if len(line) > body:
                break
            body -= len(line)
            whole += 1
        self._open_line = body > 0
        stranded = PartlyWritten(failure.errno, failure.strerror)
        stranded.lines = whole
        return stranded

    def _rotate(self) -> None:
        """The file becomes ``.1`` and each backup moves up one; the new ``.1`` is complete
        before any backup moves, so a rotation that fails (a full disk) loses no backup and is
        simply tried again."""
        suffix = ".gz" if self.compress else ""
        ready = self.path.with_name(f".{self.path.name}.rotating{suffix}")
        if self.backups and self.compress:
            try:
                with (
                    open(self.path, "rb") as source,
                    gzip.open(ready, "wb", compresslevel=ROTATED_COMPRESSLEVEL) as target,
                ):
                    shutil.copyfileobj(source, target)
            except OSError:
                ready.unlink(missing_ok=True)
                raise
        self._close_file()
        if self.backups:
            for number in range(self.backups, 1, -1):
                older = self.path.with_name(f"{self.path.name}.{number - 1}{suffix}")
                if older.exists():  # replaces the one it moves onto (the oldest drops out)
                    older.rename(self.path.with_name(f"{self.path.name}.{number}{suffix}"))
            first = self.path.with_name(f"{self.path.name}.1{suffix}")
            if self.compress:
                ready.rename(first)
                self.path.unlink(missing_ok=True)
            else:
                self.path.rename(first)
        else:
            self.path.unlink(missing_ok=True)
        self._open()

    def _fault(self, failure: BaseException) -> None:
        super()._fault(failure)
        self._close_file()  # the next try opens again: the fd may be what broke

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
