"""server.records.recorder: the Recorder's bounded queue and writer thread over real and scripted
sinks.

No sockets. Failures are real where the filesystem can make them (a path below a regular file,
``/dev/full`` for a full disk) and scripted otherwise (a sink whose ``write`` raises).
"""

import json
import logging
import platform
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from server.records.privacy import Privacy
from server.records.recorder import Recorder
from server.records.sinks.base import SinkBacklogged
from server.records.sinks.file import JsonlFileSink
from tests.support.polling import wait_until_blocking

ROOT = Path(__file__).resolve().parents[2]


def line(number: int, width: int = 24) -> bytes:
    """One record line; every line has the same length, so sizes can be counted in lines."""
    return orjson.dumps({"n": number, "pad": "x" * (width - len(str(number)))}) + b"\n"


def numbers(data: bytes) -> list[int]:
    return [json.loads(text)["n"] for text in data.decode().splitlines()]


# -- Recorder -----------------------------------------------------------------------------------


class MemorySink:
    """A sink that keeps what it was given; fails while ``failing`` is set; can be held."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self.lines: list[bytes] = []
        self.batches = 0
        self.failing = False
        self.closed = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def write(self, lines: list[bytes]) -> None:
        self.entered.set()
        self.release.wait(10)
        if self.failing:
            raise OSError(28, "No space left on device")
        self.batches += 1
        self.lines.extend(lines)

    def close(self) -> None:
        self.closed += 1

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.lines]


def test_recorder_writes_records_as_json_lines_in_order(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=1, compress=False)
    recorder = Recorder([sink], capacity=10_000, batch=64)
    recorder.start()
    records = [{"n": n, "text": 'é\n"quoted"', "nested": {"list": [n, None]}} for n in range(1000)]
    for record in records:
        recorder.record(record)
    wait_until_blocking(lambda: recorder.written == 1000)
    recorder.close()
    assert [json.loads(text) for text in path.read_text().splitlines()] == records
    assert recorder.status()["written"] == 1000


def test_records_reach_the_file_without_close(tmp_path: Path) -> None:
    """A single record (far below a batch) still reaches the file promptly."""
    path = tmp_path / "records.jsonl"
    recorder = Recorder([JsonlFileSink(path, max_bytes=0, backups=1, compress=False)], capacity=10)
    recorder.start()
    try:
        recorder.record({"n": 1})
        wait_until_blocking(
            lambda: path.exists() and path.read_bytes() == line_of({"n": 1}), limit=1.0
        )
    finally:
        recorder.close()


def test_a_record_waits_in_the_queue_for_at_most_the_flush_interval() -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100, batch=4, flush_s=30.0)
    recorder.start()
    try:
        recorder.record({"n": 0})
        time.sleep(0.5)
        assert sink.lines == []  # a long interval: the single record is still queued
        for number in range(1, 4):  # a full batch does not wait for the interval
            recorder.record({"n": number})
        wait_until_blocking(lambda: len(sink.lines) == 4)
        recorder.record({"n": 4})
    finally:
        recorder.close()  # and close writes what is queued
    assert [record["n"] for record in sink.records()] == list(range(5))

    sink = MemorySink()
    recorder = Recorder([sink], capacity=100, batch=64, flush_s=0.02)
    recorder.start()
    try:
        recorder.record({"n": 0})
        wait_until_blocking(lambda: len(sink.lines) == 1)
    finally:
        recorder.close()


def line_of(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def test_close_writes_everything_still_queued() -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100_000, batch=100)
    recorder.start()
    sink.release.clear()  # hold the writer inside its first write
    recorder.record({"n": 0})
    assert sink.entered.wait(2)
    for number in range(1, 5000):
        recorder.record({"n": number})
    assert recorder.status()["queued"] == 4999
    sink.release.set()
    recorder.close()
    assert [record["n"] for record in sink.records()] == list(range(5000))
    assert recorder.status()["queued"] == 0
    assert recorder.written == 5000
    assert sink.closed == 1


def test_records_from_many_threads_are_all_written_each_in_its_order() -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100_000, batch=16)
    recorder.start()

    def producer(base: int) -> None:
        for number in range(base, base + 3000):
            recorder.record({"n": number})

    threads = [threading.Thread(target=producer, args=(base,)) for base in (0, 10_000, 20_000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.close()
    written = [record["n"] for record in sink.records()]
    assert sorted(written) == [n for base in (0, 10_000, 20_000) for n in range(base, base + 3000)]
    for base in (0, 10_000, 20_000):
        mine = [number for number in written if base <= number < base + 3000]
        assert mine == list(range(base, base + 3000))
    assert recorder.status()["queued"] == 0


def test_close_without_start_still_writes(tmp_path: Path) -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100, batch=7)
    for number in range(20):
        recorder.record({"n": number})
    recorder.close()
    assert [record["n"] for record in sink.records()] == list(range(20))
    assert sink.batches == 3  # 7 + 7 + 6


def test_record_never_blocks_and_drops_past_capacity() -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100, batch=10)
    recorder.start()
    sink.release.clear()  # a sink that hangs (a stuck disk)
    recorder.record({"n": -1})
    assert sink.entered.wait(2)
    started = time.perf_counter()
    for number in range(20_000):
        recorder.record({"n": number})
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0  # handed over, never waited for the sink
    status = recorder.status()
    assert status["queued"] == 100
    assert status["dropped"] == 19_900
    assert recorder.dropped == 19_900
    sink.release.set()
    recorder.close()
    # What was kept is the oldest: the newest records are the ones dropped.
    assert [record["n"] for record in sink.records()] == [-1, *range(100)]
    assert recorder.status()["written"] == 101
    assert recorder.status()["dropped"] == 19_900


def test_a_recorder_without_sinks_takes_records_and_does_nothing() -> None:
    recorder = Recorder([], capacity=1)
    recorder.start()
    for number in range(10):
        recorder.record({"n": number})
    assert recorder.status() == {
        "sinks": [],
        "healthy": True,
        "failing": [],
        "errors": {},
        "written": 0,
        "dropped": 0,
        "failed": 0,
        "queued": 0,
        "backlog": 0,
    }
    recorder.close()


def test_status_reports_every_field() -> None:
    sink = MemorySink("file")
    other = MemorySink("stdout")
    recorder = Recorder([sink, other], capacity=5, batch=2)
    for number in range(7):
        recorder.record({"n": number})
    assert recorder.status() == {
        "sinks": ["file", "stdout"],
        "healthy": True,
        "failing": [],
        "errors": {},
        "written": 0,
        "dropped": 2,
        "failed": 0,
        "queued": 5,
        "backlog": 0,
    }
    other.failing = True
    recorder.close()
    assert recorder.status() == {
        "sinks": ["file", "stdout"],
        "healthy": False,
        "failing": ["stdout"],
        "errors": {"stdout": "[Errno 28] No space left on device"},
        "written": 5,  # at least one sink wrote them
        "dropped": 2,
        "failed": 5,  # (record, sink) pairs lost
        "queued": 0,
        "backlog": 0,
    }
    assert len(sink.lines) == 5
    assert other.lines == []


def test_a_failing_sink_is_counted_logged_once_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server.records")
    sink = MemorySink("file")
    sink.failing = True
    recorder = Recorder([sink], capacity=1000, batch=4)
    for number in range(10):  # three failing batches: 4 + 4 + 2
        recorder.record({"n": number})
    recorder._drain()
    assert recorder.healthy is False
    assert recorder.status()["failing"] == ["file"]
    assert recorder.failed == 10
    assert recorder.written == 0
    assert sink.closed == 3  # reset after every failure, so the next batch reopens
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once per streak, not per batch
    assert "file sink failed" in errors[0].getMessage()
    assert "No space left" in errors[0].getMessage()

    sink.failing = False
    recorder.record({"n": 10})
    recorder._drain()
    assert recorder.healthy is True
    assert recorder.status()["failing"] == []
    assert recorder.written == 1
    assert recorder.failed == 10
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "request records: the file sink works again"
    ]
    # A new streak is logged again.
    sink.failing = True
    recorder.record({"n": 11})
    recorder._drain()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2
    recorder.close()


def test_one_failing_sink_does_not_stop_the_others() -> None:
    good, bad = MemorySink("stdout"), MemorySink("file")
    bad.failing = True
    recorder = Recorder([bad, good], capacity=100)
    recorder.start()
    for number in range(5):
        recorder.record({"n": number})
    recorder.close()
    assert [record["n"] for record in good.records()] == list(range(5))
    assert recorder.written == 5
    assert recorder.failed == 5
    assert recorder.healthy is False


def test_a_file_sink_below_a_regular_file_keeps_its_records_until_the_path_is_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="server.records")
    blocker = tmp_path / "records"
    blocker.write_text("in the way")
    path = blocker / "mcp-requests.jsonl"
    sink = JsonlFileSink(path, max_bytes=0, backups=1, compress=False, retry_s=0.02)
    recorder = Recorder([sink], capacity=1000, batch=1)
    recorder.start()
    try:
        recorder.record({"n": 1})
        wait_until_blocking(lambda: recorder.backlog == 1)
        status = recorder.status()
        assert (status["healthy"], status["failing"]) == (False, ["file"])
        assert (status["written"], status["failed"]) == (0, 0)  # kept, not lost
        assert str(blocker) in status["errors"]["file"]  # why, for /readyz
        assert any("file sink failed" in r.getMessage() for r in caplog.records)
        blocker.unlink()  # the operator fixes the path
        recorder.record({"n": 2})
        wait_until_blocking(lambda: recorder.written == 2)
        assert recorder.healthy is True
        assert (recorder.failed, recorder.backlog) == (0, 0)
        assert recorder.status()["errors"] == {}
    finally:
        recorder.close()
    assert numbers(path.read_bytes()) == [1, 2]


def test_sinks_are_opened_at_start_and_a_bad_path_recovers_without_traffic(
    tmp_path: Path,
) -> None:
    good = tmp_path / "ok" / "records.jsonl"
    recorder = Recorder([JsonlFileSink(good, max_bytes=0, backups=1, compress=False)], capacity=5)
    recorder.start()
    try:
        assert good.exists()  # created before any record
        assert recorder.healthy
    finally:
        recorder.close()

    blocker = tmp_path / "blocked"
    blocker.write_text("in the way")
    path = blocker / "records.jsonl"
    recorder = Recorder([JsonlFileSink(path, max_bytes=0, backups=1, compress=False)], capacity=5)
    recorder.start()
    try:
        # Unhealthy before any traffic, without counting any record as failed.
        assert recorder.status()["healthy"] is False
        assert recorder.status()["failing"] == ["file"]
        assert recorder.failed == 0
        blocker.unlink()
        wait_until_blocking(lambda: recorder.healthy, limit=2.0)
        assert path.exists()
    finally:
        recorder.close()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_a_failure_not_a_crash() -> None:
    sink = JsonlFileSink("/dev/full", max_bytes=0, backups=0, compress=False)
    recorder = Recorder([sink], capacity=100, batch=10)
    for number in range(3):
        recorder.record({"n": number})
    recorder.close()
    assert recorder.failed == 3
    assert recorder.written == 0
    assert recorder.healthy is False


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_the_file_sink_recovers_after_a_full_disk(tmp_path: Path) -> None:
    sink = JsonlFileSink("/dev/full", max_bytes=0, backups=0, compress=False, retry_s=0)
    recorder = Recorder([sink], capacity=100, batch=10)
    recorder.record({"n": 1})
    recorder._drain()
    assert recorder.healthy is False
    assert (recorder.backlog, recorder.failed) == (1, 0)
    # Space is back (modelled by pointing the sink at a writable file): the next batch must
    # reopen the file and write what was kept, then itself.
    sink.path = tmp_path / "records.jsonl"
    recorder.record({"n": 2})
    recorder._drain()
    assert recorder.healthy is True
    recorder.close()
    assert numbers(sink.path.read_bytes()) == [1, 2]
    assert (recorder.written, recorder.failed, recorder.backlog) == (2, 0, 0)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_not_reported_healthy_between_batches() -> None:
    sink = JsonlFileSink("/dev/full", max_bytes=0, backups=0, compress=False)
    recorder = Recorder([sink], capacity=100, batch=10)
    recorder.record({"n": 1})
    recorder._drain()
    assert recorder.healthy is False
    recorder._probe()  # what the writer thread does next while the queue is empty
    try:
        assert recorder.healthy is False
        assert recorder.status()["failing"] == ["file"]
    finally:
        recorder.close()


def test_a_sink_whose_close_fails_does_not_stop_close(caplog: pytest.LogCaptureFixture) -> None:
    class BadClose(MemorySink):
        def close(self) -> None:
            raise OSError("cannot close")

    first, second = BadClose("file"), MemorySink("stdout")
    recorder = Recorder([first, second], capacity=10)
    recorder.record({"n": 1})
    with caplog.at_level(logging.ERROR, logger="server.records"):
        recorder.close()
    assert second.closed == 1
    assert len(first.lines) == len(second.lines) == 1
    assert any("closing the file record sink failed" in r.getMessage() for r in caplog.records)


def test_the_writer_applies_the_privacy_rules_before_writing() -> None:
    sink = MemorySink()
    privacy = Privacy(redact=("password", "apikey"), max_params_bytes=90)
    recorder = Recorder([sink], capacity=10, prepare=privacy.apply)
    raw = {"name": "login", "arguments": {"password": "hunter2", "API-Key": "k"}}
    record = {"kind": "request", "params": raw}
    recorder.record(record)
    recorder.record({"kind": "request", "params": {"text": "z" * 100}})
    recorder.record({"kind": "stream"})  # no params: nothing to do
    recorder.close()
    first, second, third = sink.records()
    assert first["params"] == {
        "name": "login",
        "arguments": {"password": "[redacted]", "API-Key": "[redacted]"},
    }
    assert second["params"] == {"_truncated": True, "bytes": len(orjson.dumps({"text": "z" * 100}))}
    assert third == {"kind": "stream"}
    assert b"hunter2" not in b"".join(sink.lines)


class Handed:
    """A record handed over for the writer to build."""

    def __init__(self, line: bytes | None) -> None:
        self.own_line = line
        self.built = 0

    def build(self) -> dict[str, Any]:
        self.built += 1
        return {"kind": "request", "params": {"password": "hunter2"}}


def test_a_record_with_a_cheaper_line_is_written_as_that_line() -> None:
    sink = MemorySink()
    privacy = Privacy(redact=("password",), max_params_bytes=90)
    asked: list[Handed] = []

    def line(item: Any) -> bytes | None:
        asked.append(item)
        return item.own_line

    recorder = Recorder([sink], capacity=10, prepare=privacy.apply, line=line)
    own, general = Handed(b'{"n":1}\n'), Handed(None)
    recorder.record(own)
    recorder.record(general)
    recorder.record({"kind": "request", "params": {"password": "x"}})  # built already: not asked
    recorder.close()
    # Only the one without a line is built and prepared the general way.
    assert asked == [own, general]
    assert (own.built, general.built) == (0, 1)
    assert sink.lines[0] == b'{"n":1}\n'
    assert sink.records()[1] == {"kind": "request", "params": {"password": "[redacted]"}}
    assert recorder.written == 3


def test_a_record_whose_preparation_fails_is_written_without_params(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def explode(record: dict[str, Any]) -> None:
        raise RuntimeError("broken rule")

    sink = MemorySink()
    recorder = Recorder([sink], capacity=10, prepare=explode)
    recorder.record({"n": 1, "params": {"password": "hunter2"}})
    with caplog.at_level(logging.ERROR, logger="server.records"):
        recorder.close()
    assert sink.records() == [{"n": 1, "params": None}]
    assert any("preparing a request record failed" in r.getMessage() for r in caplog.records)


def test_params_that_are_not_json_are_dropped_not_fatal() -> None:
    sink = MemorySink()
    recorder = Recorder([sink], capacity=10)
    recorder.record({"n": 1, "params": {"odd": {1, 2}}})
    recorder.record({"n": 2, "params": {"fine": True}})
    recorder.close()
    assert sink.records() == [{"n": 1, "params": None}, {"n": 2, "params": {"fine": True}}]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_record_that_cannot_be_serialised_does_not_kill_the_writer() -> None:
    """Client-sent values nested past orjson's limit: the record is kept, the writer lives."""
    sink = MemorySink()
    recorder = Recorder([sink], capacity=100, batch=1)
    recorder.start()
    try:
        recorder.record({"n": 0, "params": nested(300), "client": {"capabilities": nested(300)}})
        recorder.record({"n": 1})
        wait_until_blocking(lambda: [r["n"] for r in sink.records()] == [0, 1], limit=1.0)
        thread = recorder._thread
        assert thread is not None
        assert thread.is_alive()
    finally:
        recorder.close()
    first = sink.records()[0]
    assert first["params"] is None
    assert first["client"] == {"capabilities": {"_unencodable": True}}
    assert recorder.written == 2
    assert recorder.healthy


