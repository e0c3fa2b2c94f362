"""server.report.build: the views across clients (errors, totals, eras) and the
timeline.
"""

from __future__ import annotations

from typing import Any

from server.report import tally as measures
from tests.report.test_report import (
    LEGACY_ADVERTISED,
    MODERN_ADVERTISED,
    aggregate,
    client,
    jsonl,
    legacy_session_records,
    modern_record,
    request_record,
)
from tests.report.test_views import call


def test_errors_are_named_and_attached_to_their_method() -> None:
    records = [
        call("tools/call", "nope", "error", error=(-32602, "Unknown tool")),
        call("tools/call", "nope", "error", error=(-32602, "Unknown tool")),
        modern_record("initialize", error=(-32601, "Method not found"), status=404),
        request_record(None, verb="GET", status=400, error=(-32600, "session required")),
    ]
    report = aggregate(jsonl(*records))
    rows = [(row.method, row.code, row.name, row.count) for row in report.errors]
    assert rows == [
        ("tools/call", -32602, "Invalid params", 2),
        (None, -32600, "Invalid request", 1),
        ("initialize", -32601, "Method not found", 1),
    ]
    assert client(report, "inspector").errors_by_method == {
        "initialize": {-32601: 1},
        "tools/call": {-32602: 2},
    }
    assert measures.error_name(-32002) == "Resource not found"
    # Every code the server answers with has its name here.
    from server import errors as server_errors

    codes = {v for k, v in vars(server_errors).items() if k.isupper() and isinstance(v, int)}
    assert codes == set(measures.ERROR_NAMES)
    assert measures.error_name(-32050) == "Server error"
    assert measures.error_name(7) == "Application error"


def test_totals_add_up_the_clients() -> None:
    report = aggregate(
        jsonl(
            *legacy_session_records("alpha", "alpha/1", "s1", ["tools/call", "tools/call"], {}),
            modern_record("tools/call"),
            modern_record("tools/list", status=400, error=(-32020, "header")),
        )
    )
    totals = report.totals
    assert totals.requests == sum(c.requests for c in report.clients) == 6
    assert totals.failed == 1
    assert totals.clients == 2
    assert totals.methods["tools/call"].requests == 3
    assert totals.methods["tools/call"].clients == 2
    assert totals.methods["tools/list"].failed == 1
    assert totals.methods["ping"].requests == 0  # advertised, never requested


def test_a_client_is_judged_only_against_the_methods_of_its_eras() -> None:
    both: dict[str, Any] = {"name": "hybrid", "version": "1", "agent": "h/1"}
    records = [
        *legacy_session_records("alpha", "alpha/1", "s1", ["tools/call"], {}),
        modern_record("server/discover", advertised=MODERN_ADVERTISED, name="other"),
        modern_record("tools/call", name="modern-only", version="1", agent="m/1"),
        # One client in both eras, its own list only in the legacy one.
        request_record("initialize", session_id="s7", advertised=LEGACY_ADVERTISED, **both),
        modern_record("tools/list", **both),
    ]
    report = aggregate(jsonl(*records))
    modern_only = client(report, "modern-only")
    assert modern_only.advertised_source == "input"
    assert not {"initialize", "ping", "logging/setLevel"} & set(modern_only.never_requested)
    assert "server/discover" in modern_only.never_requested
    hybrid = client(report, "hybrid")
    assert hybrid.advertised_source == "mixed"
    assert set(hybrid.advertised) == {*LEGACY_ADVERTISED, *MODERN_ADVERTISED}
    alpha = client(report, "alpha")
    assert alpha.advertised_source == "client"
    assert "server/discover" not in alpha.never_requested


def test_the_timeline_counts_requests_and_failures_per_minute_with_gaps() -> None:
    records = [
        modern_record("tools/list", time="2026-11-30T06:00:10.000Z"),
        modern_record(
            "tools/list", time="2026-11-30T06:00:50.000Z", status=400, error=(-32020, "h")
        ),
        modern_record("tools/list", time="2026-11-30T06:03:00.000Z"),
    ]
    timeline = aggregate(jsonl(*records)).timeline
    assert timeline.minutes == 1
    assert timeline.points == [
        ("2026-11-30T06:00", 2, 1),
        ("2026-11-30T06:01", 0, 0),
        ("2026-11-30T06:02", 0, 0),
        ("2026-11-30T06:03", 1, 0),
    ]


def test_a_long_timeline_gets_wider_buckets() -> None:
    records = [
        modern_record("ping", time="2026-11-01T00:00:00.000Z"),
        modern_record("ping", time="2026-11-03T12:30:00.000Z"),
    ]
    timeline = aggregate(jsonl(*records)).timeline
    assert len(timeline.points) <= 1440
    assert timeline.minutes == 5
    assert sum(point[1] for point in timeline.points) == 2
