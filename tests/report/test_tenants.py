"""``python -m server report --by-tenant``: the traffic split by tenant, bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from server.cli.main import main
from server.report import tenants
from server.report.tenants import TenantScan


def record(tenant: str | None, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": "2026-12-01T10:00:00.000Z",
        "method": "tools/call",
        "target": "search",
        "status": 200,
        "error": None,
        "duration_ms": 5.0,
        "subject": "alice",
    }
    if tenant is not None:
        base["tenant"] = tenant
    base.update(fields)
    return base


def test_the_report_splits_requests_errors_latency_callers_and_tools_by_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "r.jsonl"
    rows = [
        record("acme", duration_ms=1.0),
        record("acme", duration_ms=9.0, subject="bob", target="fetch"),
        record("acme", status=403, error={"code": -32001, "message": "no"}),
        record("globex"),
        record(None),
        {"v": 1, "kind": "stream", "time": "2026-12-01T10:00:00.000Z", "tenant": "acme"},
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(source), "--by-tenant", "--format", "json"]) == 0
    view = {row["tenant"]: row for row in json.loads(capsys.readouterr().out)["tenants"]}
    assert set(view) == {"acme", "globex", "(none)"}
    acme = view["acme"]
    assert (acme["requests"], acme["errors"]) == (3, 1)
    assert acme["callers"] == ["alice", "bob"]
    assert acme["tools"] == {"search": 2, "fetch": 1}
    assert acme["p50_ms"] == 5.0
    assert main(["report", str(source), "--by-tenant", "--tenant", "globex"]) == 0
    text = capsys.readouterr().out
    assert "globex: 1 requests" in text
    assert "acme" not in text


def test_tenants_past_the_bound_count_as_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tenants, "MAX_TENANTS", 3)
    scan = TenantScan()
    scan.read_batches([[json.dumps(record(f"t{n}")).encode() for n in range(10)]])
    view = {row["tenant"]: row["requests"] for row in scan.to_json()["tenants"]}
    assert len(view) == 4
    assert view["(other)"] == 7
    assert sum(view.values()) == 10


def test_tenant_without_by_tenant_is_a_usage_error(tmp_path: Path) -> None:
    source = tmp_path / "r.jsonl"
    source.write_text("")
    assert main(["report", str(source), "--tenant", "acme"]) == 2
