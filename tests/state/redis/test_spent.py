"""server.state.redis.spent: a request state spent through one replica is refused by another."""

from __future__ import annotations

import time

import pytest

from server.state.redis.link import RedisLink
from server.state.redis.spent import RedisSpentStates
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_nonce_is_spent_once_across_replicas_and_kept_no_longer_than_its_state(
    redis_server: RedisServer,
) -> None:
    prefix = fresh_prefix()
    one = RedisLink(redis_server.url, prefix=prefix, timeout_s=0.5)
    two = RedisLink(redis_server.url, prefix=prefix, timeout_s=0.5)
    try:
        expires_at = time.time() + 30
        assert await RedisSpentStates(one).spend("n1", expires_at)
        assert not await RedisSpentStates(two).spend("n1", expires_at)
        assert await RedisSpentStates(two).spend("n2", expires_at)
        ttl_ms = await one.client.pttl(one.key("spent", "n1"))
        assert 25_000 < ttl_ms <= 30_000
    finally:
        await one.close()
        await two.close()