# -- sinks that keep what they could not write (SinkBacklogged) ---------------------------------


class BacklogSink:
    """A scripted backlogging sink: while ``down`` it keeps lines (up to ``bound``, shedding the
    oldest past it) and raises SinkBacklogged; once up, it delivers the backlog first."""

    name = "redis"

    def __init__(self, bound: int = 1000) -> None:
        self.bound = bound
        self.down = False
        self.kept: list[bytes] = []
        self.lines: list[bytes] = []
        self.shed = 0
        self.resets = 0

    @property
    def backlog(self) -> int:
        return len(self.kept)

    def _deliver(self) -> bool:
        if self.down:
            return False
        self.lines += self.kept
        self.kept = []
        return True

    def write(self, lines: list[bytes]) -> None:
        if self._deliver():
            self.lines += lines
            return
        self.kept += lines
        if len(self.kept) > self.bound:
            self.shed += len(self.kept) - self.bound
            del self.kept[: len(self.kept) - self.bound]
        raise SinkBacklogged(f"down; {len(self.kept)} kept")

    def open(self) -> None:
        if not self._deliver():
            raise SinkBacklogged("still down")

    def close(self) -> None:
        if not self._deliver():
            self.shed += len(self.kept)
            self.kept = []
        self.resets += 1

    def numbers(self) -> list[int]:
        return [json.loads(text)["n"] for text in self.lines]


