"""What a call came to, in its records: ``target``, ``outcome``, and a stream's ``error`` and
``ttfb_ms`` (docs/records.md), through the whole app in both eras.

The app runs in process (``httpx.ASGITransport``) with its lifespan, so the Recorder's writer
thread writes the file sink; leaving the lifespan writes everything still queued.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from server import Catalog, Context
from server.call_note import CALL_NOTE, note_outcome, note_target, noted
from server.records.draft import Draft
from tests.support.app import make_catalog, serving
from tests.support.mcp_client import (
    LEGACY_VERSION,
    initialize,
    legacy,
    legacy_headers,
    modern,
    modern_headers,
)

pytestmark = pytest.mark.anyio

LEGACY = LEGACY_VERSION
INFO = {"name": "fields-test", "version": "1"}
ELICIT: dict[str, Any] = {"elicitation": {"form": {}}}
CALL_METHODS = ("tools/call", "prompts/get", "resources/read")


def call_fields_catalog() -> Catalog:
    """The shared test catalog, with a tool that streams progress and a prompt that crashes."""
    catalog = make_catalog("call-fields", "0.0.1")

    @catalog.tool
    async def slow(ctx: Context) -> str:
        """Streams progress before its result."""
        await asyncio.sleep(0.02)
        await ctx.report_progress(1, 2, "half")
        await asyncio.sleep(0.02)
        return "done"

    @catalog.prompt()
    def broken(name: str) -> str:
        """A prompt that crashes."""
        raise RuntimeError("prompt boom")

    return catalog


serve = serving(call_fields_catalog)


async def modern_call(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    progress: bool = False,
    capabilities: dict[str, Any] | None = None,
) -> httpx.Response:
    meta = {"progressToken": "p"} if progress else {}
    message = modern(method, params, capabilities=capabilities, client_info=INFO, **meta)
    headers = modern_headers(message, accept="application/json, text/event-stream")
    return await client.post("/mcp", content=json.dumps(message), headers=headers)


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def calls(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["method"], r.get("target"), r.get("outcome"), (r["error"] or {}).get("code"))
        for r in records
        if r["kind"] == "request"
    ]


async def test_each_outcome_is_recorded_with_its_target(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        await modern_call(client, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        await modern_call(client, "tools/call", {"name": "refuse", "arguments": {}})
        await modern_call(client, "tools/call", {"name": "explode", "arguments": {}})
        await modern_call(client, "tools/call", {"name": "nope", "arguments": {}})
        await modern_call(client, "prompts/get", {"name": "greet", "arguments": {"name": "a"}})
        await modern_call(client, "prompts/get", {"name": "broken", "arguments": {"name": "a"}})
        await modern_call(client, "resources/read", {"uri": "test://doc"})
        await modern_call(client, "resources/read", {"uri": "test://page/7"})
        await modern_call(client, "resources/read", {"uri": "test://missing"})
        asked = await modern_call(client, "tools/call", {"name": "ask"}, capabilities=ELICIT)
        assert asked.json()["result"]["resultType"] == "input_required"
    assert calls(records_of(path)) == [
        ("tools/call", "echo", "ok", None),
        ("tools/call", "refuse", "is_error", None),
        ("tools/call", "explode", "crash", None),
        ("tools/call", "nope", "error", -32602),
        ("prompts/get", "greet", "ok", None),
        ("prompts/get", "broken", "crash", -32603),
        ("resources/read", "test://doc", "ok", None),
        ("resources/read", "test://page/{number}", "ok", None),
        ("resources/read", None, "error", -32602),
        ("tools/call", "ask", "input_required", None),
    ]


async def test_a_streamed_call_has_its_outcome_and_first_message_time_on_its_stream_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "records.jsonl"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        response = await modern_call(client, "tools/call", {"name": "slow"}, progress=True)
        assert response.headers["content-type"].startswith("text/event-stream")
    request, ended = records_of(path)
    assert (request["kind"], request["streaming"]) == ("request", True)
    # Written when the stream opened: the outcome was not known yet.
    assert (request["target"], request["outcome"]) == ("slow", None)
    assert ended["kind"] == "stream"
    assert (ended["target"], ended["outcome"], ended["error"]) == ("slow", "ok", None)
    assert 15 <= ended["ttfb_ms"] <= ended["open_ms"]


async def test_legacy_calls_are_recorded_the_same(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        opening = initialize(LEGACY, client_info={"name": "legacy-fields", "version": "1"})
        headers = legacy_headers(version=None, accept="application/json")
        opened = await client.post("/mcp", content=json.dumps(opening), headers=headers)
        headers = legacy_headers(opened.headers["mcp-session-id"], LEGACY, "application/json")
        failing: list[tuple[str, dict[str, Any]]] = [
            ("tools/call", {"name": "refuse", "arguments": {}}),
            ("tools/call", {"name": "explode", "arguments": {}}),
            ("resources/read", {"uri": "test://missing"}),
        ]
        for number, (method, params) in enumerate(failing, 1):
            message = legacy(method, params, number)
            await client.post("/mcp", content=json.dumps(message), headers=headers)
    found = [c for c in calls(records_of(path)) if c[0] in CALL_METHODS]
    assert found == [
        ("tools/call", "refuse", "is_error", None),
        ("tools/call", "explode", "crash", None),
        ("resources/read", None, "error", -32002),
    ]


async def test_other_methods_carry_no_call_fields(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        message = modern("tools/list", client_info=INFO)
        headers = modern_headers(message, accept="application/json")
        await client.post("/mcp", content=json.dumps(message), headers=headers)
    [record] = records_of(path)
    assert "target" not in record
    assert "outcome" not in record


def test_notes_go_to_the_current_draft_only() -> None:
    # Outside a request nothing is noted, and nothing fails.
    note_target("x")
    note_outcome("ok")
    assert noted({"isError": True}) == {"isError": True}
    draft = Draft("POST", "/mcp", None, None, None)
    token = CALL_NOTE.set(draft)
    try:
        note_target("t" * 500)
        note_outcome("crash")
        noted({"isError": True})  # a crash stays a crash
    finally:
        CALL_NOTE.reset(token)
    assert draft.target == "t" * 200
    assert draft.outcome == "crash"
