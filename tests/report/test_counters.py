"""The report's bounds (server.report.counters.Limits) at the size that showed them: the live
report fed 10,000 records, each from a client of its own naming everything anew, holds a few
MB (it held +109 MB in a server, and drawing the report took minutes), and its totals stay
true, what has no room counted under the overflow keys."""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import orjson
import pytest

from server.report.counters import OVERFLOW_NAME
from server.report.live import LiveReport

RECORDS = 10_000
CAPABILITIES = {f"capability-{n}": {"nested": {"value": "v" * 50}} for n in range(20)}


def hostile_record(n: int) -> bytes:
    """A record as the server writes it (client strings clipped at 256 characters), of a
    client of its own that names everything anew: method, versions, session, task, target,
    capabilities."""
    record: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": f"2026-12-04T02:{n % 60:02d}:00.000Z",
        "request_id": f"r{n}",
        "verb": "POST",
        "path": "/mcp",
        "status": 200 if n % 2 else 404,
        "era": "modern",
        "protocol_version": {"header": f"version-{n}-" + "h" * 200, "body": "2026-07-28"},
        "method": "tools/call" if n % 2 else f"method-{n}-" + "m" * 200,
        "jsonrpc_id": n,
        "notification": False,
        "client": {
            "name": f"client-{n}-" + "n" * 240,
            "version": f"{n}-" + "1" * 240,
            "capabilities": {**CAPABILITIES, f"own-{n}": {}},
        },
        "session_id": f"session-{n}-" + "s" * 30,
        "subject": None,
        "user_agent": f"agent-{n}-" + "u" * 240,
        "client_address": "127.0.0.1",
        "error": None if n % 2 else {"code": -32601, "message": "Method not found"},
        "duration_ms": 1.5,
        "bytes_in": 2000,
        "bytes_out": 100,
        "streaming": False,
        "params": {"name": f"tool-{n}"},
        "task": {"id": f"task-{n}", "status": "working"},
    }
    if n % 2:
        record["target"] = f"tool-{n}-" + "t" * 180
        record["outcome"] = "ok"
    return orjson.dumps(record)


@pytest.mark.slow  # 10,000 records under tracemalloc: seconds, outside the inner loop
def test_the_live_report_of_10000_distinct_clients_stays_small_and_true() -> None:
    lines = [hostile_record(n) for n in range(RECORDS)]
    gc.collect()
    tracemalloc.start()
    try:
        live = LiveReport(refresh_s=5)
        for start in range(0, RECORDS, 500):
            live.write(lines[start : start + 500])
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 12 * 1024 * 1024, f"the live report holds {held / 1e6:.1f} MB"
    from server.report.counters import LIVE_LIMITS

    began = time.perf_counter()
    report = live.report()
    assert time.perf_counter() - began < 10
    # Bounded in count...
    assert len(report.clients) == LIVE_LIMITS.clients + 1
    other = next(c for c in report.clients if c.name == OVERFLOW_NAME)
    assert report.input.folded_clients == RECORDS - LIVE_LIMITS.clients
    # ...and true in total: every request counted, the overflow ones under "(other clients)".
    assert report.input.requests == RECORDS
    assert sum(client.requests for client in report.clients) == RECORDS
    assert other.requests == RECORDS - LIVE_LIMITS.clients
    assert len(live.render("json")) < 8 * 1024 * 1024


def test_a_clients_counters_keep_room_for_what_it_names_then_fold_it() -> None:
    from server.report.aggregate import Aggregator
    from server.report.counters import OTHER_VALUE, Limits

    limits = Limits(values=3, methods=4, value_chars=10, sessions=2, tasks=2)
    aggregator = Aggregator(limits=limits)
    lines = [
        orjson.dumps(
            {
                "v": 1,
                "kind": "request",
                "time": "2026-12-04T02:00:00.000Z",
                "method": f"method-{n}-long-name",
                "client": {"name": "one", "version": "1"},
                "protocol_version": {"header": f"v{n}", "body": None},
                "session_id": f"s{n}",
                "task": {"id": f"t{n}", "status": "working"},
                "error": {"code": -32601, "message": "x"},
                "status": 200,
            }
        )
        for n in range(6)
    ]
    aggregator.feed(lines)
    (stats,) = aggregator.clients.values()
    assert sum(stats.calls.values()) == 6  # every call counted...
    assert len(stats.calls) == 4  # ...three apart (cut at 10 characters), the rest as one
    assert stats.calls[OTHER_VALUE] == 3
    assert all(len(method) <= 11 for method in stats.calls)
    assert len(aggregator.methods) == 4
    assert stats.header_versions == {"v0": 1, "v1": 1, "v2": 1, OTHER_VALUE: 3}
    assert len(stats.sessions) == 2
    assert len(stats.tasks) == 2
    assert sum(stats.errors.values()) == 6
    assert len(stats.errors) == 4


def test_the_budget_bounds_every_counter_together() -> None:
    from server.report.aggregate import Aggregator
    from server.report.counters import OTHER_VALUE, Limits

    aggregator = Aggregator(limits=Limits(budget=5))
    aggregator.feed(
        [
            orjson.dumps(
                {
                    "v": 1,
                    "kind": "request",
                    "method": "ping",
                    "client": {"name": "one"},
                    "verb": f"VERB{n}",
                }
            )
            for n in range(10)
        ]
    )
    (stats,) = aggregator.clients.values()
    assert aggregator.budget == 0
    assert sum(stats.verbs.values()) == 10
    assert stats.verbs[OTHER_VALUE] == 7  # the method and the call took two, three verbs the rest
