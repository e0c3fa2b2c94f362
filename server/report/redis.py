"""Request records from a Redis stream (``MCP_RECORDS=redis``), for ``python -m server report``.

A source is ``redis://[[user]:password@]host:port/db`` (``rediss://`` for TLS), optionally with
``#key``. The stream is read oldest first in pages up to the newest entry there was at the
start, each entry's ``r`` field one record line (none: malformed). Failing to reach Redis, or a
key that is no stream, is an ``OSError`` before anything is read; losing Redis midway, one from
the batches. :class:`StreamTail` follows the stream for the live report (``XREAD BLOCK``, in a
thread); Redis going away only pauses it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

FIELD = b"r"
NO_FIELD = b"(stream entry without an r field)"
BATCH = 10_000
TIMEOUT_S = 10.0
MAX_SEQUENCE = (1 << 64) - 1


def parse_source(source: str, default_key: str) -> tuple[str, str, str]:
    """(url to connect to, stream key, name for the report: the url without its password);
    ValueError for a port that is not a number."""
    url, _, fragment = source.partition("#")
    key = unquote(fragment) or default_key
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return url, key, f"{parts.scheme}://{host}{port}{parts.path}#{key}"


def open_stream(
    url: str, key: str, *, batch: int | None = None, timeout_s: float = TIMEOUT_S
) -> Iterator[list[bytes]]:
    """The stream's record lines in batches (of :data:`BATCH`); OSError now if it cannot be
    read at all."""
    client = redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )
    try:
        kind = as_bytes(client.type(key))
        newest = client.xrevrange(key, count=1) if kind == b"stream" else None
    except (redis.RedisError, OSError) as failure:
        client.close()
        raise OSError(str(failure) or type(failure).__name__) from failure
    if kind != b"stream" or not newest:
        client.close()
        if kind == b"stream":
            return iter(())  # an empty stream: an empty report
        # Like a file that is not there: a mistyped key must not pass for "no records".
        if kind == b"none":
            raise OSError(f"no stream at key {key!r}")
        raise OSError(f"key {key!r} holds a {kind.decode(errors='replace')}, not a stream")
    return _batches(client, key, as_bytes(newest[0][0]), batch or BATCH)


def _batches(client: redis.Redis, key: str, last: bytes, batch: int) -> Iterator[list[bytes]]:
    start: bytes | str = "-"
    try:
        while True:
            entries = client.xrange(key, min=start, max=last, count=batch) or []
            if entries:
                yield [as_bytes((fields or {}).get(FIELD, NO_FIELD)) for _, fields in entries]
            if len(entries) < batch or as_bytes(entries[-1][0]) == last:
                return
            start = after(as_bytes(entries[-1][0]))
    except (redis.RedisError, OSError) as failure:
        raise OSError(f"reading the stream stopped: {failure}") from failure
    finally:
        client.close()


def as_bytes(value: bytes | str | None) -> bytes:
    """What the client returns, as bytes (it returns bytes: responses are not decoded)."""
    if isinstance(value, str):
        return value.encode()
    return value or b""


def after(entry_id: bytes) -> str:
    """The smallest stream id after ``entry_id`` (XRANGE's own ``(`` needs Redis 6.2)."""
    millis, _, sequence = entry_id.decode().partition("-")
    if int(sequence) == MAX_SEQUENCE:
        return f"{int(millis) + 1}-0"
    return f"{millis}-{int(sequence) + 1}"


class StreamTail:
    """A daemon thread handing each batch of new record lines of ``key`` to ``feed``."""

    def __init__(
        self,
        url: str,
        key: str,
        feed: Callable[[Sequence[bytes]], None],
        *,
        block_ms: int = 500,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.key = key
        self.feed = feed
        self.block_ms = block_ms
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s + block_ms / 1000,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-report-tail", daemon=True)
        # "$" until the first entry is read: only what is added from now on.
        self.last: bytes | str = "$"

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._client.close()

    def _run(self) -> None:
        away = False
        while not self._stop.is_set():
            try:
                if self.last == "$":
                    newest: Any = self._client.xrevrange(self.key, count=1)
                    self.last = as_bytes(newest[0][0]) if newest else b"0-0"
                found: Any = self._client.xread(
                    {self.key: self.last}, count=BATCH, block=self.block_ms
                )
            except (redis.RedisError, OSError) as failure:
                if not away:
                    log.warning("the live report cannot read the records stream: %s", failure)
                    away = True
                self._stop.wait(1.0)
                continue
            if away:
                log.warning("the live report reads the records stream again")
                away = False
            for _, entries in found or ():
                if entries:
                    self.last = as_bytes(entries[-1][0])
                    self.feed(
                        [as_bytes((fields or {}).get(FIELD, NO_FIELD)) for _, fields in entries]
                    )
