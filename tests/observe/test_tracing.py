"""OpenTelemetry spans (the otel extra) through the whole app, with the SDK's in-memory
exporter: one per request and one per tool call, named and attributed after MCP's semantic
conventions, parented by the inbound traceparent; and nothing imported when it is off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.mcp_client import modern, modern_headers

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
INFO = {"name": "otel-test", "version": "2"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def catalog() -> Catalog:
    tools = Catalog("otel-test", "0.0.1")

    @tools.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    return tools


async def test_a_tool_call_makes_a_request_span_and_a_tool_span_under_the_callers_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr("server.observe.tracing.default_provider", lambda: provider)
    app = create_app(Settings(_env_file=None, records=[], otel=True), catalog())
    body = modern("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, 7, client_info=INFO)
    headers = modern_headers(body, traceparent=f"00-{TRACE_ID}-{PARENT_ID}-01")
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as client,
    ):
        response = await client.post("/mcp", content=json.dumps(body), headers=headers)
        assert response.status_code == 200
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"tools/call echo", "execute_tool echo"}
    request, tool = spans["tools/call echo"], spans["execute_tool echo"]
    assert request.kind == SpanKind.SERVER
    assert request.context is not None
    assert tool.context is not None
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert request.parent is not None
    assert format(request.parent.span_id, "016x") == PARENT_ID
    assert tool.parent is not None
    assert tool.parent.span_id == request.context.span_id
    assert request.attributes is not None
    assert request.attributes["mcp.method.name"] == "tools/call"
    assert request.attributes["gen_ai.tool.name"] == "echo"
    assert request.attributes["mcp.client.name"] == "otel-test"
    assert request.attributes["jsonrpc.request.id"] == "7"
    assert request.attributes["http.response.status_code"] == 200
    assert request.start_time is not None
    assert request.end_time is not None
    assert request.start_time <= request.end_time


def test_nothing_of_opentelemetry_is_imported_when_it_is_off() -> None:
    code = (
        "import sys\n"
        "from server.app import create_app\n"
        "from server.settings import Settings\n"
        "create_app(Settings(_env_file=None, records=[]))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
