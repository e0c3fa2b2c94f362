"""server.records.sinks: the rotating JSON Lines file, stdout, and building the sinks from settings.

No sockets. Failures are real where the filesystem can make them (a path below a regular file,
``/dev/full`` for a full disk) and scripted otherwise (a sink whose ``write`` raises).
"""

import gzip
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from server.records.recorder import Recorder
from server.records.sinks import SinkOptions, build_sinks
from server.records.sinks.base import SinkBacklogged
from server.records.sinks.file import JsonlFileSink, StdoutSink


def line(number: int, width: int = 24) -> bytes:
    """One record line; every line has the same length, so sizes can be counted in lines."""
    return orjson.dumps({"n": number, "pad": "x" * (width - len(str(number)))}) + b"\n"


def numbers(data: bytes) -> list[int]:
    return [json.loads(text)["n"] for text in data.decode().splitlines()]


# -- JsonlFileSink ------------------------------------------------------------------------------


def test_file_sink_appends_lines_and_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=3, compress=False)
    sink.write([line(1), line(2)])
    sink.write([line(3)])
    # Flushed per batch: readable while the sink is open.
    assert numbers(path.read_bytes()) == [1, 2, 3]
    sink.close()
    sink.close()  # idempotent
    assert numbers(path.read_bytes()) == [1, 2, 3]


def test_file_sink_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(line(0))
    sink = JsonlFileSink(path, max_bytes=0, backups=1, compress=False)
    sink.write([line(1)])
    sink.close()
    assert numbers(path.read_bytes()) == [0, 1]


def test_max_bytes_zero_never_rotates(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=2, compress=True)
    for number in range(300):
        sink.write([line(number)])
    sink.close()
    assert [p.name for p in tmp_path.iterdir()] == ["records.jsonl"]
    assert numbers(path.read_bytes()) == list(range(300))