def feed(recorder: Recorder, numbers: range) -> None:
    for number in numbers:
        recorder.record({"n": number})
    recorder._drain()


def test_backlogged_records_are_neither_failed_nor_written_until_delivered() -> None:
    sink = BacklogSink()
    recorder = Recorder([sink], capacity=1000, batch=4)
    sink.down = True
    feed(recorder, range(10))
    status = recorder.status()
    assert (status["healthy"], status["failing"]) == (False, ["redis"])
    assert (status["written"], status["failed"], status["backlog"]) == (0, 0, 10)
    assert sink.resets == 0  # a backlogging sink is not reset: its backlog must survive

    sink.down = False
    recorder._probe()  # no traffic: the probe delivers the backlog
    status = recorder.status()
    assert (status["healthy"], status["written"], status["failed"], status["backlog"]) == (
        True,
        10,
        0,
        0,
    )
    feed(recorder, range(10, 15))
    recorder.close()
    assert sink.numbers() == list(range(15))
    assert (recorder.written, recorder.failed, recorder.backlog) == (15, 0, 0)


def test_the_next_write_delivers_the_backlog_first() -> None:
    sink = BacklogSink()
    recorder = Recorder([sink], capacity=1000, batch=3)
    sink.down = True
    feed(recorder, range(6))
    sink.down = False
    feed(recorder, range(6, 8))
    assert recorder.healthy
    assert sink.numbers() == list(range(8))
    assert (recorder.written, recorder.failed, recorder.backlog) == (8, 0, 0)


