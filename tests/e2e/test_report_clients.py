"""The report over what real clients did: the official SDK client in both eras and curl-style
requests against a live server, then ``python -m server report --format json`` over its records.

The catalog has a tool that answers, one that fails with ``isError``, one that crashes, a
resource, a template and a prompt; the clients call them, read a resource that does not exist
and send a request with a bad header. The report must then have latencies, in order, for what
they called; the exact outcome counts per tool; the error codes with their names, on the method
that got them; the per-feature view; and no method of the other era in any client's "never
requested".
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import server.cli.main as entry
from server.app import create_app
from server.protocol import LEGACY_METHODS, MODERN_METHODS
from server.settings import Settings
from tests.support.app import make_catalog
from tests.support.live_server import ServerThread
from tests.support.mcp_client import modern, modern_headers

MODERN = "2026-07-28"
LEGACY_ONLY = set(LEGACY_METHODS) - set(MODERN_METHODS)
MODERN_ONLY = set(MODERN_METHODS) - set(LEGACY_METHODS)


async def legacy_client(url: str) -> None:
    info = types.Implementation(name="sdk-legacy", version="2.3.0")
    async with Client(f"{url}/mcp", mode="legacy", client_info=info) as client:
        await client.list_tools()
        for _ in range(3):
            await client.call_tool("echo", {"text": "hi"})
        for _ in range(2):
            assert (await client.call_tool("refuse", {})).is_error
        assert (await client.call_tool("explode", {})).is_error
        with pytest.raises(MCPError):
            await client.read_resource("test://missing")
        await client.read_resource("test://doc")
        await client.list_prompts()
        await client.get_prompt("greet", {"name": "Ada"})


async def modern_client(url: str) -> None:
    info = types.Implementation(name="sdk-modern", version="2.3.0")
    async with Client(f"{url}/mcp", mode=MODERN, client_info=info) as client:
        await client.session.send_discover(MODERN)
        await client.list_tools()
        for _ in range(2):
            await client.call_tool("echo", {"text": "hi"})
        assert (await client.call_tool("refuse", {})).is_error
        await client.read_resource("test://page/7")


def curl(url: str) -> None:
    """What a script with curl sends: no clientInfo, the headers by hand (one of them wrong)."""
    body = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    headers = modern_headers(body, accept="application/json", User_Agent="curl/8.5.0")
    with httpx.Client(base_url=url) as http:
        assert http.post("/mcp", json=body, headers=headers).status_code == 200
        wrong = {**headers, "Mcp-Name": "other"}
        assert http.post("/mcp", json=body, headers=wrong).status_code == 400


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON report over what the three clients did (the server stopped first, so every
    record is written)."""
    folder = tmp_path_factory.mktemp("report-clients")
    records = folder / "records.jsonl"
    settings = Settings(_env_file=None, records=["file"], records_file=str(records))
    server = ServerThread(create_app(settings, make_catalog("report-clients"))).start()
    try:
        anyio.run(legacy_client, server.url)
        anyio.run(modern_client, server.url)
        curl(server.url)
    finally:
        server.stop()
    out = folder / "report.json"
    assert entry.main(["report", str(records), "--format", "json", "--output", str(out)]) == 0
    document: dict[str, Any] = json.loads(out.read_text())
    return document


