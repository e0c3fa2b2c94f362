"""server.report.sources: record files read as batches of lines (plain, gzipped,
truncated), and the filters.
"""

from __future__ import annotations

import gzip

import pytest

from server.report import sources as report_read
from server.report.sources import request_in_period
from tests.report.test_report import (
    aggregate,
    jsonl,
    request_record,
)


def test_chunk_boundaries_and_overlong_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_read, "CHUNK_BYTES", 7)
    monkeypatch.setattr(report_read, "MAX_LINE_BYTES", 2000)
    overlong = b'{"v": 1, "junk": "' + b"x" * 5000 + b'"}\n'
    data = (
        jsonl(request_record("ping"))
        + overlong
        + jsonl(request_record("tools/list"), request_record("ping"))
    )
    report = aggregate(data)
    assert report.input.malformed == 1
    assert report.input.requests == 3
    assert report.clients[0].methods["ping"].requests == 2
    # The same through gzip, whose output is chunked too.
    assert aggregate(gzip.compress(data)).input == report.input


def test_gzip_is_recognised_by_content_and_members_chain() -> None:
    first = gzip.compress(jsonl(request_record("ping")))
    second = gzip.compress(jsonl(request_record("tools/list"), request_record("tools/list")))
    report = aggregate(first + second, "rotated-without-suffix")
    assert report.input.requests == 3
    assert report.input.errors == []


def test_a_truncated_gzip_keeps_what_it_had() -> None:
    data = gzip.compress(jsonl(*(request_record("ping") for _ in range(200))))
    report = aggregate(data[: len(data) // 2], "cut.jsonl.2.gz")
    assert 0 < report.input.requests < 200
    assert len(report.input.errors) == 1
    assert report.input.errors[0].startswith("cut.jsonl.2.gz: ")


def test_corrupt_gzip_is_noted_not_raised() -> None:
    data = bytearray(gzip.compress(jsonl(*(request_record("ping") for _ in range(50)))))
    data[20:40] = b"\x00" * 20
    report = aggregate(bytes(data), "bad.gz")
    assert report.input.errors
    assert report.input.errors[0].startswith("bad.gz: ")


def test_request_in_period_keeps_a_request_record_written_in_since_until() -> None:
    line = b'{"kind":"request","time":"2026-12-01T10:00:00Z"}'
    assert request_in_period(line, None, None) == {
        "kind": "request",
        "time": "2026-12-01T10:00:00Z",
    }
    assert request_in_period(line, "2026-12-01T10:00:00Z", "2026-12-01T10:00:01Z") is not None
    assert request_in_period(line, "2026-12-01T10:00:01Z", None) is None  # before since
    assert request_in_period(line, None, "2026-12-01T10:00:00Z") is None  # until excludes
    for other in (b"{", b"[1]", b'{"kind":"stream","time":"2026"}', b'{"kind":"request"}'):
        assert request_in_period(other, None, None) is None
