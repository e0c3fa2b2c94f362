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

from server.records.sinks.base import BACKLOG_BYTES, BACKLOG_LINES, Backlog, SinkBacklogged

log = logging.getLogger(__name__)

FIELD = "r"
DELIVER_LINES = 1000  # backlog lines per pipeline when catching up
RETRY_S = 0.5
# Raised by the client for an unreachable, slow or refusing server.
FAULTS = (redis.RedisError, OSError)


class RedisStreamSink:
    name = "redis"

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
        self.key = key
        self.maxlen = maxlen
        self.retry_s = retry_s
        # No retries inside the client: one try per operation, bounded by the timeout; the
        # backlog is the retry.
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._backlog = Backlog(
            f"the Redis stream {key}", max_lines=backlog_lines, max_bytes=backlog_bytes
        )
        self._reachable: bool | None = None  # None: not tried yet
        self._error = ""
        self._retry_at = 0.0

    @property
    def backlog(self) -> int:
        """Lines kept, waiting for Redis."""
        return len(self._backlog)

    @property
    def shed(self) -> int:
        """Lines given up on, ever (backlog full, or undelivered at close)."""
        return self._backlog.shed

    def write(self, lines: list[bytes]) -> None:
        entries = [line[:-1] if line.endswith(b"\n") else line for line in lines]
        if self._deliver() and self._add(entries):
            return
        self._backlog.keep(entries)
        raise self._backlogged()

    def open(self) -> None:
        """Deliver the backlog, or check Redis answers; OSError (SinkBacklogged) if not."""
        if self._backlog:
            if not self._deliver():
                raise self._backlogged()
            return
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

    def close(self) -> None:
        self._retry_at = 0.0  # one last try, whatever the retry interval says
        if not self._deliver():
            lost = self._backlog.give_up()
            log.error(
                "request records: %d records could not be added to the Redis stream %s (%s)",
                lost,
                self.key,
                self._error,
            )
        self._client.close()

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

    def _deliver(self) -> bool:
        """The backlog to Redis, oldest first; True once it is empty."""
        while self._backlog:
            chunk = self._backlog.oldest(DELIVER_LINES)
            if not self._add(chunk):
                return False
            self._backlog.delivered(len(chunk))
        return True

    def _fault(self, failure: BaseException) -> None:
        self._reachable = False
        self._error = str(failure) or type(failure).__name__
        self._retry_at = time.monotonic() + self.retry_s

    def _backlogged(self) -> SinkBacklogged:
        return SinkBacklogged(
            f"Redis unreachable ({self._error}); {len(self._backlog)} records kept to add later"
        )
