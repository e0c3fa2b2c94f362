"""Per-client limits and quota counts in Redis, so they hold whichever replica serves.

One script call settles what a request owes (:mod:`server.security.shared_limits`): its rate
(GCRA on one key per client, timed by Redis's own clock so replicas' clocks do not matter), its
quota keys (incremented, each given its window as its expiry when new) and its stream or
session leases (a sorted set per client and kind, scored by when each lease runs out: a lease
not renewed is dropped by the next count). A refused rate takes nothing; a refused slot undoes
the slots taken before it. Failures are the link's :class:`~server.errors.ServiceUnavailable`.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.security.shared_limits import RateAsk, Settled, SlotAsk
from server.state.redis.link import RedisLink

# ARGV: has_rate, interval_us, tolerance_us, cost, quota count, quota windows...,
# slot count, then (member, limit, lease_us) per slot. KEYS: rate key (or a placeholder),
# quota keys, slot keys. Returns {status, value, counts...}: status 0 allowed; 1 rate refused
# (value: microseconds to wait); 2 slot refused (value: its index, from 0).
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[1] == '1' then
  local interval = tonumber(ARGV[2])
  local tolerance = tonumber(ARGV[3])
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  local new = tat + interval * tonumber(ARGV[4])
  if new - now > tolerance then return {1, new - now - tolerance} end
  redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000) + 1)
end
local k, a = 2, 6
local nq = tonumber(ARGV[5])
local out = {0, 0}
for i = 1, nq do
  local n = redis.call('INCR', KEYS[k])
  if n == 1 then redis.call('EXPIRE', KEYS[k], ARGV[a]) end
  out[#out + 1] = n
  k, a = k + 1, a + 1
end
local ns = tonumber(ARGV[a])
a = a + 1
local taken = {}
for i = 1, ns do
  local key, member = KEYS[k], ARGV[a]
  local limit, lease = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  if redis.call('ZCARD', key) >= limit then
    for j = 1, #taken do redis.call('ZREM', taken[j][1], taken[j][2]) end
    return {2, i - 1}
  end
  redis.call('ZADD', key, string.format('%d', now + lease), member)
  redis.call('PEXPIRE', key, math.ceil(lease / 1000) + 1000)
  taken[#taken + 1] = {key, member}
  k, a = k + 1, a + 3
end
return out
"""

# KEYS: slot keys; ARGV: lease_us, then one member per key. Renews only what is still there.
_RENEW = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  if redis.call('ZADD', key, 'XX', 'CH', string.format('%d', until_), ARGV[i + 1]) == 1 then
    redis.call('PEXPIRE', key, math.ceil(tonumber(ARGV[1]) / 1000) + 1000)
  end
end
return #KEYS
"""


class RedisLimits:
    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self._settle = link.client.register_script(_SETTLE)
        self._renew = link.client.register_script(_RENEW)

    @property
    def available(self) -> bool:
        """Unless the link knows Redis is away (it lost it, or its ping is late), which only a
        link that has connected once can know."""
        link = self.link
        return link.answering or not link.ever_connected

    async def settle(
        self, rate: RateAsk | None, quotas: Sequence[tuple[str, int]], slots: Sequence[SlotAsk]
    ) -> Settled:
        keys = [self.link.key("limit", "rate", rate.key) if rate else self.link.key("limit")]
        args: list[str | int] = (
            [1, rate.interval_us, rate.tolerance_us, rate.cost] if rate else [0, 0, 0, 0]
        )
        keys += [self.link.key("quota", key) for key, _ in quotas]
        args += [len(quotas), *(window_s + 1 for _, window_s in quotas), len(slots)]
        for slot in slots:
            keys.append(self.link.key("limit", slot.key))
            args += [slot.member, slot.limit, slot.lease_us]
        found = await self.link.run(self._settle(keys=keys, args=args))
        status, value = int(found[0]), int(found[1])
        if status == 1:
            return Settled(max(value, 1) / 1_000_000, [])
        if status == 2:
            return Settled(None, [], value)
        return Settled(None, [int(count) for count in found[2:]])

    async def renew(self, held: Sequence[tuple[str, str]], lease_us: int) -> None:
        keys = [self.link.key("limit", key) for key, _ in held]
        await self.link.run(self._renew(keys=keys, args=[lease_us, *(m for _, m in held)]))

    async def release(self, key: str, member: str) -> None:
        await self.link.run(self.link.client.zrem(self.link.key("limit", key), member))
