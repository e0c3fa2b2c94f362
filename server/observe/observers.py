"""Which observers hear each request record, chosen once at start-up: the Prometheus metrics
(:mod:`server.observe.metrics`), the OpenTelemetry spans (:mod:`server.observe.tracing`, with
the ``otel`` extra), both, or none (:func:`record_observer`, the recorder's hand-over)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.observe.metrics import Metrics


def record_observer(metrics: Metrics | None, tracing: bool) -> Callable[[Any], None] | None:
    """What the recorder tells of every record it is handed: the metrics (None: off), the
    spans (``tracing``: imports OpenTelemetry, or refuses to start without the extra)."""
    if not tracing:
        return None if metrics is None else metrics.observe
    from server.observe.tracing import tracing_observer

    trace = tracing_observer()
    if metrics is None:
        return trace
    count = metrics.observe

    def both(item: Any) -> None:
        count(item)
        trace(item)

    return both
