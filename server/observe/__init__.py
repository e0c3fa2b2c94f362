"""What the server tells about itself beyond its records: Prometheus metrics (:mod:`.metrics`)
and, with the ``otel`` extra, OpenTelemetry spans (:mod:`.tracing`).

Observers of the records and of the state other parts already hold: nothing on the request
path calls into them but the recorder's hand-over (:func:`record_observer`).
"""

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
