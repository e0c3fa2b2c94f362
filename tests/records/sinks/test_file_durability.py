"""server.records.sinks.file when the file is pulled away or the disk fills: the records file
removed, moved or replaced under a running writer, and writes the disk takes only part of.

No sockets. A full disk is real where this machine lets a test mount a small tmpfs (as root;
skipped otherwise) and scripted otherwise (an ``os`` whose ``write`` takes only so many bytes).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

import server.records.sinks.file as file_module
from server.records.recorder import Recorder
from server.records.sinks.base import SinkBacklogged
from server.records.sinks.file import JsonlFileSink
from tests.support.polling import wait_until_blocking


def line(number: int, width: int = 24) -> bytes:
    """One record line; every line of a width has the same length."""
    return orjson.dumps({"n": number, "pad": "x" * (width - len(str(number)))}) + b"\n"


def numbers(data: bytes) -> list[int]:
    """The record numbers in ``data``, which must be whole lines, every one a record."""
    assert not data or data.endswith(b"\n"), "the file ends inside a line"
    return [json.loads(text)["n"] for text in data.decode().splitlines()]


def numbers_at(path: Path) -> list[int] | None:
    """The numbers in the file at ``path`` ([] if there is none); None while it ends inside a
    line (a reader may see a write the writer thread is making)."""
    data = path.read_bytes() if path.exists() else b""
    return numbers(data) if data.endswith(b"\n") or not data else None


def sink_at(path: Path, **options: Any) -> JsonlFileSink:
    options.setdefault("max_bytes", 0)
    options.setdefault("backups", 2)
    options.setdefault("compress", False)
    options.setdefault("retry_s", 0)
    return JsonlFileSink(path, **options)


# -- the file removed, moved or replaced --------------------------------------------------------


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Recorder, Path]]:
    """A Recorder with its writer thread over a file sink, flushing every 20 ms."""
    path = tmp_path / "records" / "records.jsonl"
    recorder = Recorder([sink_at(path)], capacity=10_000, batch=8, flush_s=0.02)
    recorder.start()
    try:
        yield recorder, path
    finally:
        recorder.close()


def send(recorder: Recorder, numbers: range, width: int = 0) -> None:
    for number in numbers:
        recorder.record({"n": number, "pad": "x" * width})


def test_a_deleted_file_is_made_again_for_every_later_record(
    running: tuple[Recorder, Path],
) -> None:
    recorder, path = running
    send(recorder, range(20))
    wait_until_blocking(lambda: numbers_at(path) == list(range(20)))
    path.unlink()
    send(recorder, range(20, 50))
    wait_until_blocking(lambda: numbers_at(path) == list(range(20, 50)))
    wait_until_blocking(lambda: recorder.written == 50)  # counted once the write returned
    assert recorder.healthy
    assert (recorder.failed, recorder.backlog) == (0, 0)


def test_a_file_moved_away_keeps_what_it_had_and_the_path_gets_the_rest(
    running: tuple[Recorder, Path],
) -> None:
    recorder, path = running
    moved = path.with_name("records.jsonl-20261130")
    send(recorder, range(20))
    wait_until_blocking(lambda: numbers_at(path) == list(range(20)))
    path.rename(moved)  # logrotate's move (no copytruncate)
    send(recorder, range(20, 50))
    wait_until_blocking(lambda: numbers_at(path) == list(range(20, 50)))
    assert numbers_at(moved) == list(range(20))
    # Replaced by a new file (logrotate's "create"): the writer follows the path again.
    path.rename(moved.with_name("records.jsonl-older"))
    path.write_bytes(b"")
    send(recorder, range(50, 60))
    wait_until_blocking(lambda: numbers_at(path) == list(range(50, 60)))
    wait_until_blocking(lambda: recorder.written == 60)
    assert (recorder.failed, recorder.backlog) == (0, 0)


def test_a_deleted_file_is_made_again_without_traffic(running: tuple[Recorder, Path]) -> None:
    recorder, path = running
    send(recorder, range(3))
    wait_until_blocking(lambda: numbers_at(path) == [0, 1, 2])
    shutil.rmtree(path.parent)
    # The idle writer opens its sinks once a second: the folder and the file come back.
    wait_until_blocking(path.exists, limit=5.0)
    assert recorder.healthy


def test_a_directory_in_the_files_place_fails_then_recovers_without_losing_records(
    running: tuple[Recorder, Path],
) -> None:
    recorder, path = running
    send(recorder, range(5))
    wait_until_blocking(lambda: numbers_at(path) == list(range(5)))
    while True:
        path.unlink(missing_ok=True)
        with contextlib.suppress(FileExistsError):  # the writer made the file again
            path.mkdir()
            break
    send(recorder, range(5, 25))
    wait_until_blocking(lambda: recorder.backlog == 20)
    status = recorder.status()
    assert (status["healthy"], status["failing"], status["failed"]) == (False, ["file"], 0)
    assert "Is a directory" in status["errors"]["file"]
    path.rmdir()  # fixed: the kept records are written without any new traffic
    wait_until_blocking(lambda: recorder.healthy)
    assert numbers_at(path) == list(range(5, 25))
    assert (recorder.written, recorder.failed, recorder.backlog) == (25, 0, 0)


def test_a_file_truncated_in_place_is_not_rotated_early(tmp_path: Path) -> None:
    # logrotate's copytruncate empties the file under the writer: the size that decides
    # rotation is the file's, not what the sink wrote.
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    sink = sink_at(path, max_bytes=size * 4)
    sink.write([line(0), line(1), line(2)])
    os.truncate(path, 0)
    sink.write([line(3), line(4), line(5)])
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]
    assert numbers_at(path) == [3, 4, 5]


def test_a_file_that_ends_inside_a_line_gets_the_next_record_on_a_line_of_its_own(
    tmp_path: Path,
) -> None:
    # Left by a crash in the middle of a write (or by another program): the fragment stays one
    # malformed line, the records after it are whole.
    path = tmp_path / "records.jsonl"
    path.write_bytes(line(0) + line(1)[:10])
    sink = sink_at(path)
    sink.write([line(2), line(3)])
    sink.close()
    assert path.read_bytes() == line(0) + line(1)[:10] + b"\n" + line(2) + line(3)


# -- a full disk: scripted -----------------------------------------------------------------------


class FillingOs(ModuleType):
    """``os``, except that ``write`` takes only ``room`` more bytes in all, then fails with
    ENOSPC, and ``ftruncate`` fails while ``truncate_fails``."""

    def __init__(self, room: int) -> None:
        super().__init__("os")
        self.room = room
        self.truncate_fails = False
        self.short_writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if not self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        count = min(len(data), self.room)
        self.room -= count
        if count < len(data):
            self.short_writes += 1
        return os.write(fd, bytes(data[:count]))

    def ftruncate(self, fd: int, length: int) -> None:
        if self.truncate_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.ftruncate(fd, length)


def test_a_write_the_disk_takes_only_part_of_is_cut_back_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(line(0))
    filling = FillingOs(room=size * 5 + size // 2)  # five lines and half of the sixth
    monkeypatch.setattr(file_module, "os", filling)
    path = tmp_path / "records.jsonl"
    sink = sink_at(path)
    sink.write([line(n) for n in range(4)])
    with pytest.raises(SinkBacklogged, match="No space left on device"):
        sink.write([line(n) for n in range(4, 8)])  # lines 4 and half of 5 fit, then ENOSPC
    assert filling.short_writes == 1
    assert numbers_at(path) == [0, 1, 2, 3]  # cut back to the last whole line
    assert (sink.backlog, sink.shed) == (4, 0)
    with pytest.raises(SinkBacklogged):
        sink.write([line(8)])  # still full: kept too, behind the others
    assert numbers_at(path) == [0, 1, 2, 3]
    assert sink.backlog == 5
    filling.room = 10_000  # space again: the kept lines first, in order
    sink.write([line(9)])
    sink.close()
    assert numbers_at(path) == list(range(10))
    assert (sink.backlog, sink.shed) == (0, 0)


def test_a_cut_that_fails_leaves_the_fragment_on_a_line_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(line(0))
    filling = FillingOs(room=size + size // 2)
    filling.truncate_fails = True
    monkeypatch.setattr(file_module, "os", filling)
    path = tmp_path / "records.jsonl"
    sink = sink_at(path)
    with pytest.raises(SinkBacklogged):
        sink.write([line(0), line(1)])
    filling.room = 10_000
    sink.write([line(2)])
    sink.close()
    # The fragment of line 1 could not be taken back: it is one malformed line, and line 1
    # itself is written again, whole, after it.
    assert path.read_bytes() == line(0) + line(1)[: size // 2] + b"\n" + line(1) + line(2)


def test_the_backlog_is_bounded_and_what_close_cannot_write_is_shed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(file_module, "os", FillingOs(room=0))
    sink = sink_at(tmp_path / "records.jsonl", backlog_lines=10)
    recorder = Recorder([sink], capacity=1000, batch=4)
    send(recorder, range(25))
    recorder._drain()
    assert (recorder.written, recorder.failed, recorder.backlog) == (0, 15, 10)
    with caplog.at_level("ERROR", logger="server.records"):
        recorder.close()
    assert (recorder.written, recorder.failed, recorder.backlog) == (0, 25, 0)
    assert any("10 records could not be written" in r.getMessage() for r in caplog.records)


# -- a full disk: a real one ---------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for this test only (needs root and mount; skipped otherwise)."""
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        pytest.skip("needs Linux's mount")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


