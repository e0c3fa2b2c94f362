"""server.records.sinks.base: the declared sink interface, and the backlog and retry that the
file and Redis sinks share (RetryingSink)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from server.records.recorder import Recorder
from server.records.sinks.base import BackloggingSink, RetryingSink, SinkBacklogged
from server.records.sinks.file import JsonlFileSink, StdoutSink
from server.records.sinks.redis import RedisStreamSink


class Scripted(RetryingSink):
    """A destination that takes lines while ``up`` (``room`` of them per call, if set)."""

    name = "scripted"
    verb = "send"

    def __init__(self, *, retry_s: float = 0.0, backlog_lines: int = 100) -> None:
        super().__init__(
            "the scripted place",
            backlog_lines=backlog_lines,
            backlog_bytes=1 << 20,
            retry_s=retry_s,
        )
        self.up = True
        self.room: int | None = None
        self.taken: list[bytes] = []
        self.tries = 0
        self.released = False

    def _send(self, lines: list[bytes]) -> tuple[int, bool]:
        self.tries += 1
        if not self.up:
            self._fault(OSError("down"))
            return 0, False
        count = len(lines) if self.room is None else min(self.room, len(lines))
        self.taken += lines[:count]
        if count < len(lines):
            self._fault(OSError("full"))
            return count, False
        return count, True

    def _reach(self) -> None:
        if not self.up:
            raise OSError("down")

    def _release(self) -> None:
        self.released = True

    def _lost_to(self) -> str:
        return "sent to the scripted place"


def lines(*numbers: int) -> list[bytes]:
    return [f"{n}\n".encode() for n in numbers]


def test_the_file_and_redis_sinks_declare_a_backlog_and_stdout_does_not(tmp_path: Path) -> None:
    file_sink = JsonlFileSink(tmp_path / "r.jsonl", max_bytes=0, backups=0, compress=False)
    redis_sink = RedisStreamSink("redis://127.0.0.1:1/0", key="k", maxlen=1000, timeout_s=0.1)
    assert isinstance(file_sink, BackloggingSink)
    assert isinstance(redis_sink, BackloggingSink)
    assert not isinstance(StdoutSink(), BackloggingSink)
    redis_sink._release()


def test_what_fails_is_kept_and_delivered_first_oldest_first() -> None:
    sink = Scripted()
    sink.up = False
    with pytest.raises(SinkBacklogged, match="down; 2 records kept to send later"):
        sink.write(lines(1, 2))
    with pytest.raises(SinkBacklogged, match="3 records kept"):
        sink.write(lines(3))
    assert (sink.backlog, sink.taken) == (3, [])
    sink.up = True
    sink.write(lines(4))
    assert (sink.backlog, sink.taken) == (0, lines(1, 2, 3, 4))


def test_a_partial_delivery_keeps_the_rest_in_order() -> None:
    sink = Scripted()
    sink.room = 1
    with pytest.raises(SinkBacklogged, match="full; 2 records kept"):
        sink.write(lines(1, 2, 3))
    sink.room = None
    sink.open()  # the probe delivers what is kept
    assert (sink.backlog, sink.taken) == (0, lines(1, 2, 3))


def test_after_a_failure_nothing_is_tried_until_the_retry_interval_passed() -> None:
    sink = Scripted(retry_s=60)
    sink.up = False
    with pytest.raises(SinkBacklogged):
        sink.write(lines(1))
    sink.up = True
    tries = sink.tries
    with pytest.raises(SinkBacklogged, match="2 records kept"):
        sink.write(lines(2))
    with pytest.raises(SinkBacklogged):
        sink.open()
    assert sink.tries == tries  # kept without a try
    sink.close()  # one last try, whatever the interval says
    assert (sink.taken, sink.shed, sink.released) == (lines(1, 2), 0, True)


def test_a_full_backlog_sheds_the_oldest_and_close_gives_up_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Scripted(backlog_lines=2)
    sink.up = False
    for number in range(5):
        with pytest.raises(SinkBacklogged):
            sink.write(lines(number))
    assert (sink.backlog, sink.shed) == (2, 3)
    with caplog.at_level(logging.ERROR):
        sink.close()
    assert (sink.backlog, sink.shed, sink.released) == (0, 5, True)
    assert any(
        "2 records could not be sent to the scripted place (down)" in r.getMessage()
        for r in caplog.records
    )


def test_the_recorder_probes_and_counts_a_retrying_sink_through_the_interface() -> None:
    sink = Scripted()
    sink.up = False
    recorder = Recorder([sink], capacity=100, batch=10)
    recorder.start()  # the probe: open() fails
    assert recorder.status()["failing"] == ["scripted"]
    for number in range(3):
        recorder.record({"n": number})
    recorder._drain()
    assert (recorder.status()["backlog"], recorder.written) == (3, 0)
    sink.up = True
    recorder._probe()
    assert (recorder.status()["backlog"], recorder.written, recorder.healthy) == (0, 3, True)
    recorder.close()
