"""Quotas per tenant and tool: at most N calls of a tool by a tenant's callers in a window,
whichever replica serves them.

``MCP_QUOTAS`` names them (:func:`server.settings_checks.quotas`); ``*`` matches any tenant or
tool, and every quota that matches a call is charged (one Redis round trip for all of them: a
script over their keys). Windows are fixed, aligned on the epoch, so every replica counts into
the same key. A call over a quota is refused before it runs with :class:`QuotaExceeded` (429,
``Retry-After`` until the window ends). Where Redis cannot count, ``MCP_QUOTA_ON_REDIS_FAILURE``
says whether calls go through (open) or get 503 (closed), logged once per outage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from server.errors import ServiceUnavailable
from server.records.draft import Draft
from server.security.limits import RateLimited, retry_after_header
from server.security.shared_limits import SharedLimits

log = logging.getLogger(__name__)
NO_TENANT = "(none)"
# Counting windows kept in memory at most (tenants of JWTs are the callers' to choose).
MAX_MEMORY_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class Quota:
    tenant: str
    tool: str
    limit: int
    window_s: int

    def matches(self, tenant: str, tool: str) -> bool:
        return self.tenant in ("*", tenant) and self.tool in ("*", tool)


class QuotaExceeded(RateLimited):
    """A call over a tenant's quota for a tool: 429 with ``Retry-After``."""

    def __init__(self, quota: Quota, tenant: str, tool: str, retry_after: float) -> None:
        super().__init__(retry_after)
        seconds = int(retry_after_header(retry_after))  # what the Retry-After header says
        self.message = (
            f"Quota exceeded: {quota.limit} calls of {tool} per {quota.window_s} s for tenant "
            f"{tenant}; retry after {seconds} s"
        )
        self.data = {
            "limit": "quota",
            "tenant": tenant,
            "tool": tool,
            "quota": quota.limit,
            "windowSeconds": quota.window_s,
            "retryAfter": seconds,
        }


class QuotaCounter(Protocol):
    """Counts one call into each key; each key's count after it and its window's end (epoch
    seconds). Flavours: :class:`MemoryQuotaCounter`, and the Redis one in state/redis."""

    async def charge(self, keys: Sequence[tuple[str, int]]) -> list[int]: ...


class MemoryQuotaCounter:
    """One process's counts (no Redis): a dict of window keys, emptied of past windows."""

    def __init__(self, clock: object = time.time) -> None:
        self.counts: dict[str, tuple[int, float]] = {}
        self.clock = clock

    async def charge(self, keys: Sequence[tuple[str, int]]) -> list[int]:
        now = self.clock()  # type: ignore[operator]
        if len(self.counts) > MAX_MEMORY_KEYS:
            self.counts = {k: v for k, v in self.counts.items() if v[1] > now}
            if len(self.counts) > MAX_MEMORY_KEYS:
                self.counts.clear()  # a flood of fresh tenants: forget rather than grow
        found = []
        for key, window_s in keys:
            count, ends = self.counts.get(key, (0, now + window_s))
            self.counts[key] = (count + 1, ends)
            found.append(count + 1)
        return found


class Quotas:
    """The quotas of one app, charged for each tool call before it runs."""

    def __init__(
        self, quotas: Sequence[Quota], counter: QuotaCounter, *, fail_open: bool = True
    ) -> None:
        self.quotas = tuple(quotas)
        self.counter = counter
        self.fail_open = fail_open
        self._failing = False
        # The limits shared in Redis, when they are: the quota keys go in their store call.
        self.shared: SharedLimits | None = None

    async def charge(self, tenant: str | None, tool: str, draft: Draft | None = None) -> None:
        """Count the call against every quota that matches; raise :class:`QuotaExceeded`
        for the first one it is over. With the limits shared in Redis, ``draft``'s rate is
        settled in the same store call (as it is when no quota matches)."""
        name = tenant or NO_TENANT
        matching = [quota for quota in self.quotas if quota.matches(name, tool)]
        shared = self.shared if draft is not None else None
        if not matching:
            if shared is not None and draft is not None and draft.rate_due:
                await shared.settle(draft)
            return
        now = time.time()
        keys = []
        for quota in matching:
            window = int(now // quota.window_s)
            keys.append((f"{quota.tenant}|{quota.tool}|{name}|{tool}|{window}", quota.window_s))
        if shared is not None and draft is not None:
            counts = await shared.settle(draft, quotas=keys)  # logs and fails as configured
        else:
            counts = await self._count(keys)
        if counts is None:
            return  # Redis cannot count, and quotas fail open
        for quota, count in zip(matching, counts, strict=True):
            if count > quota.limit:
                ends = (int(now // quota.window_s) + 1) * quota.window_s
                raise QuotaExceeded(quota, name, tool, max(ends - now, 0.001))

    async def _count(self, keys: list[tuple[str, int]]) -> list[int] | None:
        """The counter's counts, or None when it cannot count and quotas fail open."""
        try:
            counts = await self.counter.charge(keys)
        except ServiceUnavailable:
            if not self._failing:
                log.warning(
                    "quotas cannot be counted (Redis does not answer): calls %s until it does",
                    "go through uncounted" if self.fail_open else "are refused with 503",
                )
            self._failing = True
            if self.fail_open:
                return None
            raise
        if self._failing:
            log.warning("quotas are counted again")
            self._failing = False
        return counts


def build_quotas(
    entries: Sequence[tuple[str, str, int, int]], counter: QuotaCounter, *, fail_open: bool
) -> Quotas | None:
    """The quotas ``MCP_QUOTAS`` names, or None for none (then no call pays for a check)."""
    if not entries:
        return None
    return Quotas([Quota(*entry) for entry in entries], counter, fail_open=fail_open)
