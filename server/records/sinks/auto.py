"""Where request records are written, chosen by name (``MCP_RECORDS``): the one place that
picks the sinks, as uvicorn's ``auto`` modules pick a protocol.

``file`` and ``stdout`` are in :mod:`server.records.sinks.file`; ``redis`` (a Redis stream,
:mod:`server.records.sinks.redis`) is imported only when named, so the ``redis`` package stays
optional; ``none`` writes nothing. What a sink is: :mod:`server.records.sinks.base`.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import ConfigurationError
from server.records.sinks.base import Sink
from server.records.sinks.file import JsonlFileSink, StdoutSink


@dataclass(frozen=True, kw_only=True)
class SinkOptions:
    """What every sink may be built with, made once from the settings (``app/application.py``,
    ``sink_options``): a new sink's settings are fields here, not keywords along the way."""

    names: list[str]  # MCP_RECORDS
    path: str = "records/mcp-requests.jsonl"
    max_bytes: int = 64 * 1024 * 1024
    backups: int = 5
    compress: bool = True
    redis_url: str = ""
    redis_key: str = "mcp:records"
    redis_maxlen: int = 1_000_000
    redis_timeout_s: float = 2.0


def build_sinks(options: SinkOptions) -> list[Sink]:
    names = options.names
    if len(set(names)) != len(names):
        raise ConfigurationError(f"MCP_RECORDS names a sink twice: {','.join(names)}")
    sinks: list[Sink] = []
    for name in names:
        if name == "file":
            sinks.append(
                JsonlFileSink(
                    options.path,
                    max_bytes=options.max_bytes,
                    backups=options.backups,
                    compress=options.compress,
                )
            )
        elif name == "stdout":
            sinks.append(StdoutSink())
        elif name == "redis":
            sinks.append(_redis_sink(options))
        elif name != "none":
            raise ConfigurationError(
                f"unknown record sink {name!r}: use file, stdout, redis or none in MCP_RECORDS"
            )
    return sinks


def _redis_sink(options: SinkOptions) -> Sink:
    if not options.redis_url:
        raise ConfigurationError("MCP_RECORDS=redis needs MCP_REDIS_URL (redis://host:port/db)")
    try:
        from server.records.sinks.redis import RedisStreamSink
    except ImportError as missing:
        raise ConfigurationError(
            "MCP_RECORDS=redis needs the redis package: "
            "pip install redis (from a checkout: pip install -e '.[redis]')"
        ) from missing
    return RedisStreamSink(
        options.redis_url,
        key=options.redis_key,
        maxlen=options.redis_maxlen,
        timeout_s=options.redis_timeout_s,
    )
