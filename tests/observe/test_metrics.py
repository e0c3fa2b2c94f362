"""/metrics through the whole app in process: what a known mix of requests is counted as, the
label values kept bounded, the networks it answers, and MCP_METRICS=false."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.app import serving
from tests.support.mcp_client import legacy_session, modern, modern_headers

pytestmark = pytest.mark.anyio

INFO = {"name": "metrics-test", "version": "1"}

serve = serving(records=[])


async def post(
    client: httpx.AsyncClient, method: str, params: dict[str, Any] | None = None
) -> httpx.Response:
    message = modern(method, params, client_info=INFO)
    headers = modern_headers(message)
    return await client.post("/mcp", content=json.dumps(message), headers=headers)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_a_known_mix_of_requests_is_counted_by_era_method_status_and_tool_outcome() -> None:
    async with serve() as (client, _):
        for _ in range(3):
            assert (await post(client, "tools/list")).status_code == 200
        for _ in range(2):
            assert (
                await post(client, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            ).status_code == 200
        await post(client, "tools/call", {"name": "no-such-tool", "arguments": {}})
        bad = await client.post(
            "/mcp", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert bad.status_code == 400
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    found = samples(response.text)
    ok = {"era": "modern", "status": "200", "outcome": "ok"}
    assert value(found, "mcp_requests_total", method="tools/list", **ok) == 3
    assert value(found, "mcp_requests_total", method="tools/call", **ok) == 2
    assert value(found, "mcp_tool_calls_total", tool="echo", outcome="ok") == 2
    # A name the catalog does not have is folded into "other", whatever the client sent.
    assert value(found, "mcp_tool_calls_total", tool="other", outcome="error") == 1
    assert not any(labels and ("tool", "no-such-tool") in labels for _, labels in found)
    assert value(found, "mcp_request_duration_seconds_count", method="tools/list") == 3
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in found.items()
        if name == "mcp_request_duration_seconds_bucket" and ("method", "tools/list") in labels
    )
    assert buckets[-1] == (float("inf"), 3)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    assert 0 < value(found, "mcp_request_duration_seconds_sum", method="tools/list") < 30
    assert (
        sum(
            v
            for (name, labels), v in found.items()
            if name == "mcp_requests_total" and ("status", "400") in labels
        )
        == 1
    )
    assert value(found, "mcp_open_streams", kind="listen") == 0
    assert value(found, "mcp_legacy_sessions") == 0


async def test_tool_outcomes_tell_is_error_and_crash_apart() -> None:
    # What a call came to is noted by the code that runs it (server.call_note): a crashing tool
    # answers with an isError result like a refusing one.
    async with serve() as (client, _):
        await post(client, "tools/call", {"name": "explode", "arguments": {}})
        await post(client, "tools/call", {"name": "echo", "arguments": {}})  # text missing
        await post(client, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        found = samples((await client.get("/metrics")).text)
    assert value(found, "mcp_tool_calls_total", tool="explode", outcome="crash") == 1
    assert value(found, "mcp_tool_calls_total", tool="echo", outcome="is_error") == 1
    assert value(found, "mcp_tool_calls_total", tool="echo", outcome="ok") == 1


def task_catalog() -> Catalog:
    catalog = Catalog("metrics-tasks", "0.0.1")

    @catalog.tool(task_support="optional")
    async def job() -> str:
        """Works as a task."""
        return "done"

    return catalog


async def test_task_calls_of_both_eras_name_their_tool_and_leave_metrics_scrapable(
    tmp_path: Path,
) -> None:
    # A task-augmented tools/call is answered by the task machinery, not the dispatcher: it
    # still names its tool (metrics and records), and the scrape after it answers 200 (a tool
    # label of None made every scrape a 500 until restart).
    path = tmp_path / "records.jsonl"
    settings = Settings(_env_file=None, records=["file"], records_file=str(path))
    app = create_app(settings, task_catalog())
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as client,
    ):
        tasks: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        message = modern("tools/call", {"name": "job", "arguments": {}}, capabilities=tasks)
        answered = await client.post(
            "/mcp", content=json.dumps(message), headers=modern_headers(message)
        )
        assert answered.json()["result"]["resultType"] == "task"
        session = await legacy_session(client)
        created = await session.call("tools/call", {"name": "job", "arguments": {}, "task": {}})
        assert "task" in created["result"]
        response = await client.get("/metrics")
        again = await client.get("/metrics")
    assert (response.status_code, again.status_code) == (200, 200)
    found = samples(response.text)
    assert value(found, "mcp_tool_calls_total", tool="job", outcome="ok") == 2
    records = [json.loads(line) for line in path.read_text().splitlines()]
    task_calls = [r for r in records if r["kind"] == "request" and r.get("task")]
    assert [(r["era"], r.get("target"), r.get("outcome")) for r in task_calls] == [
        ("modern", "job", "ok"),
        ("legacy", "job", "ok"),
    ]


async def test_a_tool_call_without_a_name_leaves_metrics_scrapable() -> None:
    async with serve() as (client, _):
        await post(client, "tools/call", {"arguments": {}})
        response = await client.get("/metrics")
    assert response.status_code == 200


async def test_method_labels_come_from_the_known_set() -> None:
    async with serve() as (client, _):
        for number in range(20):
            await post(client, f"made/up/{number}")
        found = samples((await client.get("/metrics")).text)
    methods = {dict(labels).get("method") for name, labels in found if name == "mcp_requests_total"}
    assert methods == {"other"}
    assert sum(v for (name, _), v in found.items() if name == "mcp_requests_total") == 20


async def test_what_counting_remembers_is_bounded_by_the_servers_own_names() -> None:
    # Counting looks a draft up by its raw values; a client's own method and tool names must
    # not each leave an entry behind (they share "other"), and the counts stay exact.
    async with serve() as (client, app):
        for number in range(300):
            await post(client, f"made/up/{number}")
            await post(client, "tools/call", {"name": f"tool-{number}", "arguments": {}})
        for _ in range(5):
            await post(client, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        found = samples((await client.get("/metrics")).text)
        remembered = len(app.metrics._cells)
    assert remembered < 10
    assert value(found, "mcp_tool_calls_total", tool="other", outcome="error") == 300
    assert value(found, "mcp_tool_calls_total", tool="echo", outcome="ok") == 5
    modern_404 = {"era": "modern", "method": "other", "status": "404", "outcome": "error"}
    assert value(found, "mcp_requests_total", **modern_404) == 300


async def test_refusals_are_counted_by_reason() -> None:
    digest = "sha256:" + hashlib.sha256(b"a token nobody sends").hexdigest()
    async with serve(auth="tokens", auth_tokens=[digest]) as (client, _):
        for _ in range(2):
            assert (await post(client, "tools/list")).status_code == 401
        found = samples((await client.get("/metrics")).text)
    assert value(found, "mcp_refusals_total", reason="auth") == 2
    limits = {"rate_limit_rps": 0.001, "rate_limit_burst": 1, "rate_limit_exempt": []}
    async with serve(**limits) as (client, _):
        statuses = [(await post(client, "tools/list")).status_code for _ in range(3)]
        found = samples((await client.get("/metrics")).text)
    assert statuses == [200, 429, 429]
    assert value(found, "mcp_refusals_total", reason="rate_limit") == 2


async def test_metrics_answer_only_the_configured_networks() -> None:
    async with serve(metrics_networks=["10.0.0.0/8"]) as (client, _):
        assert (await client.get("/metrics")).status_code == 404
    async with serve() as (client, _):
        assert (await client.get("/metrics")).status_code == 200
        # Through a proxy that is not trusted, the caller is unknown (every client of that
        # proxy looks like it, loopback here): refused, as the live report refuses it.
        for forwarded in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}):
            assert (await client.get("/metrics", headers=forwarded)).status_code == 404
        assert (await client.get("/metrics")).status_code == 200
    async with serve(trusted_proxies=["127.0.0.1"]) as (client, _):
        # Behind a trusted proxy on this host, the forwarded client is who asks.
        remote = await client.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
        assert remote.status_code == 404
        local = await client.get("/metrics", headers={"X-Forwarded-For": "127.0.0.1"})
        assert local.status_code == 200


async def test_metrics_off_means_no_path_and_no_counting() -> None:
    async with serve(metrics=False) as (client, app):
        await post(client, "tools/list")
        assert (await client.get("/metrics")).status_code == 404
        found = dict(
            ((name, frozenset(labels.items())), v) for name, labels, v in app.metrics.samples()
        )
    assert sum(v for (name, _), v in found.items() if name == "mcp_requests_total") == 0


def test_prometheus_client_is_imported_at_the_first_scrape_not_before() -> None:
    # A fresh interpreter: this one has the library already. An idle server nobody scrapes
    # does not hold it (2.9 MiB resident); requests are counted without it.
    script = """
import asyncio, json, sys
import httpx
from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.mcp_client import legacy_session, modern, modern_headers

catalog = Catalog("lazy", "0.0.1")

@catalog.tool
async def echo(text: str) -> str:
    return text

def loaded():
    return any(name.split(".")[0] == "prometheus_client" for name in sys.modules)

async def main():
    app = create_app(Settings(_env_file=None, records=[]), catalog)
    async with app.starlette.router.lifespan_context(app.starlette):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            message = modern("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            answer = await client.post(
                "/mcp", content=json.dumps(message), headers=modern_headers(message)
            )
            assert answer.status_code == 200, answer.text
            before = loaded()
            scraped = await client.get("/metrics")
            print(json.dumps([before, loaded(), scraped.status_code, scraped.text]))

asyncio.run(main())
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    before, after, status, text = json.loads(done.stdout.strip().splitlines()[-1])
    assert before is False
    assert after is True
    assert status == 200
    assert value(samples(text), "mcp_tool_calls_total", tool="echo", outcome="ok") == 1
