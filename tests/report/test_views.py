"""The report's views across clients: latency, outcomes per tool, prompt and resource, errors by
method, totals, the per-feature view, the timeline, era-aware judging and the filters.

Records are built here from the schema in ``docs/records.md``; nothing opens a socket.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from server.report import tally as measures
from server.report.aggregate import Aggregator
from server.report.json import render_json
from server.report.model import Report
from server.report.sources import RecordFilter, parse_time
from tests.report.test_report import (
    LEGACY_ADVERTISED,
    MODERN_ADVERTISED,
    aggregate,
    client,
    jsonl,
    legacy_session_records,
    modern_record,
    request_record,
    stream,
)


def call(
    method: str,
    target: str | None,
    outcome: str | None,
    *,
    duration: float = 1.5,
    error: tuple[int, str] | None = None,
    streaming: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    record = modern_record(method, error=error, streaming=streaming, **fields)
    record["duration_ms"] = duration
    if target is not None:
        record["target"] = target
    if outcome is not None:
        record["outcome"] = outcome
    return record


def stream_of(
    record: dict[str, Any], outcome: str | None, open_ms: float, ttfb_ms: float | None = None
) -> dict[str, Any]:
    ended = stream(record["method"], name=record["client"]["name"], version="0.17", agent="node")
    ended.update(
        era="modern",
        open_ms=open_ms,
        ttfb_ms=ttfb_ms,
        outcome=outcome,
        target=record.get("target"),
        error=None,
    )
    return ended


def target(report: Report, kind: str, name: str) -> Any:
    [found] = [t for t in report.targets if (t.kind, t.name) == (kind, name)]
    return found


def by_id(report: Report, client_id: str) -> str:
    return report.client(client_id).identity


# -- latency -------------------------------------------------------------------------------


def test_quantiles_come_back_within_the_bucket_precision() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(1, 1.2) for _ in range(5000)]
    histogram: dict[int, int] = {}
    for value in values:
        slot = measures.bucket(value)
        histogram[slot] = histogram.get(slot, 0) + 1
    found = measures.latency(histogram)
    assert found is not None
    ordered = sorted(values)
    for quantile, got in ((0.5, found.p50), (0.95, found.p95), (0.99, found.p99)):
        exact = ordered[math.ceil(quantile * len(ordered)) - 1]
        assert got == pytest.approx(exact, rel=0.012)
    assert found.p50 <= found.p95 <= found.p99 <= found.max
    assert found.max == pytest.approx(ordered[-1], rel=0.012)
    assert found.count == 5000
    assert measures.latency({}) is None
    assert measures.bucket(0) == measures.bucket(-3) == 0


def test_latency_per_client_and_method_and_streams_count_whole_exchanges() -> None:
    fast = [call("tools/list", None, None, duration=d) for d in (1.0, 2.0, 3.0, 4.0)]
    streamed = call("tools/call", "count", None, duration=0.5, streaming=True)
    report = aggregate(jsonl(*fast, streamed, stream_of(streamed, "ok", 900.0, ttfb_ms=120.0)))
    inspector = client(report, "inspector")
    listed = inspector.latency["tools/list"]
    assert listed.count == 4
    assert listed.p50 == pytest.approx(2.0, rel=0.012)
    assert listed.p99 == pytest.approx(4.0, rel=0.012)
    # The streamed call's latency is its stream's whole life, not the time to open it.
    assert inspector.latency["tools/call"].count == 1
    assert inspector.latency["tools/call"].p50 == pytest.approx(900.0, rel=0.012)
    assert inspector.ttfb["tools/call"].p50 == pytest.approx(120.0, rel=0.012)
    total = report.totals.methods["tools/list"].latency
    assert total is not None
    assert total.count == 4


def test_listen_streams_are_not_latencies() -> None:
    opened = call("subscriptions/listen", None, None, streaming=True)
    report = aggregate(jsonl(opened, stream_of(opened, None, 3_600_000.0)))
    assert "subscriptions/listen" not in client(report, "inspector").latency


# -- tools, prompts, resources -------------------------------------------------------------


def test_outcomes_per_target_are_exact_and_streams_settle_theirs() -> None:
    streamed = call("tools/call", "slow", None, streaming=True)
    records = [
        call("tools/call", "echo", "ok"),
        call("tools/call", "echo", "ok"),
        call("tools/call", "fail", "is_error"),
        call("tools/call", "boom", "crash"),
        call("tools/call", "nope", "error", error=(-32602, "Unknown tool: nope")),
        call("prompts/get", "greet", "ok"),
        call("resources/read", "probe://doc/{id}", "ok"),
        call("resources/read", "probe://readme", "ok"),
        call("resources/read", None, "error", error=(-32602, "Resource not found")),
        streamed,
        stream_of(streamed, "is_error", 50.0),
    ]
    report = aggregate(jsonl(*records))
    assert target(report, "tool", "echo").outcomes == {
        "ok": 2,
        "is_error": 0,
        "crash": 0,
        "error": 0,
        "input_required": 0,
        "unknown": 0,
    }
    assert target(report, "tool", "fail").outcomes["is_error"] == 1
    assert target(report, "tool", "fail").rate("is_error") == 1.0
    assert target(report, "tool", "boom").outcomes["crash"] == 1
    nope = target(report, "tool", "nope")
    assert (nope.outcomes["error"], nope.error_codes) == (1, {-32602: 1})
    slow = target(report, "tool", "slow")
    assert (slow.calls, slow.outcomes["is_error"], slow.outcomes["unknown"]) == (1, 1, 0)
    assert target(report, "prompt", "greet").calls == 1
    assert target(report, "template", "probe://doc/{id}").calls == 1
    assert target(report, "resource", "probe://readme").calls == 1
    # A read the server could not resolve is counted as (unresolved), whatever its params.
    assert target(report, "resource", "(unresolved)").calls == 1
    assert sum(t.calls for t in report.targets) == 10
    inspector = client(report, "inspector")
    # is_error and crash fail the request like a JSON-RPC error does.
    assert inspector.failed == 5
    assert report.totals.failed == 5
    document = json.loads(render_json(report))
    fail = next(t for t in document["tools"] if t["name"] == "fail")
    assert fail["is_error_rate"] == 1.0
    assert fail["clients"] == [
        {"client": inspector.id, "calls": 1, "outcomes": fail["outcomes"]},
    ]
    assert {t["kind"] for t in document["resources"]} == {"resource", "template"}


def test_records_before_outcomes_fall_back_to_params_and_error_codes() -> None:
    old = request_record("tools/call")  # params name "echo", no target or outcome
    crashed = request_record("prompts/get", error=(-32603, "Internal error"))
    crashed["params"] = {"name": "greet"}
    old_read = request_record("resources/read")
    old_read["params"] = {"uri": "doc://old"}
    missing = call("resources/read", None, "error", error=(-32602, "Resource not found"))
    missing["target"] = None  # a record that has the field: the server resolved nothing
    missing["params"] = {"uri": "doc://made-up"}
    report = aggregate(jsonl(old, crashed, old_read, missing))
    assert target(report, "tool", "echo").outcomes["unknown"] == 1
    assert target(report, "prompt", "greet").outcomes["crash"] == 1
    assert target(report, "resource", "doc://old").calls == 1
    assert target(report, "resource", "(unresolved)").outcomes["error"] == 1


def test_targets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from server.report import tally as targets

    monkeypatch.setattr(targets, "MAX_TARGETS", 3)
    records = [call("tools/call", f"t{n}", "ok") for n in range(6)]
    records.append(call("tools/call", "x" * 500, "ok"))
    report = aggregate(jsonl(*records))
    names = sorted(t.name for t in report.targets)
    assert names == ["(other)", "t0", "t1", "t2"]
    assert target(report, "tool", "(other)").calls == 4


# -- errors and totals ---------------------------------------------------------------------


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


# -- eras ----------------------------------------------------------------------------------


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


# -- features ------------------------------------------------------------------------------


def test_the_feature_view_names_who_used_discovered_and_skipped_each_feature() -> None:
    records = [
        # alpha lists tools and calls echo; lists prompts, never gets one.
        *legacy_session_records("alpha", "alpha/1", "s1", ["tools/list", "prompts/list"], {}),
        request_record("tools/call", name="alpha", version="1.0", agent="alpha/1", session_id="s1")
        | {"target": "echo", "outcome": "ok"},
        # curl calls a tool blind, and reads a templated resource.
        call("tools/call", "add", "ok", name=None, version=None, agent="curl/8"),
        call("resources/read", "doc://{id}", "ok", name=None, version=None, agent="curl/8"),
        # the inspector discovers, then listens.
        modern_record("server/discover", advertised=[*MODERN_ADVERTISED, "subscriptions/listen"]),
        modern_record("subscriptions/listen", streaming=True),
    ]
    report = aggregate(jsonl(*records))
    rows = {row.feature: row for row in report.features}
    alpha = client(report, "alpha").id
    curl = client(report, None, "curl/8").id
    inspector = client(report, "inspector").id
    assert rows["tools"].used_by == {alpha: 1, curl: 1}
    assert rows["tools"].used_without_discovery == [curl]
    assert rows["tool:echo"].used_by == {alpha: 1}
    assert rows["tool:add"].used_without_discovery == [curl]
    assert rows["prompts"].used_by == {}
    assert rows["prompts"].discovered_never_used == [alpha]
    assert rows["templates"].used_by == {curl: 1}
    assert rows["resources"].used_by == {}
    assert rows["listen"].used_by == {inspector: 1}
    assert rows["listen"].used_without_discovery == []
    # Completions were advertised to alpha (initialize): discovered, never used.
    assert rows["completions"].used_by == {}
    assert rows["logging"].used_by == {}
    # Each tool follows "tools", most called first, ties by name.
    assert list(rows)[:3] == ["tools", "tool:add", "tool:echo"]
    feature_names = [row["feature"] for row in json.loads(render_json(report))["features"]]
    for name in ("tools", "resources", "templates", "prompts", "completions"):
        assert name in feature_names
    for name in ("subscriptions", "logging", "listen"):
        assert name in feature_names


def test_a_listen_for_resource_updates_is_a_subscription() -> None:
    listen = modern_record("subscriptions/listen", streaming=True)
    listen["params"] = {"notifications": {"resourceSubscriptions": ["probe://readme"]}}
    report = aggregate(jsonl(listen))
    rows = {row.feature: row for row in report.features}
    assert rows["subscriptions"].used_by == {report.clients[0].id: 1}


# -- timeline ------------------------------------------------------------------------------


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


# -- filters -------------------------------------------------------------------------------


def test_parse_time_accepts_iso_and_durations() -> None:
    assert parse_time("2026-11-30") == "2026-11-30T00:00:00.000Z"
    assert parse_time("2026-11-30T06:07") == "2026-11-30T06:07:00.000Z"
    assert parse_time("2026-11-30T06:07:02.123456Z") == "2026-11-30T06:07:02.123Z"
    assert parse_time("2026-11-30T08:07:02+02:00") == "2026-11-30T06:07:02.000Z"
    now = 1_800_000_000.0
    assert parse_time("15m", now=now) == parse_time("2027-01-15T07:45:00Z")
    assert parse_time("1d", now=now) == parse_time("2027-01-14T08:00:00Z")
    with pytest.raises(ValueError, match="duration"):
        parse_time("yesterday")


def test_filters_keep_only_what_was_asked() -> None:
    records = [
        modern_record("tools/call", time="2026-11-30T05:59:59.999Z"),
        modern_record("tools/call", time="2026-11-30T06:00:00.000Z"),
        modern_record("tools/list", time="2026-11-30T06:30:00.000Z"),
        modern_record("prompts/list", time="2026-11-30T07:00:00.000Z"),
        modern_record("tools/call", time="2026-11-30T06:10:00.000Z", name="Claude-Code"),
    ]

    def run(**options: Any) -> Report:
        aggregator = Aggregator(RecordFilter(**options))
        aggregator.feed(jsonl(*records).splitlines())
        return aggregator.report()

    windowed = run(since="2026-11-30T06:00:00.000Z", until="2026-11-30T07:00:00.000Z")
    assert windowed.input.requests == 3
    assert windowed.input.filtered_out == 2
    assert run(methods=("tools/*",)).input.requests == 4
    assert run(methods=("prompts/list", "tools/list")).input.requests == 2
    only = run(clients=("claude",))
    assert [c.name for c in only.clients] == ["Claude-Code"]
    by_agent = run(clients=("NODE",))
    assert by_agent.input.requests == 5
    assert json.loads(render_json(only))["input"]["filters"]["clients"] == ["claude"]


def test_filters_from_the_command_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import server.cli.main as entry

    path = tmp_path / "r.jsonl"
    path.write_bytes(
        jsonl(
            modern_record("tools/call", time="2026-11-30T06:00:00.000Z"),
            modern_record("tools/list", time="2026-11-30T07:00:00.000Z"),
        )
    )
    arguments = ["report", str(path), "--format", "json", "--since", "2026-11-30T06:30"]
    assert entry.main([*arguments, "--method", "tools/*"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["input"]["requests"] == 1
    assert document["input"]["filters"]["since"] == "2026-11-30T06:30:00.000Z"
    assert entry.main(["report", str(path), "--since", "last tuesday"]) == 2
    assert "not an ISO 8601" in capsys.readouterr().err
