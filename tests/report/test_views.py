"""The report's filters from end to end (``--since``, ``--until``, ``--client``, ``--method``),
and the record builders the views' tests share (test_tally, test_build, test_model).

Records are built here from the schema in ``docs/records.md``; nothing opens a socket.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from server.report.aggregate import Aggregator, aggregate
from server.report.json import render_json
from server.report.model import Report
from server.report.sources import RecordFilter, parse_time
from tests.report.test_report import (
    jsonl,
    modern_record,
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


def test_codes_are_shown_as_codes_and_input_required_rounds_are_counted() -> None:
    """Issue 34: the HTML showed -32,602, and no text view said a tool asked its caller."""
    from server.report.html import render_html
    from server.report.text import render_table

    records = [
        call("tools/call", "nope", "error", error=(-32602, "Unknown tool")),
        call("tools/call", "confirm", "input_required"),
        call("tools/call", "confirm", "ok"),
    ]
    report = aggregate([("records", io.BytesIO(jsonl(*records)))])
    page = render_html(report)
    assert "-32,602" not in page
    assert '<td data-v="-32602">-32602</td>' in page
    assert '<th scope="col">input_required</th>' in page
    table = render_table(report)
    header = next(line for line in table.splitlines() if line.strip().startswith("target"))
    assert "inputReq" in header
    row = next(line for line in table.splitlines() if "tool confirm" in line)
    assert "50.0%" in row
