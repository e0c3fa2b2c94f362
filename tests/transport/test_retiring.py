"""The retirement checks without sockets: which requests an item affects, the headers on their
answers, the WARNING once per client and day, and client features switched off."""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from server.records.draft import Draft
from server.retirement.plan import parse_plan
from server.retirement.wire import Retired
from server.transport.retiring import Retiring
from tests.support.app import serve
from tests.support.mcp_client import modern, modern_headers

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)


def retiring(*entries: dict[str, Any], now: datetime = NOW) -> Retiring:
    return Retiring(parse_plan(json.dumps(list(entries)), NOW), now=lambda: now)


def draft(name: str | None = "agent") -> Draft:
    made = Draft("POST", "/mcp", "agent/1", "127.0.0.1", None)
    made.client_name = name
    return made


def test_only_requests_that_use_the_item_are_marked() -> None:
    checks = retiring({"item": "method:prompts/list", "sunset": "2027-01-01"})
    marked, other = draft(), draft()
    checks.check(marked, era="modern", method="prompts/list")
    checks.check(other, era="modern", method="tools/list")
    assert marked.retiring == "method:prompts/list"
    assert other.retiring is None


def test_a_retired_item_raises_with_the_outcome_recorded() -> None:
    checks = retiring({"item": "initialize", "sunset": "2026-12-01"})
    refused = draft()
    with pytest.raises(Retired):
        checks.check(refused, era="legacy", method="tools/list")
    assert refused.outcome == "retired"
    assert refused.retiring == "initialize"


@pytest.mark.anyio
async def test_the_headers_go_on_an_affected_answer_only() -> None:
    checks = retiring({"item": "sse", "sunset": "2027-01-01"})
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    start = {"type": "http.response.start", "status": 200, "headers": []}
    affected, unaffected = draft(), draft()
    checks.check(affected, sse=True)
    await checks.headers_on(send, affected)(start)
    await checks.headers_on(send, unaffected)(start)
    assert {name for name, _ in sent[0]["headers"]} == {b"deprecation", b"sunset"}
    assert sent[1]["headers"] == []


def test_one_warning_per_client_item_and_day(caplog: pytest.LogCaptureFixture) -> None:
    clock = [NOW]
    checks = Retiring(
        parse_plan(json.dumps([{"item": "sse", "sunset": "2027-01-01"}]), NOW),
        now=lambda: clock[0],
    )
    with caplog.at_level(logging.WARNING, logger="server.retirement"):
        for _ in range(3):
            checks.check(draft("a"), sse=True)
        checks.check(draft("b"), sse=True)
        clock[0] = NOW + timedelta(days=1)
        checks.check(draft("a"), sse=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "server.retirement"]
    assert len(lines) == 3
    assert "client a" in lines[0]
    assert "uses sse" in lines[0]


def test_a_retired_client_feature_is_taken_out_of_the_declared_capabilities() -> None:
    deprecated = retiring({"item": "method:sampling/createMessage", "sunset": "2027-01-01"})
    declared: dict[str, Any] = {"sampling": {}, "roots": {}}
    assert deprecated.without_retired_features(declared) is declared
    marked = draft()
    deprecated.check(marked, capabilities=declared)  # told, never refused
    assert marked.retiring == "method:sampling/createMessage"
    retired = retiring({"item": "method:sampling/createMessage", "sunset": "2026-12-01"})
    assert retired.without_retired_features(declared) == {"roots": {}}
    retired.check(draft(), capabilities=declared)  # a feature is switched off, not a 410


def test_one_warning_a_day_for_a_client_with_a_very_long_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checks = retiring({"item": "sse", "sunset": "2027-01-01"})
    with caplog.at_level(logging.WARNING, logger="server.retirement"):
        for _ in range(3):
            checks.check(draft("n" * 600), sse=True)
    assert len([r for r in caplog.records if r.name == "server.retirement"]) == 1


def test_the_record_names_the_capabilities_the_handlers_see() -> None:
    from server.jsonrpc import decode

    retired = retiring({"item": "method:sampling/createMessage", "sunset": "2026-12-01"})
    body = modern("tools/list", capabilities={"sampling": {}, "roots": {}})
    message = decode(json.dumps(body).encode())
    described = draft()
    described.describe(message)
    retired.check_message(described, message, "modern", None)
    assert described.client_capabilities == {"roots": {}}


@pytest.mark.anyio
async def test_a_retiring_post_is_described_and_its_era_chosen_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import server.transport.endpoint

    calls: list[str] = []
    describe, choose = Draft.describe, server.transport.endpoint.choose_era

    def counted_describe(self: Draft, message: Any) -> None:
        calls.append("describe")
        describe(self, message)

    def counted_choose(message: Any, headers: Any) -> Any:
        calls.append("choose_era")
        return choose(message, headers)

    monkeypatch.setattr(Draft, "describe", counted_describe)
    monkeypatch.setattr(server.transport.endpoint, "choose_era", counted_choose)
    plan = json.dumps([{"item": "method:prompts/list", "sunset": "2099-01-01"}])
    async with serve(retire=plan) as (client, _):
        body = modern("prompts/list", client_info={"name": "agent", "version": "1"})
        answer = await client.post("/mcp", json=body, headers=modern_headers(body))
    assert answer.status_code == 200
    assert "deprecation" in answer.headers
    assert sorted(calls) == ["choose_era", "describe"]
