"""Quota counts in Redis, so a tenant's quota holds whichever replica serves its calls.

One script call per tool call, over every matching quota's key: each key is incremented and,
when new, given its window as its expiry, so counts leave Redis when their window ends.
Failures are the link's :class:`~server.errors.ServiceUnavailable` (see
:class:`~server.security.quotas.Quotas` for open or closed).
"""

from __future__ import annotations

from collections.abc import Sequence

from server.state.redis.link import RedisLink

_CHARGE = """
local counts = {}
for i, key in ipairs(KEYS) do
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('EXPIRE', key, ARGV[i]) end
  counts[i] = n
end
return counts
"""


class RedisQuotaCounter:
    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self._charge = link.client.register_script(_CHARGE)

    async def charge(self, keys: Sequence[tuple[str, int]]) -> list[int]:
        names = [self.link.key("quota", key) for key, _ in keys]
        windows = [str(window_s + 1) for _, window_s in keys]
        counts = await self.link.run(self._charge(keys=names, args=windows))
        return [int(count) for count in counts]
