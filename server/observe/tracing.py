"""OpenTelemetry spans for the requests, an optional extra (``MCP_OTEL=true``): nothing here
imports OpenTelemetry until it is turned on.

A span per request on the MCP endpoint and one per tool call under it, named after MCP's
semantic conventions, parented by the request's W3C ``traceparent`` (header or ``_meta``).
They are made from the finished record draft, the hand-over the records and the metrics take,
so the request path pays nothing more; an answer streamed as SSE gets its span from the
stream's records. The price: code inside a tool sees no current span. Export is the SDK's,
configured by the standard ``OTEL_*`` variables, or the tracer provider the host set up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from server.errors import ConfigurationError
from server.protocol import TOOLS_CALL

MISSING = (
    "MCP_OTEL=true needs OpenTelemetry: pip install opentelemetry-sdk "
    "opentelemetry-exporter-otlp-proto-http (from a checkout: pip install -e '.[otel]')"
)


def default_provider() -> Any:
    """The host's SDK tracer provider if it set one, else one exporting over OTLP/HTTP as the
    ``OTEL_*`` variables say, made the global one."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as missing:
        raise ConfigurationError(MISSING) from missing
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


class Tracing:
    """Turns each finished request into its spans: a draft (a request answered with JSON, or
    refused), or a streamed answer's two records (its request record when the stream opens,
    its stream record when it ends)."""

    # Streams whose span is open (started when the stream opened, ended when it ends): at most
    # this many; past it, the oldest is ended as it stands (``mcp.stream.unfinished``).
    MAX_OPEN_STREAMS = 4096

    def __init__(self, provider: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = provider.get_tracer("mcp-http-server")
        self.propagator = TraceContextTextMapPropagator()
        self.server_kind, self.internal_kind = SpanKind.SERVER, SpanKind.INTERNAL
        self.error_status = Status(StatusCode.ERROR)
        self._set_span_in_context = set_span_in_context
        # request id -> (the stream's request span, its method, its target, its start in ns),
        # oldest first.
        self._streams: dict[str, tuple[Any, str, Any, int]] = {}
        self._lock = threading.Lock()

    def observe(self, item: Any) -> None:
        if type(item) is dict:
            if item.get("kind") == "stream":
                self._stream_ended(item)
            elif item.get("streaming"):
                self._stream_opened(item)
            return
        method = item.method or "(unknown)"
        start = int(item.started * 1e9)
        ended = item.ended_clock if item.ended_clock is not None else time.perf_counter()
        end = start + int((ended - item.clock) * 1e9)
        attributes = _attributes(
            (
                ("mcp.session.id", item.session_id),
                ("mcp.protocol.version", item.body_version or item.header_version),
                ("mcp.client.name", item.client_name),
                ("mcp.client.version", item.client_version),
                ("client.address", item.client_address),
                ("http.response.status_code", item.status),
                ("jsonrpc.request.id", None if item.jsonrpc_id is None else str(item.jsonrpc_id)),
            )
        )
        span = self._start(
            method, item.target, item.traceparent, item.error_code, attributes, start
        )
        self._end(span, method, item.target, item.call_outcome(), start, end)

    def _start(
        self,
        method: str,
        target: Any,
        traceparent: str | None,
        error_code: Any,
        attributes: dict[str, Any],
        start: int,
    ) -> Any:
        """The request's span, started at ``start`` (ns since the epoch)."""
        parent = None
        if traceparent is not None:
            parent = self.propagator.extract({"traceparent": traceparent})
        attributes["mcp.method.name"] = method
        if error_code is not None:
            attributes["rpc.jsonrpc.error_code"] = error_code
            attributes["error.type"] = str(error_code)
        if method == TOOLS_CALL and isinstance(target, str):
            attributes["gen_ai.tool.name"] = target
        name = f"{method} {target}" if isinstance(target, str) else method
        span = self.tracer.start_span(
            name, context=parent, kind=self.server_kind, attributes=attributes, start_time=start
        )
        if error_code is not None:
            span.set_status(self.error_status)
        return span

    def _end(self, span: Any, method: str, target: Any, outcome: Any, start: int, end: int) -> None:
        """The tool call's span under the request's (a tool call's), then the request's end."""
        if method == TOOLS_CALL and isinstance(target, str):
            tool = self.tracer.start_span(
                f"execute_tool {target}",
                context=self._set_span_in_context(span),
                kind=self.internal_kind,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": target},
                start_time=start,
            )
            if outcome in ("crash", "is_error", "error"):
                tool.set_status(self.error_status)
            tool.end(end_time=end)
        span.end(end_time=end)

    def _stream_opened(self, record: dict[str, Any]) -> None:
        """A streamed answer's request record, handed over as its stream opens: its span
        starts (when the request came in) and stays open until the stream record comes."""
        method = record.get("method") or "(unknown)"
        target = record.get("target")
        client = record.get("client") or {}
        versions = record.get("protocol_version") or {}
        error = record.get("error")
        jsonrpc_id = record.get("jsonrpc_id")
        attributes = _attributes(
            (
                ("mcp.session.id", record.get("session_id")),
                ("mcp.protocol.version", versions.get("body") or versions.get("header")),
                ("mcp.client.name", client.get("name")),
                ("mcp.client.version", client.get("version")),
                ("client.address", record.get("client_address")),
                ("http.response.status_code", record.get("status")),
                ("jsonrpc.request.id", None if jsonrpc_id is None else str(jsonrpc_id)),
            )
        )
        start = time.time_ns() - int(record.get("duration_ms", 0) * 1e6)
        code = error.get("code") if isinstance(error, dict) else None
        span = self._start(method, target, record.get("traceparent"), code, attributes, start)
        with self._lock:
            self._streams.pop(record["request_id"], None)
            self._streams[record["request_id"]] = (span, method, target, start)
            if len(self._streams) <= self.MAX_OPEN_STREAMS:
                return
            oldest = next(iter(self._streams))
            left = self._streams.pop(oldest)[0]
        left.set_attribute("mcp.stream.unfinished", True)
        left.end()

    def _stream_ended(self, record: dict[str, Any]) -> None:
        """A stream's record, handed over as it ends: its span's end, with what the stream
        came to (a call's outcome, an error its last event carried)."""
        with self._lock:
            opened = self._streams.pop(record.get("request_id"), None)  # type: ignore[arg-type]
        if opened is None:
            return  # ended already (too many streams open at once)
        span, method, target, start = opened
        target = record.get("target") or target
        error = record.get("error")
        if isinstance(error, dict) and error.get("code") is not None:
            span.set_attribute("rpc.jsonrpc.error_code", error["code"])
            span.set_attribute("error.type", str(error["code"]))
            span.set_status(self.error_status)
        span.set_attribute("mcp.stream.end", str(record.get("end")))
        end = start + int(record.get("open_ms", 0) * 1e6)
        self._end(span, method, target, record.get("outcome"), start, end)


def _attributes(pairs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {name: value for name, value in pairs if value is not None}


def tracing_observer() -> Callable[[Any], None]:
    return Tracing(default_provider()).observe
