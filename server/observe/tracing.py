"""OpenTelemetry spans for the requests, an optional extra (``pip install
'mcp-http-server[otel]'``, ``MCP_OTEL=true``): nothing here imports OpenTelemetry until it is
turned on.

A span is made per request on the MCP endpoint and, under it, one per tool call, named after
MCP's semantic conventions (``{mcp.method.name} {target}``; ``execute_tool {gen_ai.tool.name}``)
with the method, tool, session, protocol version and client as attributes, parented by the
request's W3C ``traceparent`` (header or ``_meta``). They are made from the finished request's
record draft, with its start and end times, by the same hand-over the records and the metrics
take, so the request path pays nothing more. The price: a span is made when its request ends, so
code inside a tool sees no current span to parent its own, and a tool call's span has its
request's times.

Export is the OpenTelemetry SDK's, configured by the standard ``OTEL_*`` variables (read by the
SDK: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, ...)
with the OTLP/HTTP exporter; a tracer provider the host set up already
(``opentelemetry-instrument``, an embedding app) is used as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from server.errors import ConfigurationError

MISSING = "MCP_OTEL=true needs the otel extra: pip install 'mcp-http-server[otel]'"


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
    """Turns each finished request's draft into its spans."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = provider.get_tracer("mcp-http-server")
        self.propagator = TraceContextTextMapPropagator()
        self.server_kind, self.internal_kind = SpanKind.SERVER, SpanKind.INTERNAL
        self.error_status = Status(StatusCode.ERROR)
        self._set_span_in_context = set_span_in_context

    def observe(self, item: Any) -> None:
        if type(item) is dict:
            return  # a stream's records: its draft is the one traced, when the stream opens
        method = item.method or "(unknown)"
        target = item.target
        parent = None
        if item.traceparent is not None:
            parent = self.propagator.extract({"traceparent": item.traceparent})
        start = int(item.started * 1e9)
        ended = item.ended_clock if item.ended_clock is not None else time.perf_counter()
        end = start + int((ended - item.clock) * 1e9)
        attributes: dict[str, Any] = {"mcp.method.name": method}
        for name, value in (
            ("mcp.session.id", item.session_id),
            ("mcp.protocol.version", item.body_version or item.header_version),
            ("mcp.client.name", item.client_name),
            ("mcp.client.version", item.client_version),
            ("client.address", item.client_address),
            ("http.response.status_code", item.status),
            ("jsonrpc.request.id", None if item.jsonrpc_id is None else str(item.jsonrpc_id)),
        ):
            if value is not None:
                attributes[name] = value
        if item.error_code is not None:
            attributes["rpc.jsonrpc.error_code"] = item.error_code
            attributes["error.type"] = str(item.error_code)
        if method == "tools/call" and isinstance(target, str):
            attributes["gen_ai.tool.name"] = target
        name = f"{method} {target}" if isinstance(target, str) else method
        span = self.tracer.start_span(
            name, context=parent, kind=self.server_kind, attributes=attributes, start_time=start
        )
        if item.error_code is not None:
            span.set_status(self.error_status)
        if method == "tools/call" and isinstance(target, str):
            tool = self.tracer.start_span(
                f"execute_tool {target}",
                context=self._set_span_in_context(span),
                kind=self.internal_kind,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": target},
                start_time=start,
            )
            if item.call_outcome() in ("crash", "is_error", "error"):
                tool.set_status(self.error_status)
            tool.end(end_time=end)
        span.end(end_time=end)


def tracing_observer() -> Callable[[Any], None]:
    return Tracing(default_provider()).observe
