"""The chaos run's verdicts can fail: each promise a fault makes is broken here by one made-up
ledger, and kept by the same ledger without the breach (no servers: ``tests/chaos/run.py`` runs
them for real)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.chaos.faults import Fault, the_faults
from tests.chaos.ledger import Ledger, Mark, Op
from tests.chaos.verdict import Window, judge, orphans, timeline


def fault(name: str) -> Fault:
    (found,) = [f for f in the_faults(3, 5.0) if f.name == name]
    return found


def ledger_with(*ops: Op, answered: tuple[tuple[float, str], ...] = ()) -> Ledger:
    ledger = Ledger()
    ledger.ops.extend(ops)
    ledger.answered.extend(answered)
    # Every replica's /readyz turned 503 a second into the window (what a Redis stall needs).
    ledger.marks.extend(Mark("readyz", "probe", f"readyz {i} 503", 11.0) for i in range(3))
    return ledger


def window(name: str, **extra: object) -> Window:
    return Window(fault(name), start=10.0, end=30.0, **extra)  # type: ignore[arg-type]


def test_an_error_the_docs_name_for_the_fault_keeps_the_promise() -> None:
    ledger = ledger_with(Op("legacy-1", "initialize", "call", 11, 12, "http 503 retry-after"))
    verdict = judge(window("redis stalled 10 s"), ledger, Counter())
    assert verdict.held, verdict.line()
    assert verdict.recover_s == 2.0


def test_any_other_error_breaks_it() -> None:
    ledger = ledger_with(Op("legacy-1", "initialize", "GET resume", 11, 12, "http 410"))
    verdict = judge(window("SIGTERM drain"), ledger, Counter())
    assert not verdict.held
    assert "initialize:GET resume:http 410 x1" in verdict.breaches


def test_a_2026_era_call_may_not_fail_while_redis_is_away() -> None:
    ledger = ledger_with(Op("modern-1", "2026-07-28", "call", 11, 12, "http 503 retry-after"))
    assert not judge(window("redis stalled 10 s"), ledger, Counter()).held
    tasks = ledger_with(Op("modern-tasks", "2026-07-28", "task", 11, 12, "http 503 retry-after"))
    assert judge(window("redis stalled 10 s"), tasks, Counter()).held
    # Without Retry-After the client is not told to retry: the promise is a 503 *with* it.
    bare = ledger_with(Op("modern-tasks", "2026-07-28", "task", 11, 12, "http 503"))
    assert not judge(window("redis stalled 10 s"), bare, Counter()).held


def test_a_drain_may_refuse_a_task_only_with_retry_after() -> None:
    told = ledger_with(Op("modern-tasks", "2026-07-28", "task", 11, 12, "http 503 retry-after"))
    assert judge(window("SIGTERM drain"), told, Counter()).held
    bare = ledger_with(Op("modern-tasks", "2026-07-28", "task", 11, 12, "http 503"))
    assert not judge(window("SIGTERM drain"), bare, Counter()).held
    call = ledger_with(Op("modern-1", "2026-07-28", "call", 11, 12, "http 503 retry-after"))
    assert not judge(window("rolling restart"), call, Counter()).held


def test_a_quick_request_slower_than_the_fault_allows_is_a_hang() -> None:
    slow = ledger_with(Op("legacy-1", "initialize", "call", 11, 16.5, None))
    verdict = judge(window("redis stalled 10 s"), slow, Counter())
    assert not verdict.held
    assert "slower than 4 s" in verdict.breaches[0]
    assert judge(window("replica stalled 5 s"), slow, Counter()).held


def test_records_exact_means_one_record_per_answered_request() -> None:
    answered = ((12.0, "a"), (13.0, "b"))
    ledger = ledger_with(answered=answered)
    assert judge(window("SIGTERM drain"), ledger, Counter({"a": 1, "b": 1})).held
    twice = judge(window("SIGTERM drain"), ledger, Counter({"a": 1, "b": 2}))
    assert not twice.held
    assert twice.records == (1, 2)
    assert not judge(window("SIGTERM drain"), ledger, Counter({"a": 1})).held


def test_a_sigkill_may_lose_only_the_records_of_its_last_flush() -> None:
    killed = window("replica SIGKILLed")
    killed.fault.killed_at.append(13.5)
    ledger = ledger_with(answered=((13.0, "a"), (13.2, "b")))
    assert judge(killed, ledger, Counter({"b": 1})).held
    early = ledger_with(answered=((11.0, "a"),))
    assert not judge(killed, early, Counter()).held


def test_a_lost_update_on_a_get_stream_breaks_it() -> None:
    verdict = judge(window("rolling restart", missing={"legacy-1": 2}), Ledger(), Counter(), 0.1)
    assert "2 resource updates lost on GET streams" in verdict.breaches
    extra = judge(window("rolling restart", missing={"legacy-1": -1}), Ledger(), Counter(), 0.1)
    assert extra.held


def test_the_rollout_p99_may_be_at_most_twice_steady_state() -> None:
    ops = [
        Op("modern-1", "2026-07-28", "call", 11 + i / 100, 11 + i / 100 + 0.05, None)
        for i in range(99)
    ]
    ledger = ledger_with(*ops, Op("modern-1", "2026-07-28", "call", 20, 20.3, None))
    assert judge(window("rolling restart"), ledger, Counter(), steady_p99=0.2).held
    assert not judge(window("rolling restart"), ledger, Counter(), steady_p99=0.1).held


def test_every_replicas_readiness_must_turn_503_within_the_redis_timeout() -> None:
    stalled = window("redis stalled 10 s")
    ledger = Ledger()
    ledger.marks.extend(
        [Mark("readyz", "probe", "readyz 0 503", 12.0), Mark("readyz", "probe", "readyz 1 200", 11)]
    )
    verdict = judge(stalled, ledger, Counter())
    assert "/readyz not 503 within 4 s on every replica" in verdict.breaches
    ledger.marks.append(Mark("readyz", "probe", "readyz 1 503", 13.5))
    assert judge(stalled, ledger, Counter()).held
    ledger.marks.append(Mark("readyz", "probe", "readyz 2 200", 11))
    ledger.marks.append(Mark("readyz", "probe", "readyz 2 503", 15))
    assert not judge(stalled, ledger, Counter()).held


def test_an_answered_request_without_one_record_is_named_with_its_records() -> None:
    ledger = ledger_with(answered=((12.0, "a"), (13.0, "b"), (14.0, "c")))
    ledger.described.update(a="GET /api/sse -> 200 text/event-stream", b="POST", c="POST")
    drained = window("SIGTERM drain")
    drained.acted = 11.0
    wall = 1000.0  # the records' clock = the ledger's + wall
    records: list[list[dict[str, Any]]] = [
        [{"kind": "request", "request_id": "b", "method": "tools/call", "epoch": 1013.0}],
        [
            {"kind": "request", "request_id": "c", "method": "tools/call", "epoch": 1014.0},
            {"kind": "request", "request_id": "c", "method": "tools/call", "epoch": 1014.1},
            {"kind": "stream", "request_id": "a", "method": None, "epoch": 1020.0},
        ],
    ]
    lines = orphans(drained, ledger, records, wall)
    assert len(lines) == 2
    assert lines[0].startswith("  a: GET /api/sse -> 200 text/event-stream answered at +2.00 s")
    assert "replica 1 stream None" in lines[0]
    assert lines[1].count("replica 1 request tools/call") == 2


def test_the_rollout_timeline_shows_its_steps_slowest_requests_and_late_loop() -> None:
    rollout = window("rolling restart")
    rollout.fault.steps.append((12.5, "replica 0 SIGTERM"))
    ledger = ledger_with(
        Op("modern-1", "2026-07-28", "call", 13, 13.4, None),
        Op("modern-1", "2026-07-28", "call", 14, 14.01, None),
        Op("modern-1", "2026-07-28", "listen", 11, 15, None),
    )
    ledger.stalls.append((13.1, 0.2))
    steps, slowest, late = timeline(rollout, ledger, slowest=1)
    assert steps == "  steps: replica 0 SIGTERM +2.5"
    assert slowest == "  slowest: modern-1 call 400 ms +3.0"
    assert late == "  the clients' own loop late: 200 ms +3.1"
