"""Abuse limits per client: a request rate (token buckets) and counters of open streams and
legacy sessions, with the 429 errors that answer them.

A client is a key (:func:`client_key`: the subject, else the address, IPv6 by its /64), so one
client over its limits is refused while others go on. Memory is bounded: at most ``max_keys``
buckets (least recently used first, a refilled bucket dropped as soon as seen), and counters
keep only keys with something open. Loop-only, no locks. Every refusal is 429 with -32000 and
``data`` naming the limit; :class:`RateLimited` carries ``retry_after`` for ``Retry-After``.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType
from typing import ClassVar

from server.errors import McpError, retry_after_header
from server.memo import BoundedMemo

LIMIT_EXCEEDED = -32000


class RateLimited(McpError):
    code = LIMIT_EXCEEDED
    status = 429

    def __init__(self, retry_after: float) -> None:
        seconds = retry_after_header(retry_after)
        super().__init__(
            f"Too many requests; retry after {seconds} s",
            {"limit": "rate", "retryAfter": int(seconds)},
        )
        self.retry_after = retry_after


class TooManyStreams(McpError):
    code = LIMIT_EXCEEDED
    status = 429


class TooManySessions(McpError):
    code = LIMIT_EXCEEDED
    status = 429


class TooManyPending(McpError):
    """An HTTP+SSE session has as many requests running as it may
    (``MCP_SSE_TRANSPORT_MAX_PENDING``): its POST is refused until one ends."""

    code = LIMIT_EXCEEDED
    status = 429


def client_key(subject: str | None, address: str | None) -> str:
    """The key limits are counted by: the authenticated subject, else the client address (an
    IPv6 address by its /64, which one host is usually given whole)."""
    if subject:
        return "sub:" + subject
    if address is None:
        return "addr:unknown"
    if ":" not in address and len(address) <= _IPV4_CHARS:  # IPv4, the usual case: no parsing
        return "addr:" + address
    key = _ADDRESS_KEYS.get(address)
    if key is None:
        key = _ADDRESS_KEYS.remember(address, "addr:" + _network_of(address))
    return key


_ADDRESS_KEYS: BoundedMemo[str, str] = BoundedMemo(4096)
_IPV4_CHARS = 15


def _network_of(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]  # not an address (a forwarded header's word): its own key, clipped
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class RateLimiter:
    """Token buckets per key: ``rate`` requests per second, bursts of up to ``burst``.

    ``rate == 0`` turns the limiter off (everything is allowed and nothing is stored).
    """

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate < 0 or burst < 1 or max_keys < 1:
            raise ValueError("rate >= 0, burst >= 1 and max_keys >= 1 are required")
        self.rate = float(rate)
        self.burst = float(burst)
        self.max_keys = max_keys
        self._clock = clock
        # key -> (tokens, when); least recently used first.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, key: str, cost: float = 1.0) -> float | None:
        """Take ``cost`` tokens from ``key``'s bucket: None if allowed, else the seconds until
        it would be (a refused request takes nothing)."""
        if self.rate == 0:
            return None
        now = self._clock()
        self._drop_full(now)
        tokens, when = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - when) * self.rate)
        if tokens >= cost:
            tokens -= cost
            refused = None
        else:
            refused = (cost - tokens) / self.rate
        self._buckets[key] = (tokens, now)  # most recently used now
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return refused

    def check(self, key: str, cost: float = 1.0) -> None:
        """:meth:`allow`, raising :class:`RateLimited` when refused."""
        retry_after = self.allow(key, cost)
        if retry_after is not None:
            raise RateLimited(retry_after)

    def _drop_full(self, now: float) -> None:
        # The oldest buckets first: once one has refilled it is the same as no bucket at all.
        # Each bucket is dropped at most once, so this costs O(1) per call on average.
        while self._buckets:
            key, (tokens, when) = next(iter(self._buckets.items()))
            if tokens + (now - when) * self.rate < self.burst:
                return
            del self._buckets[key]


class Slot:
    """One unit held in a :class:`ClientCounter`; :meth:`release` is idempotent."""

    __slots__ = ("_counter", "key", "released", "shared")

    def __init__(self, counter: ClientCounter, key: str) -> None:
        self._counter = counter
        self.key = key
        self.released = False
        # Its lease in Redis, given back with it (server.security.shared_limits), if any.
        self.shared: Callable[[], None] | None = None

    @property
    def counter(self) -> ClientCounter:
        return self._counter

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._counter._release(self.key)
            if self.shared is not None:
                self.shared()

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


class ClientCounter:
    """How many of something (streams, sessions) each client holds, capped at ``limit``.

    :meth:`acquire` returns a :class:`Slot` or raises the counter's error; use it as a context
    manager (``with counter.acquire(key):``), or keep it with what it counts (a session) and
    call ``release()`` when that ends; a second release does nothing, so counts never go
    negative and never leak past the slot. ``limit == 0`` means no limit (still counted).
    """

    error: ClassVar[type[McpError]] = McpError
    what: ClassVar[str] = "items"

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self._counts: dict[str, int] = {}

    def count(self, key: str) -> int:
        return self._counts.get(key, 0)

    def __len__(self) -> int:
        return len(self._counts)

    def acquire(self, key: str) -> Slot:
        held = self._counts.get(key, 0)
        if self.limit and held >= self.limit:
            raise self.refusal()
        self._counts[key] = held + 1
        return Slot(self, key)

    def refusal(self) -> McpError:
        """The error a client past this counter's limit gets (429)."""
        return self.error(
            f"Too many open {self.what} for this client (limit {self.limit})",
            {"limit": self.what, "max": self.limit},
        )

    def _release(self, key: str) -> None:
        held = self._counts.get(key, 0) - 1
        if held > 0:
            self._counts[key] = held
        else:
            self._counts.pop(key, None)


class StreamCounter(ClientCounter):
    """Open SSE streams per client (``MCP_MAX_STREAMS_PER_CLIENT``)."""

    error = TooManyStreams
    what = "streams"


class SessionCounter(ClientCounter):
    """Legacy-era sessions per client (``MCP_MAX_SESSIONS_PER_CLIENT``)."""

    error = TooManySessions
    what = "sessions"
