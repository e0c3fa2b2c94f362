"""Quotas per tenant and tool: at most N calls of a tool by a tenant's callers in a window,
whichever replica serves them.

``MCP_QUOTAS`` names them (:func:`server.settings_checks.quotas`); ``*`` matches any tenant or
tool, and every quota that matches a call is charged (one Redis round trip for all of them: a
script over their keys). Windows are fixed, aligned on the epoch, so every replica counts into
the same key. A call over a quota is refused before it runs with :class:`QuotaExceeded` (429,
``Retry-After`` until the window ends). With Redis the keys are counted in the request's one
store call (:meth:`SharedLimits.settle <server.security.shared_limits.SharedLimits.settle>`),
which also says what happens where Redis cannot count (``MCP_QUOTA_ON_REDIS_FAILURE``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from server.errors import retry_after_header
from server.records.draft import Draft
from server.security.limits import RateLimited
from server.security.shared_limits import SharedLimits

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


class MemoryQuotaCounter:
    """One process's counts (no Redis): a dict of window keys, emptied of past windows; each
    key's count after the call is returned."""

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
    """The quotas of one app, charged for each tool call before it runs: counted in this
    process, or in Redis with the request's other limits when ``shared`` is given."""

    def __init__(self, quotas: Sequence[Quota], shared: SharedLimits | None = None) -> None:
        self.quotas = tuple(quotas)
        self.shared = shared
        self.counter = MemoryQuotaCounter()

    async def charge(self, tenant: str | None, tool: str, draft: Draft) -> None:
        """Count the call against every quota that matches; raise :class:`QuotaExceeded`
        for the first one it is over. With the limits shared in Redis, ``draft``'s rate is
        settled in the same store call (as it is when no quota matches)."""
        name = tenant or NO_TENANT
        matching = [quota for quota in self.quotas if quota.matches(name, tool)]
        shared = self.shared
        if not matching:
            if shared is not None and draft.rate_due:
                await shared.settle(draft)
            return
        now = time.time()
        keys = []
        for quota in matching:
            window = int(now // quota.window_s)
            keys.append((f"{quota.tenant}|{quota.tool}|{name}|{tool}|{window}", quota.window_s))
        if shared is None:
            counts: list[int] | None = await self.counter.charge(keys)
        else:
            counts = await shared.settle(draft, quotas=keys)  # logs and fails as configured
        if counts is None:
            return  # Redis cannot count, and quotas fail open
        for quota, count in zip(matching, counts, strict=True):
            if count > quota.limit:
                ends = (int(now // quota.window_s) + 1) * quota.window_s
                raise QuotaExceeded(quota, name, tool, max(ends - now, 0.001))


def build_quotas(
    entries: Sequence[tuple[str, str, int, int]], shared: SharedLimits | None
) -> Quotas | None:
    """The quotas ``MCP_QUOTAS`` names, counted with ``shared`` (Redis) when given, or None
    for none (then no call pays for a check)."""
    if not entries:
        return None
    return Quotas([Quota(*entry) for entry in entries], shared)
