"""server.report.aggregate: adding records up per client, bounded, bad input counted.

Records are built from the schema in ``docs/records.md`` (helpers in test_report.py).
"""

from __future__ import annotations

from typing import Any

from server.report.counters import OVERFLOW_NAME, Limits
from server.report.html import render_html
from server.report.json import to_json
from server.report.text import render_markdown, render_table
from tests.report.test_report import (
    LEGACY_ADVERTISED,
    MIXED,
    MODERN,
    MODERN_ADVERTISED,
    aggregate,
    client,
    jsonl,
    legacy_session_records,
    modern_record,
    request_record,
    stream,
)


def test_two_clients_each_get_exactly_their_methods() -> None:
    report = aggregate(MIXED)
    alpha, beta = client(report, "alpha"), client(report, "beta")
    assert {m: u.requests for m, u in alpha.methods.items() if u.requests} == {
        "initialize": 1,
        "tools/list": 1,
        "tools/call": 2,
    }
    assert {m: u.notifications for m, u in alpha.methods.items() if u.notifications} == {
        "notifications/initialized": 1
    }
    assert set(beta.methods) == {"initialize", "notifications/initialized", "ping"}
    assert beta.methods["ping"].requests == 1
    assert alpha.requests == 5
    assert beta.requests == 3
    assert alpha.user_agent == "alpha/1"
    assert alpha.version == "1.0"
    assert alpha.eras == {"legacy": 5}


def test_legacy_session_records_carry_the_client() -> None:
    caps = {"roots": {"listChanged": True}, "sampling": {}}
    records = legacy_session_records("gamma", "g/1", "s9", ["tools/call"] * 4, caps)
    records[0]["time"] = "2026-11-30T05:00:00.000Z"
    records[-1]["time"] = "2026-11-30T07:00:00.000Z"
    report = aggregate(jsonl(*records))
    assert len(report.clients) == 1
    gamma = report.clients[0]
    assert gamma.label == "gamma"
    assert gamma.requests == 6
    assert gamma.sessions == 1
    assert gamma.capability_names == ["roots", "sampling"]
    assert gamma.capabilities == caps
    assert gamma.header_versions == {"2025-11-25": 5}  # initialize has no header yet
    assert gamma.body_versions == {"2025-11-25": 6}
    assert (gamma.first_seen, gamma.last_seen) == (
        "2026-11-30T05:00:00.000Z",
        "2026-11-30T07:00:00.000Z",
    )


def test_capabilities_union_and_latest_object() -> None:
    report = aggregate(
        jsonl(
            modern_record("tools/list", capabilities={"b": {}}, time="2026-11-30T06:00:02.000Z"),
            modern_record(
                "tools/list", capabilities={"a": {"x": 1}}, time="2026-11-30T06:00:03.000Z"
            ),
            modern_record("tools/list", capabilities={"c": {}}, time="2026-11-30T06:00:01.000Z"),
        )
    )
    inspector = client(report, "inspector")
    assert inspector.capability_names == ["a", "b", "c"]
    assert inspector.capabilities == {"a": {"x": 1}}  # latest by time, not by input order


def test_advertised_but_never_requested() -> None:
    report = aggregate(MIXED)
    alpha, beta = client(report, "alpha"), client(report, "beta")
    assert alpha.advertised_source == "client"
    assert alpha.never_requested == ["ping", "prompts/list"]
    assert beta.never_requested == ["prompts/list", "tools/call", "tools/list"]
    inspector = client(report, "inspector")
    assert inspector.advertised == sorted(MODERN_ADVERTISED)
    assert inspector.never_requested == ["resources/templates/list", "tools/list"]
    # curl never discovered: it is measured against everything advertised in the input to
    # clients of its era (2026-07-28), never against initialize, ping or logging/setLevel.
    curl = client(report, None, "curl/8")
    assert curl.advertised_source == "input"
    assert curl.advertised == sorted(MODERN_ADVERTISED)
    assert "tools/call" not in curl.never_requested
    assert "resources/templates/list" in curl.never_requested
    assert "initialize" not in curl.never_requested
    assert report.advertised == sorted({*LEGACY_ADVERTISED, *MODERN_ADVERTISED})
    assert report.advertised_by_era == {
        "legacy": sorted(LEGACY_ADVERTISED),
        "modern": sorted(MODERN_ADVERTISED),
    }