def test_shed_lines_count_as_failed_and_the_rest_as_written() -> None:
    sink = BacklogSink(bound=5)
    recorder = Recorder([sink], capacity=1000, batch=4)
    sink.down = True
    feed(recorder, range(12))  # 12 kept, 7 of them shed: the oldest
    assert (recorder.written, recorder.failed, recorder.backlog) == (0, 7, 5)
    sink.down = False
    recorder._probe()
    assert sink.numbers() == list(range(7, 12))
    assert (recorder.written, recorder.failed, recorder.backlog) == (5, 7, 0)
    recorder.close()


def test_what_close_cannot_deliver_is_failed() -> None:
    sink = BacklogSink()
    recorder = Recorder([sink], capacity=1000, batch=4)
    sink.down = True
    for number in range(6):
        recorder.record({"n": number})
    recorder.close()  # drains into the backlog, then close gives up on it
    assert (recorder.written, recorder.failed, recorder.backlog) == (0, 6, 0)
    assert recorder.healthy is False


def test_records_another_sink_wrote_are_written_once() -> None:
    kept, plain = BacklogSink(), MemorySink("file")
    recorder = Recorder([kept, plain], capacity=1000, batch=4)
    kept.down = True
    feed(recorder, range(8))
    # The file wrote them: written now, and not again when the backlog is delivered.
    assert (recorder.written, recorder.failed, recorder.backlog) == (8, 0, 8)
    plain.failing = True
    feed(recorder, range(8, 12))  # nobody wrote these yet: written when delivered
    assert (recorder.written, recorder.failed, recorder.backlog) == (8, 4, 12)
    kept.down = False
    plain.failing = False
    recorder._probe()
    assert (recorder.written, recorder.failed, recorder.backlog) == (12, 4, 0)
    assert kept.numbers() == list(range(12))
    recorder.close()


