"""What the server tells about itself beyond its records: Prometheus metrics (:mod:`.metrics`)
and, with the ``otel`` extra, OpenTelemetry spans (:mod:`.tracing`).

Observers of the records and of the state other parts already hold: nothing on the request
path calls into them but the recorder's hand-over (:mod:`.observers`). Re-exports only.
"""

from server.observe.observers import record_observer

__all__ = ["record_observer"]
