"""Request states already used, in Redis: one key per nonce until the state expires, so a
state spent on one replica is refused on every other.

Why states are single-use: docs/decisions.md#single-use-request-state.
"""

from __future__ import annotations

import time

from server.state.redis.link import RedisLink


class RedisSpentStates:
    """:class:`~server.modern.input_required.SpentStates` shared by every replica: ``SET NX``
    with the state's own expiry, so Redis holds a nonce no longer than its state is valid."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link

    async def spend(self, nonce: str, expires_at: float) -> bool:
        # At least a second: a state about to expire still cannot be used twice in its last one.
        ttl_ms = max(1000, int((expires_at - time.time()) * 1000))
        key = self.link.key("spent", nonce)
        first = await self.link.run(self.link.client.set(key, b"1", nx=True, px=ttl_ms))
        return bool(first)
