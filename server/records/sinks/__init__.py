"""Where request records are written: what a sink is (:mod:`server.records.sinks.base`), the
file, stdout and Redis sinks, and the one place that picks them (:mod:`server.records.sinks.auto`).

Re-exports only, so ``from server.records.sinks import build_sinks`` keeps its short path.
"""

from server.records.sinks.auto import SinkOptions, build_sinks

__all__ = ["SinkOptions", "build_sinks"]