def test_requested_not_advertised_ignores_notifications() -> None:
    records = legacy_session_records("delta", "d/1", "s3", ["resources/read"], {})
    report = aggregate(jsonl(*records))
    delta = report.clients[0]
    assert delta.not_advertised == ["resources/read"]
    assert delta.cell("resources/read") == ("unadvertised", 1)
    assert delta.cell("notifications/initialized") == ("requested", 1)
    assert delta.cell("ping") == ("advertised", 0)
    assert delta.cell("server/discover") == ("absent", 0)


def test_without_any_advertised_list_nothing_is_claimed() -> None:
    report = aggregate(jsonl(modern_record("tools/call")))
    only = report.clients[0]
    assert (only.advertised_source, only.never_requested, only.not_advertised) == ("none", [], [])
    assert only.cell("tools/call") == ("requested", 1)


def test_stream_records_are_not_requests() -> None:
    report = aggregate(
        jsonl(
            request_record("tools/call", streaming=True),
            stream("tools/call", events=4, end="complete"),
            stream("tools/call", events=2, end="client_closed", time="2026-11-30T08:00:00.000Z"),
        )
    )
    code = report.clients[0]
    assert code.requests == 1
    assert code.methods["tools/call"].requests == 1
    assert (code.streams, code.stream_events) == (2, 6)
    assert code.stream_ends == {"complete": 1, "client_closed": 1}
    assert code.last_seen == "2026-11-30T08:00:00.000Z"
    assert (report.input.requests, report.input.streams, report.input.records) == (1, 2, 3)


def test_errors_are_counted_by_code_and_status() -> None:
    report = aggregate(
        jsonl(
            request_record("nope", error=(-32601, "Method not found"), status=200),
            request_record("nope", error=(-32601, "Method not found"), status=200),
            request_record("tools/call", error=(-32600, "Session not found"), status=404),
            request_record(None, verb="GET", status=409, error=(-32600, "one GET stream")),
            request_record("tools/call", status=202),
            request_record("tools/call", status=None),
        )
    )
    code = report.clients[0]
    assert code.jsonrpc_errors == {-32601: 2, -32600: 2}
    assert code.http_statuses == {404: 1, 409: 1}
    assert code.no_method == 1
    assert code.verbs == {"POST": 5, "GET": 1}


def test_pseudo_methods_are_counted_but_are_not_methods() -> None:
    report = aggregate(
        jsonl(
            request_record("(response)"),
            request_record("(batch)"),
            request_record("(batch)"),
            request_record("ping"),
        )
    )
    code = report.clients[0]
    assert set(code.methods) == {"ping"}
    assert code.pseudo_methods == {"(batch)": 2, "(response)": 1}
    assert code.requests == 4
    assert "(batch)" not in report.methods


def test_unidentified_clients_are_grouped_per_user_agent() -> None:
    report = aggregate(
        jsonl(
            request_record("tools/list", name=None, version="9", agent="curl/8"),
            request_record("tools/list", name=None, agent="curl/8"),
            request_record("tools/list", name=None, agent="wget/1"),
            request_record("tools/list", name=None, agent=None),
        )
    )
    labels = sorted((c.label, c.version, c.user_agent or "", c.requests) for c in report.clients)
    assert labels == [
        ("(unidentified)", None, "", 1),
        ("(unidentified)", None, "curl/8", 2),
        ("(unidentified)", None, "wget/1", 1),
    ]


def test_the_same_name_with_another_version_or_agent_is_another_client() -> None:
    report = aggregate(
        jsonl(
            request_record("ping", version="1"),
            request_record("ping", version="2"),
            request_record("ping", version="2", agent="other"),
        )
    )
    assert len(report.clients) == 3


def test_too_many_clients_are_folded() -> None:
    report = aggregate(
        jsonl(*(request_record("ping", agent=f"bot/{n}") for n in range(5))),
        limits=Limits(clients=2),
    )
    assert len(report.clients) == 3
    assert report.input.folded_clients == 3
    assert client(report, OVERFLOW_NAME).requests == 3


