"""``python -m server report``: reading records back, adding them up per client, four formats.

Records are built here from the schema in ``docs/records.md``; nothing opens a socket.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import server.cli.main as entry
from server.cli import serve as serve_command
from server.report import sources as report_read
from server.report.aggregate import Aggregator
from server.report.counters import OVERFLOW_NAME, Limits
from server.report.html import render_html
from server.report.html_assets import SCRIPT, script_hash
from server.report.json import render_json, to_json
from server.report.model import ClientReport, Report
from server.report.text import render_markdown, render_table

MODERN = "2026-07-28"
LEGACY_ADVERTISED = ["initialize", "ping", "tools/list", "tools/call", "prompts/list"]
MODERN_ADVERTISED = ["server/discover", "tools/list", "tools/call", "resources/templates/list"]


def request_record(
    method: str | None,
    *,
    name: str | None = "claude-code",
    version: str | None = "2.1.0",
    agent: str | None = "claude-code/2.1.0",
    era: str | None = "legacy",
    time: str = "2026-11-30T06:00:00.000Z",
    status: int | None = 200,
    error: tuple[int, str] | None = None,
    notification: bool = False,
    capabilities: dict[str, Any] | None = None,
    session_id: str | None = None,
    advertised: list[str] | None = None,
    header: str | None = "2025-11-25",
    body: str | None = "2025-11-25",
    verb: str = "POST",
    streaming: bool = False,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": time,
        "request_id": "9f1c2b7a0d4e5f61",
        "verb": verb,
        "path": "/mcp",
        "status": status,
        "era": era,
        "protocol_version": {"header": header, "body": body},
        "method": method,
        "jsonrpc_id": None if notification else 1,
        "notification": notification if method else None,
        "client": {"name": name, "version": version, "capabilities": capabilities},
        "session_id": session_id,
        "subject": None,
        "user_agent": agent,
        "client_address": "127.0.0.1",
        "error": None if error is None else {"code": error[0], "message": error[1]},
        "duration_ms": 1.5,
        "bytes_in": 100,
        "bytes_out": 80,
        "streaming": streaming,
        "params": {"name": "echo", "arguments": {"text": "hi"}},
    }
    if advertised is not None:
        record["advertised"] = advertised
    return record


def stream(
    method: str,
    *,
    name: str | None = "claude-code",
    version: str | None = "2.1.0",
    agent: str | None = "claude-code/2.1.0",
    events: int = 3,
    end: str = "complete",
    opened: str = "2026-11-30T06:00:00.000Z",
    time: str = "2026-11-30T06:00:05.000Z",
) -> dict[str, Any]:
    return {
        "v": 1,
        "kind": "stream",
        "time": time,
        "request_id": "9f1c2b7a0d4e5f61",
        "verb": "POST",
        "era": "legacy",
        "method": method,
        "session_id": None,
        "client": {"name": name, "version": version},
        "user_agent": agent,
        "opened": opened,
        "open_ms": 5000.0,
        "events": events,
        "bytes_out": 900,
        "end": end,
    }


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(record) + b"\n" for record in records)


def aggregate(data: bytes, name: str = "records.jsonl", limits: Limits | None = None) -> Report:
    aggregator = Aggregator(limits=limits)
    aggregator.read(io.BytesIO(data), name)
    return aggregator.report()


def client(report: Report, name: str | None, agent: str | None = None) -> ClientReport:
    found = [
        c for c in report.clients if c.name == name and (agent is None or c.user_agent == agent)
    ]
    assert len(found) == 1, [c.label for c in report.clients]
    return found[0]


def legacy_session_records(
    name: str, agent: str, session: str, methods: list[str], caps: dict[str, Any]
) -> list[dict[str, Any]]:
    """What the server writes for one session: initialize, then records that carry the
    session's client info and capabilities."""
    who: dict[str, Any] = {"name": name, "version": "1.0", "agent": agent, "capabilities": caps}
    records = [
        request_record(
            "initialize", header=None, session_id=session, advertised=LEGACY_ADVERTISED, **who
        ),
        request_record("notifications/initialized", notification=True, session_id=session, **who),
    ]
    records += [request_record(method, session_id=session, **who) for method in methods]
    return records


