"""Retiring on purpose, over a real uvicorn: each kind of item deprecated (headers, records),
then retired (410 problem details before authentication), and what real clients see.

The HTTP+SSE transport retired: the official SDK's ``sse_client`` and ``mcp-remote
--transport sse-only`` get the 410 and report it, while the same clients on Streamable HTTP
are unaffected.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from server import create_app
from server.security.auth import token_digest as digest
from server.settings import Settings
from tests.e2e.test_sse_clients import mcp_remote
from tests.support.live_server import ServerThread
from tests.support.mcp_client import (
    initialize,
    legacy,
    modern,
    modern_headers,
    sse_messages_blocking,
)
from tests.support.polling import wait_until_blocking

pytestmark = pytest.mark.slow

TOKEN = "retire-test-token-0123456789abcdef"
SUNSET_PAST = "2026-01-01"
SUNSET_FUTURE = "2030-01-01"
LINK = "https://example.com/migrate"


def brownout_now() -> str:
    now = datetime.now(UTC)
    start, end = now - timedelta(minutes=1), now + timedelta(hours=1)
    return f"{start:%Y-%m-%dT%H:%M}Z/{end:%Y-%m-%dT%H:%M}Z"


class Running:
    def __init__(self, thread: ServerThread, records: Path) -> None:
        self.thread = thread
        self.url = thread.url
        self.records_file = records

    def records(self) -> list[dict[str, Any]]:
        lines = self.records_file.read_text().splitlines() if self.records_file.exists() else []
        return [json.loads(line) for line in lines]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[ServerThread] = []

    def start(*entries: dict[str, Any], auth: bool = False, **extra: Any) -> Running:
        records = tmp_path / f"records-{len(started)}.jsonl"
        options: dict[str, Any] = {"auth": "tokens", "auth_tokens": [digest(TOKEN)]} if auth else {}
        settings = Settings(
            catalog="probe",
            retire=json.dumps(list(entries)),
            records=["file"],
            records_file=str(records),
            records_flush_ms=10,
            **options,
            **extra,
        )
        thread = ServerThread(create_app(settings)).start()
        started.append(thread)
        return Running(thread, records)

    yield start
    for thread in started:
        thread.stop()


def wait_for_records(running: Running, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        found[:] = [r for r in running.records() if r.get("kind") == "request"]
        return len(found) >= count

    wait_until_blocking(enough)
    return found


def problem_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 410, response.text
    assert response.headers["content-type"] == "application/problem+json"
    details: dict[str, Any] = response.json()
    assert details["status"] == 410
    return details


def post_modern(url: str, method: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
    message = modern(method, params, **kw)
    return httpx.post(f"{url}/mcp", json=message, headers=modern_headers(message), timeout=10)


# -- the HTTP+SSE transport ------------------------------------------------------------------


def test_sse_before_its_sunset_carries_the_headers_and_the_record_names_it(serve: Any) -> None:
    running = serve({"item": "sse", "sunset": SUNSET_FUTURE, "link": LINK})
    with httpx.stream("GET", f"{running.url}/sse", timeout=10) as stream:
        assert stream.status_code == 200
        assert stream.headers["deprecation"].startswith("@")
        assert stream.headers["sunset"] == "Tue, 01 Jan 2030 00:00:00 GMT"
        assert f"<{LINK}>" in stream.headers["link"]
    unaffected = post_modern(running.url, "tools/list")
    assert unaffected.status_code == 200
    assert "deprecation" not in unaffected.headers
    assert "sunset" not in unaffected.headers
    records = wait_for_records(running, 2)
    by_verb = {record["verb"]: record for record in records}
    assert by_verb["GET"]["retiring"] == "sse"
    assert "retiring" not in by_verb["POST"]


def test_sse_after_its_sunset_is_gone_before_authentication(serve: Any) -> None:
    running = serve(
        {"item": "sse", "sunset": SUNSET_PAST, "successor": "https://mcp.example.com/mcp"},
        auth=True,
    )
    gone = problem_of(httpx.get(f"{running.url}/sse", timeout=10))  # no token: still 410
    assert gone["item"] == "sse"
    assert gone["brownout"] is False
    assert gone["successor"] == "https://mcp.example.com/mcp"
    posted = httpx.post(f"{running.url}/messages?session_id=abc", json=legacy("ping"), timeout=10)
    assert problem_of(posted)["item"] == "sse"
    fallback = httpx.get(f"{running.url}/mcp", headers={"Accept": "text/event-stream"}, timeout=10)
    assert problem_of(fallback)["item"] == "sse"
    # Streamable HTTP is unaffected: without a token it is the usual 401.
    assert post_modern(running.url, "tools/list").status_code == 401
    records = wait_for_records(running, 4)
    retired = [r for r in records if r.get("outcome") == "retired"]
    assert len(retired) == 3
    assert {r["retiring"] for r in retired} == {"sse"}
    assert all(r["status"] == 410 for r in retired)


@pytest.mark.anyio
async def test_the_sdk_sse_client_reports_the_410_of_a_brownout(serve: Any) -> None:
    running = serve({"item": "sse", "sunset": SUNSET_FUTURE, "brownouts": [brownout_now()]})
    with pytest.raises(BaseException) as refused:  # noqa: PT011 - the SDK wraps it in a group
        async with Client(sse_client(f"{running.url}/sse", timeout=10), mode="legacy"):
            pass
    assert "410" in describe(refused.value), describe(refused.value)
    # The same SDK on Streamable HTTP is unaffected.
    async with Client(streamable_http_client(f"{running.url}/mcp"), mode="legacy") as client:
        tools = await client.list_tools()
        assert any(tool.name == "echo" for tool in tools.tools)


def describe(error: BaseException) -> str:
    """An exception with its causes and the members of its groups, as one text."""
    parts = [repr(error)]
    for inner in getattr(error, "exceptions", ()):
        parts.append(describe(inner))
    if error.__cause__ is not None:
        parts.append(describe(error.__cause__))
    return " | ".join(parts)


def test_mcp_remote_sse_only_reports_the_410(serve: Any, tmp_path: Path) -> None:
    running = serve({"item": "sse", "sunset": SUNSET_PAST})
    node, script = mcp_remote()
    finished = subprocess.run(
        [node, script, f"{running.url}/sse", "--transport", "sse-only"],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,  # it exits non-zero: what it said is the test
        env={"MCP_REMOTE_CONFIG_DIR": str(tmp_path / "auth"), "PATH": "/usr/bin:/bin"},
    )
    said = (finished.stdout + finished.stderr).decode(errors="replace")
    assert "410" in said, said[-2000:]


# -- a protocol version, the era, a method, a client feature ---------------------------------


def test_a_deprecated_version_is_told_on_its_sessions_requests(serve: Any) -> None:
    running = serve({"item": "version:2025-03-26", "sunset": SUNSET_FUTURE})
    url = f"{running.url}/mcp"
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    opened = httpx.post(url, json=initialize("2025-03-26"), headers=headers, timeout=10)
    assert opened.status_code == 200
    assert "sunset" in opened.headers
    session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
    listed = httpx.post(url, json=legacy("tools/list"), headers=session, timeout=10)
    assert listed.status_code == 200  # no version header
    assert "deprecation" in listed.headers
    newer = httpx.post(url, json=initialize("2025-11-25"), headers=headers, timeout=10)
    assert newer.status_code == 200
    assert "deprecation" not in newer.headers


def test_a_retired_version_is_never_negotiated_and_its_header_is_gone(serve: Any) -> None:
    running = serve({"item": "version:2024-11-05", "sunset": SUNSET_PAST}, auth=True)
    url = f"{running.url}/mcp"
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
    }
    opened = httpx.post(url, json=initialize("2024-11-05"), headers=headers, timeout=10)
    assert opened.status_code == 200
    assert opened.json()["result"]["protocolVersion"] == "2025-11-25"
    stale = {"Content-Type": "application/json", "MCP-Protocol-Version": "2024-11-05"}
    details = problem_of(httpx.post(url, json=legacy("ping"), headers=stale, timeout=10))
    assert "2024-11-05" not in details["supported_versions"]
    assert "2025-11-25" in details["supported_versions"]


def test_a_retired_era_answers_initialize_with_410_before_authentication(serve: Any) -> None:
    running = serve({"item": "initialize", "sunset": SUNSET_PAST}, auth=True)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    gone = httpx.post(f"{running.url}/mcp", json=initialize(), headers=headers, timeout=10)
    assert problem_of(gone)["supported_versions"] == ["2026-07-28"]
    message = modern("tools/list")
    authorized = {**modern_headers(message), "Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{running.url}/mcp", json=message, headers=authorized).status_code == 200


def test_a_method_is_told_then_gone_and_others_are_unaffected(serve: Any) -> None:
    deprecated = serve({"item": "method:prompts/list", "sunset": SUNSET_FUTURE})
    assert "deprecation" in post_modern(deprecated.url, "prompts/list").headers
    assert "deprecation" not in post_modern(deprecated.url, "tools/list").headers
    retired = serve({"item": "method:prompts/list", "sunset": SUNSET_PAST}, auth=True)
    assert problem_of(post_modern(retired.url, "prompts/list"))["item"] == "method:prompts/list"
    assert post_modern(retired.url, "tools/list").status_code == 401  # no token: the usual 401


def test_a_retired_client_feature_is_no_longer_asked_for(serve: Any) -> None:
    feature = {"item": "method:elicitation/create", "sunset": SUNSET_FUTURE}
    told = serve(feature)
    asked = post_modern(
        told.url,
        "tools/call",
        {"name": "ask_name", "arguments": {}},
        capabilities={"elicitation": {}},
    )
    assert asked.status_code == 200
    assert "deprecation" in asked.headers
    assert asked.json()["result"]["resultType"] == "input_required"
    gone = serve({**feature, "sunset": SUNSET_PAST})
    refused = post_modern(
        gone.url,
        "tools/call",
        {"name": "ask_name", "arguments": {}},
        capabilities={"elicitation": {}},
    )
    body = refused.json()
    assert "error" in body
    assert body["error"]["code"] == -32021, body


def test_a_session_that_takes_warnings_is_told_once_on_its_get_stream(serve: Any) -> None:
    running = serve({"item": "version:2025-06-18", "sunset": SUNSET_FUTURE, "notify": True})
    url = f"{running.url}/mcp"
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    opened = httpx.post(url, json=initialize("2025-06-18"), headers=headers, timeout=10)
    session = {
        **headers,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-06-18",
    }
    told: list[dict[str, Any]] = []
    with httpx.stream("GET", url, headers={**session, "Accept": "text/event-stream"}) as stream:
        assert stream.status_code == 200
        for _ in range(2):
            listed = httpx.post(url, json=legacy("tools/list"), headers=session, timeout=10)
            assert listed.status_code == 200
        for message in sse_messages_blocking(stream):
            told.append(message)
            if message.get("method") == "notifications/message":
                break
    warning = told[-1]["params"]
    assert warning["level"] == "warning"
    assert "Protocol version 2025-06-18 is deprecated" in warning["data"]
    runtime = running.thread.app.legacy.runtimes.peek(opened.headers["mcp-session-id"])
    assert runtime is not None
    assert runtime.retirements_told == {"version:2025-06-18"}  # told once, not per request


def test_readyz_and_metrics_show_each_retirement(serve: Any) -> None:
    running = serve(
        {"item": "sse", "sunset": SUNSET_PAST},
        {"item": "method:roots/list", "sunset": SUNSET_FUTURE},
    )
    ready = httpx.get(f"{running.url}/readyz", timeout=10).json()
    phases = {entry["item"]: entry["phase"] for entry in ready["retirements"]}
    assert phases == {"sse": "retired", "method:roots/list": "deprecated"}
    metrics = httpx.get(f"{running.url}/metrics", timeout=10).text
    assert 'mcp_retirement_retired{item="sse"} 1.0' in metrics
    assert 'mcp_retirement_retired{item="method:roots/list"} 0.0' in metrics


def test_the_live_report_shows_who_still_uses_a_retiring_item(serve: Any) -> None:
    running = serve({"item": "sse", "sunset": SUNSET_FUTURE}, report_live=True)
    with httpx.stream("GET", f"{running.url}/sse", headers={"User-Agent": "old-agent/1"}) as one:
        assert one.status_code == 200
    assert post_modern(running.url, "tools/list").status_code == 200
    view: dict[str, Any] = {}

    def seen() -> bool:
        answer = httpx.get(f"{running.url}/admin/report?retire=sse&format=json", timeout=10)
        view.update(answer.json())
        return bool(view.get("clients"))

    wait_until_blocking(seen)
    assert view["item"] == "sse"
    assert [c["user_agent"] for c in view["clients"]] == ["old-agent/1"]
    page = httpx.get(f"{running.url}/admin/report?retire=sse", timeout=10).text
    assert '<section id="retire">' in page
