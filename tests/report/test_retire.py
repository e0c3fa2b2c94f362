"""``python -m server report --retire ITEM``: exactly the clients that used the item in the
period, with advice, as text, JSON, Markdown and a section of the HTML page; exit 1 while
anyone did, 0 once nobody has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from server.cli.main import main
from server.report.retire import RetireScan


def record(time: str, name: str | None, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": time,
        "request_id": fields.pop("request_id", "aaaaaaaa00000001"),
        "verb": "POST",
        "era": "legacy",
        "protocol_version": {"header": None, "body": "2024-11-05"},
        "method": "tools/call",
        "client": {"name": name, "version": "1.0" if name else None, "capabilities": {}},
        "subject": None,
        "user_agent": "agent/1",
        "status": 202,
    }
    base.update(fields)
    return base


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    return path


MIXED = [
    record("2026-12-01T10:00:00.000Z", "mcp-remote", transport="sse", subject="alice"),
    record(
        "2026-12-02T10:00:00.000Z", "mcp-remote", transport="sse", request_id="bbbbbbbb00000001"
    ),
    record("2026-11-01T10:00:00.000Z", "old-agent", transport="sse"),  # before the period
    record("2026-12-03T10:00:00.000Z", "claude-code", era="modern"),  # Streamable HTTP
    record("2026-12-03T11:00:00.000Z", None, transport="sse", user_agent="curl/8"),
    {"v": 1, "kind": "stream", "time": "2026-12-03T12:00:00.000Z", "transport": "sse"},
]


def test_it_lists_exactly_the_clients_that_used_sse_in_the_period(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "r.jsonl", MIXED)
    code = main(
        ["report", str(source), "--retire", "sse", "--since", "2026-11-15", "--format", "json"]
    )
    assert code == 1
    view = json.loads(capsys.readouterr().out)
    clients = {c["client"]["name"] or c["user_agent"]: c for c in view["clients"]}
    assert set(clients) == {"mcp-remote", "curl/8"}
    remote = clients["mcp-remote"]
    assert remote["requests"] == 2
    assert remote["processes"] == 2
    assert remote["subjects"] == ["alice"]
    assert remote["first_seen"] == "2026-12-01T10:00:00.000Z"
    assert remote["last_seen"] == "2026-12-02T10:00:00.000Z"
    assert "http-first" in remote["advice"]


def test_it_exits_0_once_nobody_is_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "r.jsonl", MIXED)
    assert main(["report", str(source), "--retire", "sse", "--since", "2026-12-04"]) == 0
    assert "Nobody: it can be switched off." in capsys.readouterr().out


def test_text_markdown_and_html_name_the_client_and_the_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "r.jsonl", MIXED)
    assert main(["report", str(source), "--retire", "sse"]) == 1
    text = capsys.readouterr().out
    assert "mcp-remote 1.0: 2 requests" in text
    assert "advice:" in text
    assert main(["report", str(source), "--retire", "sse", "--format", "markdown"]) == 1
    assert "| mcp-remote | 1.0 | 2 |" in capsys.readouterr().out
    page = tmp_path / "report.html"
    assert (
        main(["report", str(source), "--retire", "sse", "--format", "html", "--output", str(page)])
        == 1
    )
    html = page.read_text()
    assert '<section id="retire">' in html
    assert "mcp-remote" in html
    assert "<html" in html.lower()  # the whole report, with the section in it


@pytest.mark.parametrize(
    ("item", "fields", "hit"),
    [
        ("initialize", {"era": "legacy"}, True),
        ("initialize", {"era": "modern"}, False),
        ("version:2024-11-05", {}, True),
        ("version:2025-06-18", {}, False),
        ("method:tools/call", {}, True),
        ("method:tools/list", {}, False),
        (
            "method:sampling/createMessage",
            {"client": {"name": "x", "capabilities": {"sampling": {}}}},
            True,
        ),
        ("method:sampling/createMessage", {}, False),
    ],
)
def test_each_kind_of_item_matches_what_its_records_say(item: str, fields: dict, hit: bool) -> None:
    scan = RetireScan(item)
    scan.read_batches([[json.dumps(record("2026-12-01T00:00:00.000Z", "c", **fields)).encode()]])
    assert bool(scan.clients) is hit


def test_an_unknown_item_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "r.jsonl", MIXED)
    assert main(["report", str(source), "--retire", "websocket"]) == 2
    assert "unknown item 'websocket'" in capsys.readouterr().err


def test_a_hostile_client_name_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(
        tmp_path / "r.jsonl",
        [record("2026-12-01T00:00:00.000Z", "evil\x1b[2J<b>", transport="sse")],
    )
    assert main(["report", str(source), "--retire", "sse"]) == 1
    assert "\x1b" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("item", "requests"),
    [
        ("sse", 2),
        ("initialize", 2),
        ("version:2024-11-05", 1),
        ("method:sampling/createMessage", 0),
    ],
)
def test_fields_of_the_wrong_type_count_as_absent_never_a_crash(
    item: str, requests: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A hand-edited or foreign file: the report's aggregator reads a field of the wrong type as
    # absent, and the retire view reads the same lines (it raised AttributeError).
    odd = record(
        "2026-12-01T10:00:00.000Z",
        None,
        transport="sse",
        client="mcp-remote",
        protocol_version=5,
        user_agent=7,
    )
    named = record("2026-12-01T11:00:00.000Z", None, transport="sse", client={"name": 3})
    source = write(tmp_path / "r.jsonl", [odd, named])
    exit_code = main(["report", str(source), "--retire", item, "--format", "json"])
    found = json.loads(capsys.readouterr().out)
    assert (exit_code, found["requests"]) == (1 if requests else 0, requests)
    seen = {(c["client"]["name"], c["user_agent"]) for c in found["clients"]}
    assert seen <= {(None, None), (None, "agent/1")}


def test_the_html_page_and_its_section_decode_each_line_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import orjson

    source = write(tmp_path / "r.jsonl", MIXED)
    lines = len(source.read_bytes().splitlines())
    decoded: list[bytes] = []
    loads = orjson.loads

    def counting(data: Any) -> Any:
        decoded.append(data)
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting)
    args = ["report", str(source), "--retire", "sse", "--since", "2026-11-15", "--format", "html"]
    assert main(args) == 1
    monkeypatch.setattr(orjson, "loads", loads)
    assert len(decoded) == lines  # the aggregator's decode feeds the section's scan
    html = capsys.readouterr().out
    section = html[html.index('<section id="retire">') :]
    assert "mcp-remote" in section
    assert "old-agent" not in section  # before --since
