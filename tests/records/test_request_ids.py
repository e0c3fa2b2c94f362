"""Request ids and trace context through the whole app: the id in the response header, the
record and every log line of the request; a trusted proxy's X-Request-Id kept, anyone else's
not; a W3C traceparent (header or ``_meta``) kept in the record."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.logs import JsonFormatter, RequestFields
from server.settings import Settings
from tests.support.mcp_client import modern, modern_headers

pytestmark = pytest.mark.anyio

INFO = {"name": "ids-test", "version": "1"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def catalog() -> Catalog:
    tools = Catalog("ids-test", "0.0.1")

    @tools.tool
    async def explode() -> str:
        """Crashes."""
        raise RuntimeError("boom")

    @tools.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    return tools


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The server's JSON log lines (server.logs' formatter and request fields), captured."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RequestFields())
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)


def message(method: str, params: dict[str, Any], meta: dict[str, Any] | None = None) -> bytes:
    return json.dumps(modern(method, params, client_info=INFO, **(meta or {}))).encode()


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    return modern_headers({"method": method, "params": {"name": name}}, **extra)


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def run(
    path: Path, requests: list[tuple[bytes, dict[str, str]]], **overrides: Any
) -> tuple[list[httpx.Response], list[dict[str, Any]]]:
    settings = Settings(_env_file=None, records=["file"], records_file=str(path), **overrides)
    app = create_app(settings, catalog())
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as client,
    ):
        responses = [
            await client.post("/mcp", content=body, headers=sent) for body, sent in requests
        ]
    return responses, read_records(path)


async def test_a_crashing_tools_log_line_leads_to_its_record_and_its_response(
    tmp_path: Path, json_log: io.StringIO
) -> None:
    calls = [
        (
            message("tools/call", {"name": "echo", "arguments": {"text": "a"}}),
            headers("tools/call", "echo"),
        ),
        (
            message("tools/call", {"name": "explode", "arguments": {}}),
            headers("tools/call", "explode"),
        ),
        (
            message("tools/call", {"name": "echo", "arguments": {"text": "b"}}),
            headers("tools/call", "echo"),
        ),
    ]
    responses, records = await run(tmp_path / "records.jsonl", calls)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    crash = next(line for line in lines if "explode" in line["message"] and "exception" in line)
    by_id = {record["request_id"]: record for record in records}
    assert by_id[crash["request_id"]]["params"]["name"] == "explode"
    assert responses[1].headers["x-request-id"] == crash["request_id"]
    # Each response names its own record.
    assert [r.headers["x-request-id"] for r in responses] == [r["request_id"] for r in records]
    assert len(set(by_id)) == 3


async def test_an_inbound_request_id_is_kept_only_from_a_trusted_proxy(tmp_path: Path) -> None:
    call = message("tools/list", {})
    sent = [
        (call, headers("tools/list", **{"X-Request-Id": "lb-7f3a9c2e-0001"})),
        (call, headers("tools/list", **{"X-Request-Id": "bad id with spaces"})),
        (call, headers("tools/list", **{"X-Request-Id": "x" * 129})),
    ]
    responses, records = await run(tmp_path / "trusted.jsonl", sent, trusted_proxies=["127.0.0.1"])
    assert responses[0].headers["x-request-id"] == "lb-7f3a9c2e-0001"
    assert records[0]["request_id"] == "lb-7f3a9c2e-0001"
    for response, record in zip(responses[1:], records[1:], strict=True):
        assert len(response.headers["x-request-id"]) == 16  # one of the server's own
        assert record["request_id"] == response.headers["x-request-id"]
    # Without a trusted proxy, a client cannot choose its id (it could take another's).
    responses, records = await run(tmp_path / "direct.jsonl", sent[:1])
    assert responses[0].headers["x-request-id"] != "lb-7f3a9c2e-0001"
    assert records[0]["request_id"] == responses[0].headers["x-request-id"]


async def test_traceparent_from_the_header_or_meta_is_kept_in_the_record(tmp_path: Path) -> None:
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    sent = [
        (message("tools/list", {}), headers("tools/list", traceparent=TRACEPARENT)),
        (message("tools/list", {}, {"traceparent": other}), headers("tools/list")),
        (
            message("tools/list", {}, {"traceparent": other}),
            headers("tools/list", traceparent=TRACEPARENT),
        ),
        (
            message("tools/list", {}),
            headers("tools/list", traceparent="00-" + "0" * 32 + "-00f067aa0ba902b7-01"),
        ),
        (message("tools/list", {}, {"traceparent": "garbage"}), headers("tools/list")),
        (message("tools/list", {}), headers("tools/list")),
    ]
    _, records = await run(tmp_path / "trace.jsonl", sent)
    assert [record.get("traceparent") for record in records] == [
        TRACEPARENT,
        other,
        TRACEPARENT,  # the header's wins
        None,  # an all-zero trace id is invalid
        None,
        None,
    ]


@pytest.mark.parametrize("trusted", [True, False])
def test_a_trusted_proxys_request_id_is_kept_under_uvicorn_with_x_forwarded_for(
    tmp_path: Path, trusted: bool
) -> None:
    """As the shipped nginx sends it: X-Forwarded-For and X-Request-Id together, to a real
    uvicorn (which must not hide the proxy by rewriting the client first)."""
    from tests.support.live_server import ServerThread

    path = tmp_path / "records.jsonl"
    settings = Settings(
        _env_file=None,
        records=["file"],
        records_file=str(path),
        trusted_proxies=["127.0.0.1"] if trusted else [],
    )
    server = ServerThread(create_app(settings, catalog())).start()
    try:
        sent = headers(
            "tools/list", **{"X-Request-Id": "nginx-0123abcd", "X-Forwarded-For": "203.0.113.9"}
        )
        answer = httpx.post(f"{server.url}/mcp", content=message("tools/list", {}), headers=sent)
    finally:
        server.stop()
    assert answer.status_code == 200
    (record,) = read_records(path)
    if trusted:
        assert answer.headers["x-request-id"] == "nginx-0123abcd"
        assert record["request_id"] == "nginx-0123abcd"
        assert record["client_address"] == "203.0.113.9"
    else:
        assert answer.headers["x-request-id"] != "nginx-0123abcd"
        assert record["request_id"] == answer.headers["x-request-id"]
        assert record["client_address"] == "127.0.0.1"
