"""server.report.tally: latency histograms and quantiles, and outcomes per tool,
prompt and resource.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from server.report import tally as measures
from server.report.json import render_json
from tests.report.test_report import (
    aggregate,
    client,
    jsonl,
    request_record,
)
from tests.report.test_views import call, stream_of, target


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
