"""server.legacy.sessions: a session's resource subscriptions as one process follows them
(:class:`LiveSubscriptions`). The in-memory store is tested in tests/state/test_memory.py.
"""

import asyncio

import pytest

from server.errors import ServiceUnavailable
from server.legacy.sessions import LiveSubscriptions

pytestmark = pytest.mark.anyio


async def test_live_subscriptions_load_once_then_follow_deltas() -> None:
    live = LiveSubscriptions()
    reads: list[int] = []

    async def read() -> set[str]:
        reads.append(1)
        return {"x://a", "x://b"}

    await live.load(read)
    await live.load(read)  # already current: the store is not read again
    assert reads == [1]
    live.apply("x://c", True)
    live.apply("x://a", False)
    assert set(live) == {"x://b", "x://c"}
    assert len(live) == 2
    live.stale()
    await live.load(read)  # read again after a resync
    assert reads == [1, 1]
    assert live.uris == {"x://a", "x://b"}


async def test_deltas_that_arrive_while_the_store_is_read_are_not_lost() -> None:
    live = LiveSubscriptions()
    reading = asyncio.Event()
    answered = asyncio.Event()

    async def read() -> set[str]:
        reading.set()
        await answered.wait()
        return {"x://old", "x://removed-meanwhile"}  # read before the deltas below

    loading = asyncio.create_task(live.load(read))
    async with asyncio.timeout(5):
        await reading.wait()
    live.apply("x://added-meanwhile", True)
    live.apply("x://removed-meanwhile", False)
    answered.set()
    async with asyncio.timeout(5):
        await loading
    assert live.uris == {"x://old", "x://added-meanwhile"}
    assert live.loaded


async def test_a_failed_read_leaves_the_subscriptions_unloaded() -> None:
    live = LiveSubscriptions()

    async def read() -> set[str]:
        raise ServiceUnavailable("Redis is away")

    with pytest.raises(ServiceUnavailable):
        await live.load(read)
    assert not live.loaded
    live.apply("x://a", True)  # deltas still apply, and log nowhere
    assert live.uris == {"x://a"}
