"""server.report.redis: ``report redis://...``, request records read back from a real Redis
stream (the session's ``redis_server``; every test has its own stream key).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import server.cli.main as entry
import server.records.sinks
import server.report
from server.report import redis as report_redis
from tests.records.sinks import test_redis as sink_tests
from tests.records.sinks.test_redis import dead_url, sink_for
from tests.report.test_report import MIXED
from tests.support.redis_server import RedisServer

# A stream key of its own and a Redis client, as the sink's tests take them.
key = sink_tests.key
client = sink_tests.client


# -- report redis://... ------------------------------------------------------------------------


def write_lines(url: str, key: str, lines: list[bytes]) -> None:
    sink = sink_for(url, key)
    for start in range(0, len(lines), 4):
        sink.write(lines[start : start + 4])
    sink.close()


def report_json(tmp_path: Path, *arguments: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    assert entry.main(["report", *arguments, "--format", "json", "--output", str(out)]) == 0
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def test_report_of_a_stream_equals_the_report_of_the_same_file(
    redis_server: RedisServer,
    client: Any,
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = MIXED + b"not a record\n"
    write_lines(redis_server.url, key, data.splitlines(keepends=True))
    client.xadd(key, {"other": "field"})  # an entry without r: malformed, like a bad line
    path = tmp_path / "records.jsonl"
    path.write_bytes(data + b"{\n")
    monkeypatch.setattr(report_redis, "BATCH", 3)  # several XRANGE batches

    from_file = report_json(tmp_path, str(path))
    from_stream = report_json(tmp_path, f"{redis_server.url}#{key}")
    assert from_stream["input"].pop("files") == [f"{redis_server.url}#{key}"]
    from_file["input"].pop("files")
    assert from_stream == from_file
    assert from_stream["input"]["requests"] == 11
    assert from_stream["input"]["malformed"] == 2

    # The key can come from --redis-key too, and files and streams mix.
    both = report_json(tmp_path, redis_server.url, str(path), "--redis-key", key)
    assert both["input"]["requests"] == 22


def test_the_stream_is_read_up_to_where_it_ended_when_the_report_started(
    redis_server: RedisServer, key: str
) -> None:
    write_lines(redis_server.url, key, [b'{"n": %d}\n' % n for n in range(10)])
    batches = report_redis.open_stream(redis_server.url, key, batch=4)
    write_lines(redis_server.url, key, [b'{"n": 99}\n'])  # added while the report runs
    assert [len(lines) for lines in batches] == [4, 4, 2]


def test_report_of_an_unreadable_stream_is_a_usage_error(
    redis_server: RedisServer, client: Any, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry.main(["report", f"{redis_server.url}#{key}"]) == 2
    assert f"no stream at key '{key}'" in capsys.readouterr().err
    client.set(key, "a string")
    assert entry.main(["report", f"{redis_server.url}#{key}"]) == 2
    assert "holds a string, not a stream" in capsys.readouterr().err
    assert entry.main(["report", dead_url()]) == 2
    assert "cannot read redis://127.0.0.1:" in capsys.readouterr().err
    assert entry.main(["report", "redis://127.0.0.1:port/0"]) == 2
    assert "cannot read a Redis source" in capsys.readouterr().err


def test_an_empty_stream_is_an_empty_report(
    redis_server: RedisServer, client: Any, key: str, tmp_path: Path
) -> None:
    entry_id = client.xadd(key, {"r": "{}"})
    client.xdel(key, entry_id)
    document = report_json(tmp_path, f"{redis_server.url}#{key}")
    assert (document["input"]["lines"], document["clients"]) == (0, [])


def test_the_report_names_a_stream_without_its_password() -> None:
    url, key, name = report_redis.parse_source(
        "rediss://user:s3cret@cache.internal:6380/2#pre%3Arecords", "mcp:records"
    )
    assert url == "rediss://user:s3cret@cache.internal:6380/2"
    assert key == "pre:records"
    assert name == "rediss://cache.internal:6380/2#pre:records"
    assert report_redis.parse_source("redis://[::1]/0", "k") == (
        "redis://[::1]/0",
        "k",
        "redis://[::1]/0#k",
    )
    assert report_redis.after(b"5-3") == "5-4"
    assert report_redis.after(b"5-%d" % report_redis.MAX_SEQUENCE) == "6-0"


def test_the_report_says_when_the_redis_package_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "server.report.redis")
    monkeypatch.delattr(server.report, "redis")  # else "from server import" finds it there
    assert entry.main(["report", "redis://127.0.0.1:1/0"]) == 2
    assert "needs the redis package" in capsys.readouterr().err
