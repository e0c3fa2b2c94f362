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

from server import Catalog, Context
from server.app import create_app
from server.settings import Settings
from tests.support.mcp_client import (
    initialize,
    legacy,
    legacy_headers,
    modern,
    modern_headers,
    notification,
)

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


def streaming_catalog() -> Catalog:
    tools = Catalog("otel-stream-test", "0.0.1")

    @tools.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @tools.tool
    async def count(ctx: Context, steps: int = 2) -> str:
        """Reports progress before answering: the answer goes out as SSE."""
        for step in range(steps):
            await ctx.report_progress(step + 1, steps)
        return "counted"

    @tools.tool
    async def fail_late(ctx: Context) -> str:
        """Reports progress, then crashes: a streamed call whose outcome is a crash."""
        await ctx.report_progress(1, 2)
        raise RuntimeError("late")

    return tools


async def test_every_call_gets_its_spans_in_both_eras_json_or_sse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr("server.observe.tracing.default_provider", lambda: provider)
    app = create_app(Settings(_env_file=None, records=[], otel=True), streaming_catalog())
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    kinds = {}
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as client,
    ):
        for id_, name in ((1, "echo"), (2, "count"), (3, "fail_late")):
            body = modern(
                "tools/call",
                {"name": name, "arguments": {}}
                | ({"arguments": {"text": "x"}} if name == "echo" else {}),
                id_,
                client_info=INFO,
                progressToken=f"p{id_}",
            )
            sent = await client.post(
                "/mcp",
                content=json.dumps(body),
                headers=modern_headers(body, traceparent=traceparent),
            )
            kinds[("modern", name)] = sent.headers["content-type"].split(";")[0]
        opened = await client.post(
            "/mcp",
            content=json.dumps(initialize(client_info=INFO)),
            headers=legacy_headers(version=None),
        )
        session = opened.headers["mcp-session-id"]
        await client.post(
            "/mcp",
            content=json.dumps(notification("notifications/initialized")),
            headers=legacy_headers(session),
        )
        for id_, name in ((11, "echo"), (12, "count"), (13, "fail_late")):
            arguments = {"text": "x"} if name == "echo" else {}
            params = {"name": name, "arguments": arguments, "_meta": {"progressToken": f"l{id_}"}}
            sent = await client.post(
                "/mcp",
                content=json.dumps(legacy("tools/call", params, id_)),
                headers=legacy_headers(session, traceparent=traceparent),
            )
            kinds[("legacy", name)] = sent.headers["content-type"].split(";")[0]
    assert kinds == {
        (era, name): "application/json" if name == "echo" else "text/event-stream"
        for era in ("modern", "legacy")
        for name in ("echo", "count", "fail_late")
    }
    spans = exporter.get_finished_spans()
    calls = [span for span in spans if span.name.startswith("tools/call ")]
    tools = [span for span in spans if span.name.startswith("execute_tool ")]
    assert sorted(span.name for span in calls) == sorted(
        f"tools/call {name}" for name in ("echo", "count", "fail_late") * 2
    )
    assert sorted(span.name for span in tools) == sorted(
        f"execute_tool {name}" for name in ("echo", "count", "fail_late") * 2
    )
    by_id = {span.context.span_id: span for span in calls}
    for tool in tools:
        request = by_id[tool.parent.span_id]  # type: ignore[union-attr]
        assert request.name == "tools/call " + tool.name.removeprefix("execute_tool ")
        assert format(request.context.trace_id, "032x") == TRACE_ID
        assert request.attributes["mcp.client.name"] == "otel-test"  # type: ignore[index]
        assert request.start_time <= request.end_time  # type: ignore[operator]
        crashed = tool.name == "execute_tool fail_late"
        assert (tool.status.status_code.name == "ERROR") is crashed, tool.name
    streamed = [span for span in calls if span.name != "tools/call echo"]
    assert all(span.attributes["mcp.stream.end"] == "complete" for span in streamed)  # type: ignore[index]


def test_open_stream_spans_are_bounded_in_count() -> None:
    from server.observe.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    tracing.MAX_OPEN_STREAMS = 2
    for index in range(5):
        tracing.observe(
            {"kind": "request", "streaming": True, "request_id": f"r{index}", "method": "ping"}
        )
    assert len(tracing._streams) == 2
    ended = exporter.get_finished_spans()
    assert len(ended) == 3
    assert all(span.attributes["mcp.stream.unfinished"] is True for span in ended)  # type: ignore[index]
    for index in range(5):  # the ended ones' stream records find nothing, the rest end
        tracing.observe({"kind": "stream", "request_id": f"r{index}", "open_ms": 1.0})
    assert len(exporter.get_finished_spans()) == 5
    assert tracing._streams == {}