def modern_record(method: str, **fields: Any) -> dict[str, Any]:
    fields.setdefault("name", "inspector")
    fields.setdefault("version", "0.17")
    fields.setdefault("agent", "node")
    return request_record(method, era="modern", header=MODERN, body=MODERN, **fields)


MIXED = jsonl(
    *legacy_session_records(
        "alpha", "alpha/1", "s1", ["tools/list", "tools/call", "tools/call"], {}
    ),
    *legacy_session_records("beta", "beta/2", "s2", ["ping"], {"roots": {}}),
    modern_record("server/discover", advertised=MODERN_ADVERTISED, capabilities={"sampling": {}}),
    modern_record("tools/call", capabilities={"sampling": {}}),
    modern_record("tools/call", name=None, version=None, agent="curl/8", capabilities={}),
)


# -- aggregation ---------------------------------------------------------------------------


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


# -- bad input -----------------------------------------------------------------------------


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


# -- formats -------------------------------------------------------------------------------

HOSTILE = jsonl(
    request_record("tools/call", name="<script>alert(1)</script>", agent='"><img src=x>'),
    request_record("<b>m</b>|`x`", name="evil\x1b[31mred\u202e", version="1&2", agent="a|b"),
    *legacy_session_records("alpha", "alpha/1", "s1", ["tools/call"], {}),
)


def test_json_parses_with_stable_keys() -> None:
    document = json.loads(render_json(aggregate(MIXED)))
    assert list(document) == [
        "report",
        "input",
        "first_seen",
        "last_seen",
        "advertised",
        "methods",
        "clients",
        "advertised_by_era",
        "totals",
        "errors",
        "tools",
        "prompts",
        "resources",
        "features",
        "timeline",
    ]
    alpha = next(c for c in document["clients"] if c["name"] == "alpha")
    assert list(alpha) == list(to_json(aggregate(MIXED))["clients"][0])
    assert alpha["methods"]["tools/call"] == {"requests": 2, "notifications": 0}
    assert alpha["advertised"]["source"] == "client"
    assert alpha["advertised_never_requested"] == ["ping", "prompts/list"]
    errors = json.loads(
        render_json(aggregate(jsonl(request_record("x", error=(-32601, "no"), status=404))))
    )["clients"][0]["errors"]
    assert errors == {
        "jsonrpc": {"-32601": 1},
        "http": {"404": 1},
        "names": {"-32601": "Method not found"},
        "by_method": {"x": {"-32601": 1}},
    }


def test_table_has_a_block_per_client_within_100_columns() -> None:
    text = render_table(aggregate(MIXED))
    assert len(re.findall(r"^== .* \[c\d+\] =+$", text, re.MULTILINE)) == 4
    assert max(len(line) for line in text.splitlines()) <= 100
    block = text.split("== alpha")[1].split("\n== ")[0]
    assert re.search(r"tools/call\s+2\s+0", block)
    assert "never requested  ping, prompts/list" in block


def test_text_formats_neutralise_control_characters() -> None:
    report = aggregate(HOSTILE)
    for text in (render_table(report), render_markdown(report)):
        assert "\x1b" not in text
        assert "\u202e" not in text
        assert "\\x1b" in text


def test_markdown_escapes_markup() -> None:
    text = render_markdown(aggregate(HOSTILE))
    assert "<script>" not in text
    assert "<b>" not in text
    assert "\\<script\\>" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| ")]
    # Every row of a table keeps its column count: no unescaped pipe from a value.
    header_cells = table_rows[0].count(" | ")
    assert all(re.sub(r"\\\|", "", row).count(" | ") == header_cells for row in table_rows[:4])