class WriteSpy(ModuleType):
    """The real ``os``; counts the writes that took only part of what they were given."""

    def __init__(self) -> None:
        super().__init__("os")
        self.short_writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        count = os.write(fd, data)
        if count < len(data):
            self.short_writes += 1
        return count


def test_a_full_filesystem_never_leaves_a_partial_line(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = WriteSpy()
    monkeypatch.setattr(file_module, "os", spy)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 40_000)
    path = small_disk / "records" / "records.jsonl"
    recorder = Recorder([sink_at(path)], capacity=10_000, batch=16)
    # Lines of 700 bytes in batches of 16 (11 KiB, several pages): the last batch that fits
    # in part is taken in part by the filesystem.
    sent = 0
    while recorder.healthy:
        assert sent < 2000, "the filesystem never filled"
        send(recorder, range(sent, sent + 16), width=700)
        sent += 16
        recorder._drain()
    assert spy.short_writes >= 1  # the filesystem did take a batch in part
    written = numbers(path.read_bytes())  # whole lines only
    assert written == list(range(len(written)))
    assert (recorder.written, recorder.failed) == (len(written), 0)
    assert recorder.backlog == sent - len(written)
    assert "No space left on device" in recorder.status()["errors"]["file"]
    filler.unlink()  # space again
    recorder._probe()  # what the idle writer does: the kept lines are written
    assert recorder.healthy
    assert numbers_at(path) == list(range(sent))
    recorder.close()
    assert (recorder.written, recorder.failed, recorder.backlog) == (sent, 0, 0)