def _rotated_names(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.parametrize("compress", [True, False])
def test_rotation_by_size_keeps_the_configured_backups(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    per_file = 4
    sink = JsonlFileSink(path, max_bytes=size * per_file, backups=2, compress=compress)
    total = 30
    for number in range(total):
        sink.write([line(number)])
        # Never past the cap (a single line is smaller than the cap).
        assert path.stat().st_size <= size * per_file
    sink.close()
    suffix = ".gz" if compress else ""
    assert _rotated_names(path) == [
        "records.jsonl",
        f"records.jsonl.1{suffix}",
        f"records.jsonl.2{suffix}",
    ]

    def read(name: str) -> bytes:
        target = tmp_path / name
        if compress:
            with gzip.open(target, "rb") as handle:  # a real gzip file
                return handle.read()
        return target.read_bytes()

    oldest = numbers(read(f"records.jsonl.2{suffix}"))
    older = numbers(read(f"records.jsonl.1{suffix}"))
    current = numbers(path.read_bytes())
    # Oldest to newest, contiguous, every file full but the current one, nothing duplicated.
    assert oldest + older + current == list(range(total - len(current) - 2 * per_file, total))
    assert len(oldest) == len(older) == per_file
    assert 1 <= len(current) <= per_file


def test_rotated_files_are_compressed_at_the_fastest_level(tmp_path: Path) -> None:
    # Rotation compresses in the record writer, on the server's CPU: zlib's level 1, which
    # gzip marks in its header (XFL 4, "fastest").
    path = tmp_path / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=2 * len(line(0)), backups=1, compress=True)
    sink.write([line(0), line(1)])
    sink.write([line(2)])  # past the cap: rotates first
    sink.close()
    rotated = (tmp_path / "records.jsonl.1.gz").read_bytes()
    assert rotated[8] == 4
    assert numbers(gzip.decompress(rotated)) == [0, 1]
    assert numbers(path.read_bytes()) == [2]


def test_rotation_with_no_backups_just_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    sink = JsonlFileSink(path, max_bytes=size * 3, backups=0, compress=True)
    for number in range(10):
        sink.write([line(number)])
    sink.close()
    assert _rotated_names(path) == ["records.jsonl"]
    assert numbers(path.read_bytes()) == [9]


def read_file(target: Path) -> bytes:
    if target.name.endswith(".gz"):
        with gzip.open(target, "rb") as handle:
            return handle.read()
    return target.read_bytes()


def history(path: Path, backups: int, compress: bool) -> list[list[int]]:
    """The numbers in each file, oldest backup first, the live file last (missing ones: [])."""
    suffix = ".gz" if compress else ""
    found = []
    for number in range(backups, 0, -1):
        target = path.with_name(f"{path.name}.{number}{suffix}")
        found.append(numbers(read_file(target)) if target.exists() else [])
    found.append(numbers(path.read_bytes()) if path.exists() else [])
    return found


@pytest.mark.parametrize("compress", [True, False])
def test_a_batch_past_the_cap_is_split_where_the_files_end(tmp_path: Path, compress: bool) -> None:
    # Rotation is decided per line, not per batch: a big batch fills the current file up to the
    # cap first, so no backup is spent on a file that was nearly empty.
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    sink = JsonlFileSink(path, max_bytes=size * 4, backups=3, compress=compress)
    sink.write([line(0)])
    sink.write([line(n) for n in range(1, 11)])
    sink.close()
    assert history(path, 3, compress) == [[], [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]


def test_a_huge_line_costs_one_rotation(tmp_path: Path) -> None:
    # A line larger than half the cap would fill a file of its own: it joins the current file,
    # which rotates right after; the backups before it stay.
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    sink = JsonlFileSink(path, max_bytes=size * 4, backups=3, compress=False)
    for batch in ([0, 1, 2, 3], [4, 5, 6, 7], [8]):
        sink.write([line(n) for n in batch])
    huge = line(9, width=size * 10)
    sink.write([huge])
    sink.write([line(10)])
    sink.close()
    assert history(path, 3, compress=False) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [10]]
    # The huge line alone, in a batch of its own and in the middle of one: one rotation each.
    sink = JsonlFileSink(path, max_bytes=size * 4, backups=3, compress=False)
    sink.write([line(11), huge.replace(b'"n":9', b'"n":12'), line(13)])
    sink.close()
    assert history(path, 3, compress=False) == [[4, 5, 6, 7], [8, 9], [10, 11, 12], [13]]


def test_every_rotated_file_holds_more_than_half_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    cap = 1000
    sink = JsonlFileSink(path, max_bytes=cap, backups=1000, compress=False)
    written: list[Any] = []
    # Lines of every size from tiny to several times the cap, in batches of every size.
    sizes = [30, 700, 20, 499, 501, 2500, 60, 60, 60, 900, 10, 5000, 333, 333, 333, 334, 1]
    number = 0
    for batch_size in (1, 3, 2, 5, 1, 4, 1):
        batch = []
        for _ in range(batch_size):
            batch.append(line(number, width=sizes[number % len(sizes)]))
            number += 1
        written.extend(range(number - batch_size, number))
        sink.write(batch)
    sink.close()
    files = sorted(tmp_path.glob("records.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    contents = [numbers(p.read_bytes()) for p in files] + [numbers(path.read_bytes())]
    assert [n for content in contents for n in content] == written  # nothing lost or repeated
    for rotated in files:
        data = rotated.read_bytes()
        assert len(data) > cap // 2
        # Past the cap only by one line larger than half of it, the file's last.
        if len(data) > cap:
            last = data.splitlines(keepends=True)[-1]
            assert len(last) > cap // 2
            assert len(data) - len(last) <= cap


def test_rotation_counts_what_the_file_held_before_it_was_opened(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    path.write_bytes(line(100) + line(101) + line(102))
    sink = JsonlFileSink(path, max_bytes=size * 4, backups=1, compress=True)
    sink.write([line(1)])  # 4 lines: at the cap, not past it
    sink.write([line(2)])  # would pass it: rotate first
    sink.close()
    with gzip.open(tmp_path / "records.jsonl.1.gz", "rb") as handle:
        assert numbers(handle.read()) == [100, 101, 102, 1]
    assert numbers(path.read_bytes()) == [2]


def test_a_new_process_rotates_into_the_existing_backups(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    size = len(line(0))
    for run in range(3):
        sink = JsonlFileSink(path, max_bytes=size * 2, backups=5, compress=True)
        sink.write([line(run * 10)])
        sink.write([line(run * 10 + 1)])
        sink.write([line(run * 10 + 2)])
        sink.close()
    contents = []
    for number in (5, 4, 3, 2, 1):
        target = tmp_path / f"records.jsonl.{number}.gz"
        if target.exists():
            with gzip.open(target, "rb") as handle:
                contents += numbers(handle.read())
    contents += numbers(path.read_bytes())
    assert contents == [0, 1, 2, 10, 11, 12, 20, 21, 22]


def test_the_file_sink_reopens_after_a_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file")
    path = blocker / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=1, compress=False)
    with pytest.raises(OSError):  # noqa: PT011 - NotADirectoryError or FileExistsError
        sink.write([line(1)])
    sink.close()
    blocker.unlink()
    sink.write([line(2)])
    sink.close()
    assert numbers(path.read_bytes()) == [2]


def test_the_file_sink_reopens_after_its_descriptor_broke(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=1, compress=False, retry_s=0)
    sink.write([line(1)])
    assert sink._fd is not None
    os.close(sink._fd)  # e.g. closed under it
    with pytest.raises(SinkBacklogged, match="Bad file descriptor"):
        sink.write([line(2)])
    assert sink.backlog == 1
    sink.write([line(3)])  # opens again, the kept line first
    sink.close()
    assert numbers(path.read_bytes()) == [1, 2, 3]
    assert (sink.backlog, sink.shed) == (0, 0)


# -- StdoutSink ---------------------------------------------------------------------------------


def test_stdout_sink_writes_the_lines_as_they_are(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    sink = StdoutSink()
    sink.write([line(1), line(2)])
    sink.close()
    assert capsysbinary.readouterr().out == line(1) + line(2)
    assert sink.name == "stdout"


# -- build_sinks --------------------------------------------------------------------------------


def build(names: list[str], tmp_path: Path) -> list[Any]:
    return build_sinks(
        SinkOptions(
            names=names, path=str(tmp_path / "r.jsonl"), max_bytes=1000, backups=3, compress=False
        )
    )


def test_build_sinks_makes_what_is_named(tmp_path: Path) -> None:
    assert build([], tmp_path) == []
    assert build(["none"], tmp_path) == []
    (file_sink,) = build(["file"], tmp_path)
    assert isinstance(file_sink, JsonlFileSink)
    assert (file_sink.path, file_sink.max_bytes, file_sink.backups, file_sink.compress) == (
        tmp_path / "r.jsonl",
        1000,
        3,
        False,
    )
    both = build(["file", "stdout"], tmp_path)
    assert [type(sink) for sink in both] == [JsonlFileSink, StdoutSink]
    assert [sink.name for sink in build(["stdout", "none", "file"], tmp_path)] == [
        "stdout",
        "file",
    ]
    assert not (tmp_path / "r.jsonl").exists()  # nothing is opened before the first write


@pytest.mark.parametrize("name", ["bogus", "File", "files", "syslog", ""])
def test_build_sinks_refuses_unknown_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="unknown record sink"):
        build(["file", name], tmp_path)


def test_build_sinks_refuses_or_merges_a_repeated_sink(tmp_path: Path) -> None:
    try:
        sinks = build(["file", "file"], tmp_path)
    except ValueError:
        return
    recorder = Recorder(sinks, capacity=10)
    recorder.record({"n": 1})
    recorder.close()
    assert numbers((tmp_path / "r.jsonl").read_bytes()) == [1]