def test_html_is_one_page_with_the_grid_and_escapes_everything() -> None:
    page = render_html(aggregate(HOSTILE))
    assert page.startswith("<!DOCTYPE html>")
    assert '<table class="matrix" id="grid">' in page
    # One script, the page's own, allowed by its hash and nothing else.
    assert page.lower().count("<script") == 1
    assert f"<script>{SCRIPT}</script>" in page
    assert script_hash() in page
    assert "unsafe-inline'; script-src 'sha256-" in page
    assert "connect-src" not in page  # only the live page fetches (itself)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page
    assert "&quot;&gt;&lt;img src=x&gt;" in page
    assert "<b>m</b>" not in page
    assert "http://" not in page
    assert "https://" not in page
    tags = " ".join(re.findall(r"<[^>]*>", page))  # real tags: escaped text has no "<"
    links = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", tags)
    assert links
    assert all(link.startswith("#") for link in links)
    assert "@import" not in page
    assert "url(" not in page
    for state in ("requested", "unadvertised", "advertised", "absent"):
        assert f'<td class="{state}"' in page


def test_html_has_the_operators_sections() -> None:
    report = aggregate(MIXED)
    page = render_html(report)
    for table_id in ("totals", "grid", "features-table", "targets-table", "clients-table"):
        assert f'id="{table_id}"' in page
    assert '<svg id="timeline"' in page
    assert page.count('<details class="client"') == len(report.clients)
    totals = page.split('id="totals"')[1].split("</table>")[0]
    assert "<tfoot>" in totals
    assert f'data-v="{report.totals.requests}"' in totals.split("<tfoot>")[1]
    live = render_html(report, refresh_s=2)
    assert '<body data-refresh="2">' in live
    assert "connect-src 'self'" in live


def test_every_format_renders_an_empty_report() -> None:
    report = aggregate(b"")
    for render in (render_table, render_json, render_markdown, render_html):
        assert render(report)


# -- command line --------------------------------------------------------------------------


def test_cli_reads_plain_rotated_and_gzipped_files(tmp_path: Path) -> None:
    (tmp_path / "records.jsonl").write_bytes(jsonl(request_record("ping")))
    (tmp_path / "records.jsonl.1").write_bytes(jsonl(request_record("tools/list")))
    (tmp_path / "records.jsonl.2.gz").write_bytes(
        gzip.compress(jsonl(request_record("tools/call")))
    )
    out = tmp_path / "report.json"
    names = ("records.jsonl.2.gz", "records.jsonl.1", "records.jsonl")
    files = [str(tmp_path / name) for name in names]
    code = entry.main(["report", *files, "--format", "json", "--output", str(out)])
    assert code == 0
    document = json.loads(out.read_text())
    assert document["input"]["requests"] == 3
    assert len(document["input"]["files"]) == 3
    assert set(document["clients"][0]["methods"]) == {"ping", "tools/list", "tools/call"}


def test_cli_reads_stdin_plain_and_gzipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for data in (jsonl(request_record("ping")), gzip.compress(jsonl(request_record("ping")))):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        assert entry.main(["report", "-", "--format", "json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert document["input"]["files"] == ["(stdin)"]
        assert document["clients"][0]["methods"]["ping"]["requests"] == 1


def test_cli_default_format_is_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(MIXED + b"garbage\n")
    assert entry.main(["report", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("MCP client report\n")
    assert "== alpha 1.0 | alpha/1 " in captured.out
    assert "skipped 1 malformed lines" in captured.err


@pytest.mark.parametrize("form", ["table", "json", "markdown", "html"])
def test_cli_writes_every_format(tmp_path: Path, form: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(HOSTILE)
    out = tmp_path / f"out.{form}"
    assert entry.main(["report", str(path), "--format", form, "--output", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "alpha" in text
    if form == "json":
        json.loads(text)


def test_cli_missing_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert entry.main(["report", str(tmp_path / "absent.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        entry.main(["report", "x.jsonl", "--format", "xml"])


def test_no_arguments_still_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def serve(**flags: Any) -> int:
        calls.append("serve")
        return 0

    monkeypatch.setattr(serve_command, "serve", serve)
    assert entry.main([]) == 0
    assert entry.main(["serve"]) == 0
    assert calls == ["serve", "serve"]


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