def test_a_rotation_the_full_filesystem_refuses_keeps_every_backup(small_disk: Path) -> None:
    path = small_disk / "records.jsonl"
    size = len(line(0, width=700))
    sink = sink_at(path, max_bytes=size * 8, backups=2, compress=True)
    for batch in range(3):  # the live file and two backups, all full
        sink.write([line(batch * 8 + n, width=700) for n in range(8)])
    names = ("records.jsonl.1.gz", "records.jsonl.2.gz")
    backups = {name: (small_disk / name).read_bytes() for name in names}
    filler = small_disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:  # every byte left
            handle.write(b"\0" * 4096)
            handle.flush()
    with pytest.raises(SinkBacklogged):
        sink.write([line(24, width=700)])  # must rotate first: no room for the new .1.gz
    # Nothing moved, nothing lost, no half-written backup.
    assert {name: (small_disk / name).read_bytes() for name in backups} == backups
    assert sorted(p.name for p in small_disk.iterdir()) == [
        "filler",
        "records.jsonl",
        "records.jsonl.1.gz",
        "records.jsonl.2.gz",
    ]
    assert numbers_at(path) == list(range(16, 24))
    filler.unlink()
    sink.write([line(25, width=700)])
    sink.close()
    with gzip.open(small_disk / "records.jsonl.1.gz", "rb") as handle:
        assert numbers(handle.read()) == list(range(16, 24))
    assert (small_disk / "records.jsonl.2.gz").read_bytes() == backups["records.jsonl.1.gz"]
    assert numbers_at(path) == [24, 25]