def clients_of(report: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The legacy SDK client, the modern one, the curl script."""
    by_label = {client["label"]: client for client in report["clients"]}
    [script] = [c for c in report["clients"] if c["user_agent"] == "curl/8.5.0"]
    return by_label["sdk-legacy"], by_label["sdk-modern"], script


def names(report: dict[str, Any]) -> dict[str, str]:
    legacy, modern, script = clients_of(report)
    return {legacy["id"]: "legacy", modern["id"]: "modern", script["id"]: "curl"}


def test_latencies_are_there_and_in_order(report: dict[str, Any]) -> None:
    legacy, modern, script = clients_of(report)
    for client in (legacy, modern, script):
        assert client["latency"]["tools/call"]["count"] >= 1
        for method, found in client["latency"].items():
            assert 0 <= found["p50"] <= found["p95"] <= found["p99"] <= found["max"], method
    assert legacy["latency"]["tools/call"]["count"] == 6
    # Both curl requests count: a refused one took its time too.
    assert report["totals"]["methods"]["tools/call"]["latency"]["count"] == 6 + 3 + 2
    for tool in report["tools"]:
        found = tool["latency"]
        assert found["p50"] <= found["p95"] <= found["p99"], tool["name"]


def test_outcomes_per_tool_are_exact(report: dict[str, Any]) -> None:
    ids = names(report)
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert tools["echo"]["calls"] == 3 + 2 + 1
    assert tools["echo"]["outcomes"]["ok"] == 3 + 2 + 1
    # curl's wrong header was refused before the tool was resolved.
    assert tools["(unresolved)"]["outcomes"]["error"] == 1
    assert tools["(unresolved)"]["error_codes"] == {
        "-32020": {"name": "Header mismatch", "count": 1}
    }
    assert tools["refuse"]["outcomes"] == {
        "ok": 0,
        "is_error": 3,
        "crash": 0,
        "error": 0,
        "input_required": 0,
        "unknown": 0,
    }
    assert tools["refuse"]["is_error_rate"] == 1.0
    assert tools["explode"]["outcomes"]["crash"] == 1
    assert tools["explode"]["crash_rate"] == 1.0
    by_client = {ids[use["client"]]: use["calls"] for use in tools["echo"]["clients"]}
    assert by_client == {"legacy": 3, "modern": 2, "curl": 1}
    resources = {(r["kind"], r["name"]): r for r in report["resources"]}
    assert resources["template", "test://page/{number}"]["outcomes"]["ok"] == 1
    assert resources["resource", "test://doc"]["outcomes"]["ok"] == 1
    [prompt] = report["prompts"]
    assert (prompt["name"], prompt["outcomes"]["ok"]) == ("greet", 1)


def test_errors_are_named_on_their_method(report: dict[str, Any]) -> None:
    ids = names(report)
    legacy, _, _ = clients_of(report)
    errors = {(row["method"], row["code"]): row for row in report["errors"]}
    missing = errors["resources/read", -32002]
    assert (missing["name"], missing["count"]) == ("Resource not found", 1)
    assert [ids[key] for key in missing["clients"]] == ["legacy"]
    assert errors["tools/call", -32020]["name"] == "Header mismatch"
    assert legacy["errors"]["names"]["-32002"] == "Resource not found"
    assert legacy["errors"]["by_method"]["resources/read"] == {"-32002": 1}


def test_the_feature_view(report: dict[str, Any]) -> None:
    ids = names(report)
    features = {row["feature"]: row for row in report["features"]}
    assert {ids[key] for key in features["tools"]["used_by"]} == {"legacy", "modern", "curl"}
    assert [ids[key] for key in features["tools"]["used_without_discovery"]] == ["curl"]
    assert {ids[key] for key in features["tool:refuse"]["used_by"]} == {"legacy", "modern"}
    assert [ids[key] for key in features["templates"]["used_by"]] == ["modern"]
    assert [ids[key] for key in features["prompts"]["used_by"]] == ["legacy"]
    assert [ids[key] for key in features["resources"]["used_without_discovery"]] == ["legacy"]
    # The catalog has no completions: nobody was told of them, nobody used them.
    assert (features["completions"]["used_by"], features["completions"]["discovered"]) == ({}, [])
    # The modern client was told of listen by discover, and never listened.
    assert [ids[key] for key in features["listen"]["discovered_never_used"]] == ["modern"]


def test_each_client_is_judged_by_its_own_era(report: dict[str, Any]) -> None:
    legacy, modern, script = clients_of(report)
    assert legacy["eras"] == {"legacy": legacy["requests"]}
    assert not MODERN_ONLY & set(legacy["advertised_never_requested"])
    assert "ping" in legacy["advertised_never_requested"]
    assert modern["eras"] == {"modern": modern["requests"]}
    assert not LEGACY_ONLY & set(modern["advertised_never_requested"])
    assert not LEGACY_ONLY & set(script["advertised_never_requested"])
    assert script["advertised"]["source"] == "input"
