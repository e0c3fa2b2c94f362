"""server.records.sinks.redis: request records through a real Redis stream (``report redis://``
reads them back: tests/report/test_redis.py).

Uses the session's ``redis_server`` (a real redis-server on a free port); every test has its
own stream key. Tests that stop Redis start it again in a ``finally``. A restarted Redis is
empty (no persistence), so after an outage the stream holds exactly what was kept meanwhile.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

import server.records.sinks
import server.report
from server.records.recorder import Recorder
from server.records.sinks import SinkOptions, build_sinks
from server.records.sinks.redis import RedisStreamSink
from tests.support.deploy_helpers import free_port
from tests.support.polling import wait_until_blocking
from tests.support.redis_server import RedisServer


@pytest.fixture
def key() -> str:
    return f"test:records:{uuid.uuid4().hex}"


@pytest.fixture
def client(redis_server: RedisServer) -> Any:
    connection = redis.Redis.from_url(redis_server.url)
    yield connection
    connection.close()


def sink_for(url: str, key: str, **options: Any) -> RedisStreamSink:
    options.setdefault("maxlen", 1_000_000)
    options.setdefault("timeout_s", 0.5)
    options.setdefault("retry_s", 0.02)
    return RedisStreamSink(url, key=key, **options)


def dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def stream_numbers(client: Any, key: str) -> list[int]:
    return [orjson.loads(fields[b"r"])["n"] for _, fields in client.xrange(key)]


# -- writing -----------------------------------------------------------------------------------


def test_records_land_in_the_stream_in_order(
    redis_server: RedisServer, client: Any, key: str
) -> None:
    recorder = Recorder([sink_for(redis_server.url, key)], capacity=10_000, batch=64)
    recorder.start()
    assert recorder.healthy  # Redis answered the probe at start
    records = [{"n": n, "text": 'é\n"quoted"'} for n in range(1000)]
    for record in records:
        recorder.record(record)
    wait_until_blocking(lambda: recorder.written == 1000)
    recorder.close()
    entries = client.xrange(key)
    assert [orjson.loads(fields[b"r"]) for _, fields in entries] == records
    assert all(list(fields) == [b"r"] for _, fields in entries)  # one field, no newline
    assert all(not fields[b"r"].endswith(b"\n") for _, fields in entries)
    assert recorder.status() | {"sinks": None} == {
        "sinks": None,
        "healthy": True,
        "failing": [],
        "errors": {},
        "written": 1000,
        "dropped": 0,
        "failed": 0,
        "queued": 0,
        "backlog": 0,
    }


def test_maxlen_trims_the_oldest_records(redis_server: RedisServer, client: Any, key: str) -> None:
    sink = sink_for(redis_server.url, key, maxlen=100)
    for start in range(0, 3000, 50):
        sink.write([orjson.dumps({"n": n}) + b"\n" for n in range(start, start + 50)])
    sink.close()
    kept = stream_numbers(client, key)
    # "MAXLEN ~": at least maxlen kept, trimmed in whole nodes, so a little more at most.
    assert 100 <= len(kept) <= 300
    assert kept == list(range(3000 - len(kept), 3000))


def test_redis_away_at_start_shows_in_readiness_and_recovers_without_traffic(
    redis_server: RedisServer, key: str
) -> None:
    recorder = Recorder([sink_for(redis_server.url, key)], capacity=100)
    redis_server.stop()
    try:
        recorder.start()
        status = recorder.status()
        assert (status["healthy"], status["failing"], status["failed"]) == (False, ["redis"], 0)
    finally:
        redis_server.start()
    try:
        wait_until_blocking(lambda: recorder.healthy)
    finally:
        recorder.close()


def test_no_record_is_lost_while_redis_is_away(
    redis_server: RedisServer, client: Any, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder([sink_for(redis_server.url, key)], capacity=10_000, batch=16)
    recorder.start()
    try:
        for number in range(200):
            recorder.record({"n": number})
        wait_until_blocking(lambda: recorder.written == 200)
        redis_server.stop()
        try:
            for number in range(200, 700):
                recorder.record({"n": number})
            wait_until_blocking(lambda: recorder.status()["backlog"] == 500)
            status = recorder.status()
            assert (status["healthy"], status["failing"]) == (False, ["redis"])
            assert (status["written"], status["failed"], status["queued"]) == (200, 0, 0)
            assert any("redis sink failed" in r.getMessage() for r in caplog.records)
        finally:
            redis_server.start()
        # No traffic: the writer's probe delivers the backlog.
        wait_until_blocking(lambda: recorder.healthy and recorder.written == 700)
        for number in range(700, 750):
            recorder.record({"n": number})
    finally:
        recorder.close()
    status = recorder.status()
    assert (status["written"], status["failed"], status["backlog"]) == (750, 0, 0)
    # The restarted Redis is empty: it holds exactly what came during and after the outage.
    assert stream_numbers(client, key) == list(range(200, 750))


def test_the_backlog_is_bounded_and_sheds_the_oldest(
    redis_server: RedisServer, client: Any, key: str
) -> None:
    sink = sink_for(redis_server.url, key, backlog_lines=50)
    recorder = Recorder([sink], capacity=1000, batch=10)
    redis_server.stop()
    try:
        for number in range(120):
            recorder.record({"n": number})
        recorder._drain()
        status = recorder.status()
        assert (status["backlog"], status["failed"], status["written"]) == (50, 70, 0)
        assert sink.shed == 70
    finally:
        redis_server.start()

    def probed_healthy() -> bool:
        recorder._probe()
        return recorder.healthy

    wait_until_blocking(probed_healthy)
    recorder.close()
    assert stream_numbers(client, key) == list(range(70, 120))
    assert (recorder.written, recorder.failed, recorder.backlog) == (50, 70, 0)


def test_the_backlog_is_bounded_in_bytes_too(key: str) -> None:
    sink = sink_for(dead_url(), key, backlog_bytes=1000)
    line = orjson.dumps({"n": 0, "pad": "x" * 84}) + b"\n"
    assert len(line) == 101  # 100 bytes kept: the newline is not
    for _ in range(5):
        with pytest.raises(OSError, match="kept to add later"):
            sink.write([line] * 5)
    assert (sink.backlog, sink.shed) == (10, 15)
    sink.close()


def test_close_counts_what_it_could_not_deliver(key: str, caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder([sink_for(dead_url(), key)], capacity=100, batch=4)
    for number in range(10):
        recorder.record({"n": number})
    started = time.monotonic()
    recorder.close()
    assert time.monotonic() - started < 2  # refused at once, not retried in the client
    assert (recorder.written, recorder.failed, recorder.backlog) == (0, 10, 0)
    assert recorder.healthy is False
    assert any("10 records could not be added" in r.getMessage() for r in caplog.records)


# -- build_sinks -------------------------------------------------------------------------------


def build(names: list[str], tmp_path: Path, **redis: Any) -> list[Any]:
    return build_sinks(
        SinkOptions(
            names=names,
            path=str(tmp_path / "r.jsonl"),
            max_bytes=0,
            backups=1,
            compress=False,
            **redis,
        )
    )


def test_build_sinks_makes_a_redis_sink(tmp_path: Path) -> None:
    file_sink, sink = build(
        ["file", "redis"],
        tmp_path,
        redis_url="redis://127.0.0.1:1/0",
        redis_key="pre:records",
        redis_maxlen=5000,
        redis_timeout_s=0.25,
    )
    assert (file_sink.name, sink.name) == ("file", "redis")
    assert isinstance(sink, RedisStreamSink)
    assert (sink.key, sink.maxlen) == ("pre:records", 5000)
    sink.close()  # nothing was connected: nothing to do


def test_build_sinks_refuses_redis_without_a_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="MCP_RECORDS=redis needs MCP_REDIS_URL"):
        build(["redis"], tmp_path)
    with pytest.raises(ValueError, match="unknown record sink 'Redis': use file, stdout, redis"):
        build(["Redis"], tmp_path, redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="names a sink twice"):
        build(["redis", "redis"], tmp_path, redis_url="redis://127.0.0.1:1/0")


def test_build_sinks_says_when_the_redis_package_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "server.records.sinks.redis")
    monkeypatch.delattr(server.records.sinks, "redis")
    with pytest.raises(ValueError, match=r"needs the redis package: pip install"):
        build(["redis"], tmp_path, redis_url="redis://127.0.0.1:1/0")
    assert build(["file"], tmp_path)  # the other sinks do not need it
