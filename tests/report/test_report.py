"""``python -m server report`` from the command line, every format rendering an empty report,
and the record builders the report's tests share (each module's own tests are in its file).

Records are built here from the schema in ``docs/records.md``; nothing opens a socket.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import server.cli.main as entry
from server.cli import serve as serve_command
from server.report.aggregate import Aggregator
from server.report.counters import Limits
from server.report.html import render_html
from server.report.json import render_json
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


# -- formats -------------------------------------------------------------------------------

HOSTILE = jsonl(
    request_record("tools/call", name="<script>alert(1)</script>", agent='"><img src=x>'),
    request_record("<b>m</b>|`x`", name="evil\x1b[31mred\u202e", version="1&2", agent="a|b"),
    *legacy_session_records("alpha", "alpha/1", "s1", ["tools/call"], {}),
)


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
