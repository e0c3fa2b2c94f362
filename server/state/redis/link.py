"""The one connection to Redis that shared state goes through, and what losing it means.

:class:`RedisLink` owns the asyncio client: every operation is bounded (socket timeouts, an
outer deadline, one quick retry for a pooled connection gone stale) and every failure becomes
:class:`~server.errors.ServiceUnavailable` (503 with a JSON-RPC error, never a hang or a 500).
Redis unreachable marks the link lost (readiness fails; when it is back the bus resyncs);
Redis answering with an error reply fails the command only, so one bad command never takes
the replica out of rotation. A stall is bounded by ``timeout_s`` both ways: an operation fails
at that deadline, retry included, and readiness turns false once the monitor's ping (every
quarter of it) is three quarters late (:attr:`RedisLink.answering`); each change is one log
line. The ``redis`` package is imported only in the Redis modules (an optional extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ConstantBackoff
from redis.exceptions import DataError, RedisError, ResponseError

from server.aio import stop_task
from server.errors import ServiceUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

PING_CONNECTED_S = 5.0
PING_LOST_S = 1.0


def redis_failure(failure: BaseException) -> bool:
    """Whether ``failure`` came from Redis (unreachable, or refusing a command), not a bug of
    ours."""
    return isinstance(failure, RedisError | OSError | TimeoutError)


def command_refused(failure: BaseException) -> bool:
    """Whether ``failure`` is one command failing on a working connection: Redis answered
    with an error reply, or the client refused to send the arguments."""
    return isinstance(failure, ResponseError | DataError)


class CommandRefused(ServiceUnavailable):
    """Redis answered a command with an error; the connection is fine (503, not a lost link)."""


class RedisLink:
    def __init__(self, url: str, *, prefix: str, timeout_s: float) -> None:
        self.prefix = prefix
        # This process among the replicas sharing Redis: its bus messages, its streams' copies
        # and the ids of its requests to clients name it.
        self.replica = secrets.token_hex(8)
        self.timeout_s = timeout_s
        self.client: Redis = Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(ConstantBackoff(0.02), 1),
            # Unbounded pools grow a connection per concurrent request during a burst.
            max_connections=256,
        )
        self.connected = False
        self.ever_connected = False
        # For the log: where Redis is, never the URL (it may hold a password).
        address = urlsplit(url)
        self.where = f"{address.hostname or address.path}:{address.port or 6379}"
        self.last_error: str | None = "not connected yet"
        self.lost_at: float | None = None
        self._reconnect_listeners: list[Callable[[], None]] = []
        self._monitor: asyncio.Task[None] | None = None
        self.refused = 0  # commands Redis answered with an error, ever
        self.last_refusal: str | None = None
        self._ping_since: float | None = None  # when the monitor's ping now out was sent

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    async def run(self, operation: Awaitable[T]) -> T:
        """Await a Redis operation; any Redis failure becomes 503 (ServiceUnavailable): an
        error reply as :class:`CommandRefused` (the link stays connected), anything else
        as Redis lost."""
        try:
            # One deadline for the whole operation, its retry included: a 503 comes within
            # MCP_REDIS_TIMEOUT_S (the socket timeout alone would allow it twice).
            async with asyncio.timeout(self.timeout_s):
                result = await operation
        except Exception as failure:
            if not redis_failure(failure):
                raise
            if command_refused(failure):
                self.command_failed(failure)
                raise CommandRefused(
                    "Shared state refused the operation (Redis answered with an error); "
                    "retry shortly",
                    retry_after=PING_LOST_S,
                ) from None
            self.lost(failure)
            raise ServiceUnavailable(
                "Shared state is unavailable (Redis does not answer); retry shortly",
                retry_after=PING_LOST_S,
            ) from None
        self.seen()
        return result

    def command_failed(self, failure: BaseException) -> None:
        """A command got an error reply: logged and counted; Redis did answer, so it is seen."""
        self.refused += 1
        self.last_refusal = f"{type(failure).__name__}: {failure}"
        log.error("Redis refused a command (%s); the operation fails", self.last_refusal)
        if not isinstance(failure, DataError):  # DataError: refused before it was sent
            self.seen()

    def lost(self, failure: BaseException) -> None:
        if self.connected:
            log.error(
                "Redis at %s is unreachable (%s); shared-state requests get 503",
                self.where,
                failure,
            )
        elif not self.ever_connected and self.lost_at is None:
            log.error(
                "Redis at %s is unreachable at start (%s); shared-state requests get 503 "
                "until it answers",
                self.where,
                failure,
            )
        self.connected = False
        self.last_error = f"{type(failure).__name__}: {failure}" if str(failure) else repr(failure)
        if self.lost_at is None:
            self.lost_at = time.monotonic()

    def seen(self) -> None:
        if self.connected:
            return
        was_lost = self.lost_at is not None
        self.connected = self.ever_connected = True
        self.last_error = None
        self.lost_at = None
        if not was_lost:
            return  # the first connection: nothing was missed
        log.warning("Redis at %s answers again; shared state is back", self.where)
        for listener in list(self._reconnect_listeners):
            try:
                listener()
            except Exception:
                log.exception("a Redis reconnect listener failed")

    def on_reconnect(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (it must not block) each time Redis answers after an outage."""
        self._reconnect_listeners.append(listener)

    def _ping_late_s(self) -> float:
        """How long the monitor's ping has been out past three quarters of the timeout (0:
        none out, or not late)."""
        since = self._ping_since
        if since is None:
            return 0.0
        return max(0.0, time.monotonic() - since - self.timeout_s * 0.75)

    @property
    def answering(self) -> bool:
        """Connected, and not stalled: a ping that has had three quarters of the timeout
        without an answer says Redis stalled before any operation times out (readiness)."""
        return self.connected and not self._ping_late_s()

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"connected": self.connected}
        if self.last_error is not None:
            status["error"] = self.last_error
        elif self.connected and not self.answering:
            status["error"] = "Redis has not answered a ping for %.1f s" % (
                time.monotonic() - (self._ping_since or 0.0)
            )
        if self.refused:
            status["refused_commands"] = self.refused
            status["last_refusal"] = self.last_refusal
        return status

    def start(self) -> None:
        if self._monitor is None:
            self._monitor = asyncio.create_task(self._watch(), name="redis-monitor")

    async def _watch(self) -> None:
        while True:
            self._ping_since = time.monotonic()
            with contextlib.suppress(ServiceUnavailable):
                await self.run(self.client.ping())
            self._ping_since = None
            # Connected: often enough that a stall shows within the timeout (answering).
            connected_s = min(PING_CONNECTED_S, self.timeout_s / 4)
            await asyncio.sleep(connected_s if self.connected else PING_LOST_S)

    async def close(self) -> None:
        if self._monitor is not None:
            await stop_task(self._monitor)
            self._monitor = None
        with contextlib.suppress(Exception):
            await self.client.aclose()
