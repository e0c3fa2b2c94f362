"""server.report.model: the per-feature view."""

from __future__ import annotations

import json

from server.report.json import render_json
from tests.report.test_report import (
    MODERN_ADVERTISED,
    aggregate,
    client,
    jsonl,
    legacy_session_records,
    modern_record,
    request_record,
)
from tests.report.test_views import call


def test_the_feature_view_names_who_used_discovered_and_skipped_each_feature() -> None:
    records = [
        # alpha lists tools and calls echo; lists prompts, never gets one.
        *legacy_session_records("alpha", "alpha/1", "s1", ["tools/list", "prompts/list"], {}),
        request_record("tools/call", name="alpha", version="1.0", agent="alpha/1", session_id="s1")
        | {"target": "echo", "outcome": "ok"},
        # curl calls a tool blind, and reads a templated resource.
        call("tools/call", "add", "ok", name=None, version=None, agent="curl/8"),
        call("resources/read", "doc://{id}", "ok", name=None, version=None, agent="curl/8"),
        # the inspector discovers, then listens.
        modern_record("server/discover", advertised=[*MODERN_ADVERTISED, "subscriptions/listen"]),
        modern_record("subscriptions/listen", streaming=True),
    ]
    report = aggregate(jsonl(*records))
    rows = {row.feature: row for row in report.features}
    alpha = client(report, "alpha").id
    curl = client(report, None, "curl/8").id
    inspector = client(report, "inspector").id
    assert rows["tools"].used_by == {alpha: 1, curl: 1}
    assert rows["tools"].used_without_discovery == [curl]
    assert rows["tool:echo"].used_by == {alpha: 1}
    assert rows["tool:add"].used_without_discovery == [curl]
    assert rows["prompts"].used_by == {}
    assert rows["prompts"].discovered_never_used == [alpha]
    assert rows["templates"].used_by == {curl: 1}
    assert rows["resources"].used_by == {}
    assert rows["listen"].used_by == {inspector: 1}
    assert rows["listen"].used_without_discovery == []
    # Completions were advertised to alpha (initialize): discovered, never used.
    assert rows["completions"].used_by == {}
    assert rows["logging"].used_by == {}
    # Each tool follows "tools", most called first, ties by name.
    assert list(rows)[:3] == ["tools", "tool:add", "tool:echo"]
    feature_names = [row["feature"] for row in json.loads(render_json(report))["features"]]
    for name in ("tools", "resources", "templates", "prompts", "completions"):
        assert name in feature_names
    for name in ("subscriptions", "logging", "listen"):
        assert name in feature_names


def test_a_listen_for_resource_updates_is_a_subscription() -> None:
    listen = modern_record("subscriptions/listen", streaming=True)
    listen["params"] = {"notifications": {"resourceSubscriptions": ["probe://readme"]}}
    report = aggregate(jsonl(listen))
    rows = {row.feature: row for row in report.features}
    assert rows["subscriptions"].used_by == {report.clients[0].id: 1}
