"""server.report.json: the report as JSON, with stable keys."""

from __future__ import annotations

import json

from server.report.json import render_json, to_json
from tests.report.test_report import (
    MIXED,
    aggregate,
    jsonl,
    request_record,
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
