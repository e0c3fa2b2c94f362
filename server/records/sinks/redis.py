"""The Redis stream record sink: every replica adds its request records to one stream.

Used from the recorder's writer thread, with the synchronous client: each batch is one
``MULTI`` of ``XADD key MAXLEN ~ maxlen * r <line>``, so the stream keeps about ``maxlen``
records and ``python -m server report redis://...`` reads them back. Redis being away loses
nothing that fits in memory: a failed batch joins a bounded backlog (past it the oldest lines
are shed and counted), the sink raises :class:`~server.records.sinks.base.SinkBacklogged`,
and the next write or the recorder's probe delivers the backlog first; after a failure it
waits ``retry_s`` before trying again. Delivery is at least once.
"""

from __future__ import annotations

import logging
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from server.records.sinks.base import BACKLOG_BYTES, BACKLOG_LINES, RETRY_S, RetryingSink

log = logging.getLogger(__name__)

FIELD = "r"
# Raised by the client for an unreachable, slow or refusing server.
FAULTS = (redis.RedisError, OSError)


class RedisStreamSink(RetryingSink):
    name = "redis"
    verb = "add"

    def __init__(
        self,
        url: str,
        *,
        key: str,
        maxlen: int,
        timeout_s: float,
        backlog_lines: int = BACKLOG_LINES,
        backlog_bytes: int = BACKLOG_BYTES,
        retry_s: float = RETRY_S,
    ) -> None:
        super().__init__(
            f"the Redis stream {key}",
            backlog_lines=backlog_lines,
            backlog_bytes=backlog_bytes,
            retry_s=retry_s,
        )
        self.key = key
        self.maxlen = maxlen
        # No retries inside the client: one try per operation, bounded by the timeout; the
        # backlog is the retry.
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._reachable: bool | None = None  # None: not tried yet

    # -- what RetryingSink asks of it --------------------------------------------------------

    def _entries(self, lines: list[bytes]) -> list[bytes]:
        return [line[:-1] if line.endswith(b"\n") else line for line in lines]

    def _send(self, lines: list[bytes]) -> tuple[int, bool]:
        return (len(lines), True) if self._add(lines) else (0, False)

    def _reach(self) -> None:
        """Check Redis answers; OSError if not."""
        if self._reachable:
            return
        if time.monotonic() >= self._retry_at:
            try:
                self._client.ping()
            except FAULTS as failure:
                self._fault(failure)
            else:
                self._reachable = True
                return
        raise OSError(f"Redis unreachable ({self._error})")

    def _release(self) -> None:
        self._client.close()

    def _lost_to(self) -> str:
        return f"added to the Redis stream {self.key}"

    def _why(self) -> str:
        return f"Redis unreachable ({self._error})"

    # -- internals -----------------------------------------------------------------------------

    def _add(self, entries: list[bytes]) -> bool:
        """One pipeline for ``entries``; False (the fault noted) if Redis did not take them."""
        if time.monotonic() < self._retry_at:
            return False
        try:
            pipe = self._client.pipeline(transaction=True)
            for entry in entries:
                pipe.xadd(self.key, {FIELD: entry}, maxlen=self.maxlen, approximate=True)
            pipe.execute()
        except FAULTS as failure:
            self._fault(failure)
            return False
        self._reachable = True
        self._retry_at = 0.0
        return True

    def _fault(self, failure: BaseException) -> None:
        super()._fault(failure)
        self._reachable = False