def test_malformed_lines_are_counted_and_skipped() -> None:
    good = jsonl(request_record("ping"), stream("tools/call"))
    weird_fields = request_record("ping")
    weird_fields.update(
        client=["not", "an", "object"],
        user_agent={"x": 1},
        method={"a": 1},
        time=12,
        era=[1],
        protocol_version="2025-11-25",
        error={"code": "x"},
        status="200",
        session_id=5,
        advertised=[1, None, "ping"],
    )
    weird_caps = request_record("ping", agent=None)
    weird_caps["client"]["capabilities"] = ["roots"]
    weird_caps["client"]["name"] = ["x"]
    bad = b"\n".join(
        [
            b"not json at all",
            b'{"v": 1, "kind": "request"',  # cut short
            b"[1, 2, 3]",
            b"null",
            b'"a string"',
            b'{"kind": "request"}',  # no version
            b'{"v": "1", "kind": "request"}',
            b'{"v": 1}',  # no kind
            b"",
            b"   ",
            b"\xff\xfe\x00garbage",
        ]
    )
    data = good + bad + b"\n" + jsonl(weird_fields, weird_caps)
    report = aggregate(data)
    assert report.input.malformed == 9
    assert report.input.lines == 13  # blank lines are not lines
    assert report.input.requests == 3
    assert report.input.streams == 1
    odd = client(report, None, None)  # both odd records lost their identity, not the count
    assert odd.requests == 2
    assert odd.no_method == 1
    assert odd.methods["ping"].requests == 1
    # An advertised list on a record without a valid era says nothing about any era.
    assert odd.advertised == []
    assert odd.first_seen == "2026-11-30T06:00:00.000Z"  # the one with a string time


def test_unknown_versions_and_kinds_are_counted_apart() -> None:
    future = request_record("ping")
    future["v"] = 2
    other_kind = request_record("ping")
    other_kind["kind"] = "audit"
    report = aggregate(jsonl(request_record("ping"), future, other_kind))
    assert report.input.unknown_version == 1
    assert report.input.unknown_kind == 1
    assert report.input.malformed == 0
    assert report.input.requests == 1


def test_a_file_without_a_final_newline_keeps_its_last_record() -> None:
    report = aggregate(jsonl(request_record("ping"), request_record("tools/list")).rstrip(b"\n"))
    assert report.input.requests == 2


def test_tasks_are_counted_by_the_last_status_their_records_showed() -> None:
    def with_task(method: str, task_id: str, status: str, time: str) -> dict[str, Any]:
        record = request_record(method, time=time)
        record["task"] = {"id": task_id, "status": status}
        return record

    data = jsonl(
        with_task("tools/call", "a", "working", "2026-11-30T06:00:00.000Z"),
        with_task("tasks/get", "a", "input_required", "2026-11-30T06:00:01.000Z"),
        with_task("tasks/get", "a", "completed", "2026-11-30T06:00:02.000Z"),
        # An ended task stays ended, whatever a record that arrives late says.
        with_task("tasks/get", "a", "working", "2026-11-30T06:00:01.500Z"),
        with_task("tools/call", "b", "working", "2026-11-30T06:00:03.000Z"),
        with_task("tasks/cancel", "b", "cancelled", "2026-11-30T06:00:04.000Z"),
        with_task("tools/call", "c", "working", "2026-11-30T06:00:05.000Z"),
        {**request_record("tasks/get"), "task": {"id": 5, "status": "odd"}},  # not a task: ignored
    )
    report = aggregate(data)
    found = client(report, "claude-code")
    assert found.tasks == {"cancelled": 1, "completed": 1, "working": 1}
    assert found.methods["tasks/get"].requests == 4
    assert to_json(report)["clients"][0]["tasks"] == found.tasks
    table = render_table(report)
    assert "tasks            3: last seen cancelled 1, completed 1, working 1" in table
    assert "**Tasks:** 3: last seen" in render_markdown(report)
    assert "3: last seen" in render_html(report)


def test_tasks_followed_per_client_are_bounded() -> None:
    records = []
    for task_id in ("a", "b", "c"):
        record = request_record("tools/call")
        record["task"] = {"id": task_id, "status": "working"}
        records.append(record)
    assert client(aggregate(jsonl(*records), limits=Limits(tasks=2)), "claude-code").tasks == {
        "working": 2
    }


def test_each_client_shows_the_transports_and_eras_it_used() -> None:
    old = request_record("tools/call", name="gemini-cli", agent="node", header=None)
    old["transport"] = "sse"
    modern = request_record("tools/call", era="modern", header=MODERN, body=MODERN)
    before_the_field = request_record("tools/list")
    report = aggregate(jsonl(old, old, modern, before_the_field))
    assert client(report, "gemini-cli").transports == {"sse/legacy": 2}
    assert client(report, "claude-code").transports == {
        "streamable-http/legacy": 1,
        "streamable-http/modern": 1,
    }
    assert "sse/legacy 2" in render_table(report)
    assert "sse/legacy 2" in render_markdown(report)
    assert "sse/legacy 2" in render_html(report)
    assert to_json(report)["clients"][0]["transports"]
