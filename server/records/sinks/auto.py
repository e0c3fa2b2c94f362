"""Where request records are written, chosen by name (``MCP_RECORDS``): the one place that
picks the sinks, as uvicorn's ``auto`` modules pick a protocol.

``file`` and ``stdout`` are in :mod:`server.records.sinks.file`; ``redis`` (a Redis stream,
:mod:`server.records.sinks.redis`) is imported only when named, so the ``redis`` package stays
optional; ``none`` writes nothing. What a sink is: :mod:`server.records.sinks.base`.
"""

from __future__ import annotations

from server.errors import ConfigurationError
from server.records.sinks.base import Sink
from server.records.sinks.file import JsonlFileSink, StdoutSink


def build_sinks(
    names: list[str],
    *,
    path: str,
    max_bytes: int,
    backups: int,
    compress: bool,
    redis_url: str = "",
    redis_key: str = "mcp:records",
    redis_maxlen: int = 1_000_000,
    redis_timeout_s: float = 2.0,
) -> list[Sink]:
    if len(set(names)) != len(names):
        raise ConfigurationError(f"MCP_RECORDS names a sink twice: {','.join(names)}")
    sinks: list[Sink] = []
    for name in names:
        if name == "file":
            sinks.append(
                JsonlFileSink(path, max_bytes=max_bytes, backups=backups, compress=compress)
            )
        elif name == "stdout":
            sinks.append(StdoutSink())
        elif name == "redis":
            sinks.append(_redis_sink(redis_url, redis_key, redis_maxlen, redis_timeout_s))
        elif name != "none":
            raise ConfigurationError(
                f"unknown record sink {name!r}: use file, stdout, redis or none in MCP_RECORDS"
            )
    return sinks


def _redis_sink(url: str, key: str, maxlen: int, timeout_s: float) -> Sink:
    if not url:
        raise ConfigurationError("MCP_RECORDS=redis needs MCP_REDIS_URL (redis://host:port/db)")
    try:
        from server.records.sinks.redis import RedisStreamSink
    except ImportError as missing:
        raise ConfigurationError(
            "MCP_RECORDS=redis needs the redis package: "
            "pip install redis (from a checkout: pip install -e '.[redis]')"
        ) from missing
    return RedisStreamSink(url, key=key, maxlen=maxlen, timeout_s=timeout_s)