# Run in a fresh interpreter: what ran before in this one (pytest's imports) may have raised
# glibc's thresholds already. Prints the writer thread's page faults per batch of 64 records,
# past the first batches (which fault its heap in once).
WRITER_FAULTS = """
import resource, time
from server.records.recorder import Recorder
from server.serving.heap import keep_freed_heap

keep_freed_heap()  # what serving sets for the process as the server starts

class Sink:
    name = "faults"
    faults = []
    def write(self, lines):
        self.faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt)
    def close(self):
        pass

recorder = Recorder([Sink()], capacity=100_000, batch=64)
recorder.start()
for _ in range(60):
    for number in range(64):
        recorder.record({"n": number, "text": "x" * 600})
    while recorder.status()["queued"]:
        time.sleep(0.002)
recorder.close()
steady = Sink.faults[20:]
print((steady[-1] - steady[0]) / len(steady))
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not hasattr(resource, "RUSAGE_THREAD"),
    reason="glibc's malloc, per-thread rusage (Linux)",
)
def test_the_writer_does_not_fault_its_memory_in_again_for_every_batch() -> None:
    # glibc gives a thread's free heap back past its trim threshold; serving raises it for
    # the process, so the writer's batches reuse the same pages (otherwise about one page
    # fault per record).
    done = subprocess.run(
        [sys.executable, "-c", WRITER_FAULTS],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 1
