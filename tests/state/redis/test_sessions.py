"""server.state.redis.sessions: legacy sessions in a real Redis, shared by two store instances.

Two :class:`RedisSessionStore` instances on their own links but one key prefix stand for two
replicas. Idle expiry is Redis's TTL, so the tests that need it use small idle timeouts and
sleep a little. A test that stops Redis starts it again in a ``finally``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from server.errors import ServiceUnavailable, http_status
from server.hub import MAX_RESOURCE_SUBSCRIPTIONS
from server.legacy.sessions import (
    MAX_SESSION_ID_LENGTH,
    Session,
    SessionLimit,
    SubscriptionLimit,
)
from server.state.redis.link import RedisLink
from server.state.redis.sessions import RedisSessionStore
from tests.support.redis_server import RedisServer, fresh_prefix

# A real redis-server: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIMEOUT_S = 0.5
INFO = {"name": "test-client", "version": "1.0", "title": "Tëst ✓"}
CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": True}}


class Replica:
    """One store instance with what its process holds: local session ids, busy ones, ended."""

    def __init__(self, link: RedisLink, **options: Any) -> None:
        self.local: set[str] = set()
        self.busy: set[str] = set()
        self.ended: list[str] = []
        options.setdefault("max_sessions", 100)
        options.setdefault("idle_timeout_s", 30.0)
        self.store = RedisSessionStore(
            link,
            local=lambda: list(self.local),
            busy=lambda session_id: session_id in self.busy,
            ended=self._ended,
            **options,
        )

    def _ended(self, session_id: str) -> None:
        # As the app does: what this process held for the session is released.
        self.ended.append(session_id)
        self.local.discard(session_id)
        self.busy.discard(session_id)


@pytest.fixture
async def links(redis_server: RedisServer) -> AsyncIterator[Callable[[], RedisLink]]:
    """Makes links that share one fresh prefix (one per replica); closes them after the test."""
    prefix = fresh_prefix()
    made: list[RedisLink] = []

    def make() -> RedisLink:
        link = RedisLink(redis_server.url, prefix=prefix, timeout_s=TIMEOUT_S)
        made.append(link)
        return link

    yield make
    for link in made:
        await link.close()


def replica(links: Callable[[], RedisLink], **options: Any) -> Replica:
    return Replica(links(), **options)


async def create(store: RedisSessionStore, version: str = "2025-11-25") -> Session:
    return await store.create(version, INFO, CAPABILITIES)


def same(found: Session | None, expected: Session) -> None:
    assert found is not None
    assert found.id == expected.id
    assert found.protocol_version == expected.protocol_version
    assert found.client_info == expected.client_info
    assert found.client_capabilities == expected.client_capabilities
    assert found.initialized == expected.initialized
    assert found.log_level == expected.log_level
    assert found.owner == expected.owner


# -- create, get, save --------------------------------------------------------------------------


async def test_create_then_get_on_another_replica_round_trips_every_field(links: Any) -> None:
    one, two = replica(links), replica(links)
    session = await one.store.create("2025-06-18", INFO, CAPABILITIES)
    assert session.protocol_version == "2025-06-18"
    assert session.initialized is False
    assert session.log_level is None
    assert session.owner is None
    same(await two.store.get(session.id), session)

    session.initialized = True
    session.log_level = "warning"
    session.owner = "alice@example.com"
    await one.store.save(session)
    found = await two.store.get(session.id)
    same(found, session)
    assert found is not session  # a copy from Redis, not this process's object

    # And back to "nothing" values: no stale field survives a save.
    session.log_level = None
    session.owner = None
    await two.store.save(session)
    same(await one.store.get(session.id), session)


async def test_create_writes_the_owner_in_one_round_trip(
    links: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = replica(links), replica(links)
    await create(one.store)  # the first use loads the script (NOSCRIPT, then SCRIPT LOAD)
    round_trips: list[Any] = []
    run = one.store.link.run

    def counting(operation: Any) -> Any:
        round_trips.append(operation)
        return run(operation)

    monkeypatch.setattr(one.store.link, "run", counting)
    session = await one.store.create("2025-11-25", INFO, CAPABILITIES, owner="alice")
    assert len(round_trips) == 1  # cap check and the whole session, owner included
    assert session.owner == "alice"
    found = await two.store.get(session.id)
    assert found is not None
    assert found.owner == "alice"
    assert one.store.count() == 2


async def test_ids_are_new_and_visible_ascii(links: Any) -> None:
    store = replica(links).store
    ids = [(await create(store)).id for _ in range(20)]
    assert len(set(ids)) == 20
    assert all(32 <= len(sid) <= MAX_SESSION_ID_LENGTH for sid in ids)
    assert all(0x21 <= ord(char) <= 0x7E for sid in ids for char in sid)


async def test_unknown_empty_and_overlong_ids_are_none_and_leave_no_key(
    links: Any, redis_client: Any
) -> None:
    link = links()
    store = Replica(link).store
    await create(store)
    for session_id in ["unknown", "", "x" * (MAX_SESSION_ID_LENGTH + 1), "a:b*?[]"]:
        assert await store.get(session_id) is None
    assert await redis_client.exists(link.key("session", "unknown")) == 0
    # Only the one real session is indexed (the lookups added nothing).
    assert await redis_client.zcard(link.key("sessions")) == 1
    assert await store.delete("x" * (MAX_SESSION_ID_LENGTH + 1)) is False
    assert await store.delete("") is False


async def test_foreign_data_under_a_session_key_is_no_session(
    links: Any, redis_client: Any
) -> None:
    link = links()
    store = Replica(link).store
    await redis_client.hset(link.key("session", "half"), mapping={"version": "2025-11-25"})
    await redis_client.hset(
        link.key("session", "garbled"),
        mapping={"version": "v", "client_info": "{not json", "capabilities": "{}"},
    )
    assert await store.get("half") is None
    assert await store.get("garbled") is None


# -- idle expiry --------------------------------------------------------------------------------


async def test_an_idle_session_expires_by_its_ttl(links: Any, redis_client: Any) -> None:
    link = links()
    store = Replica(link, idle_timeout_s=0.3).store
    session = await create(store)
    ttl = await redis_client.pttl(link.key("session", session.id))
    assert 0 < ttl <= 300
    await asyncio.sleep(0.45)
    assert await store.get(session.id) is None


async def test_a_saved_session_expires_by_the_same_ttl(links: Any, redis_client: Any) -> None:
    link = links()
    store = Replica(link, idle_timeout_s=0.3).store
    session = await create(store)
    session.initialized = True
    await store.save(session)
    ttl = await redis_client.pttl(link.key("session", session.id))
    assert 0 < ttl <= 300  # a save restarts the idle clock, it does not stretch it
    await asyncio.sleep(0.45)
    assert await store.get(session.id) is None


async def test_get_restarts_the_idle_clock(links: Any, redis_client: Any) -> None:
    link = links()
    store = Replica(link, idle_timeout_s=0.6).store
    session = await create(store)
    for _ in range(2):  # 0.7 s in all: longer than the timeout, but never idle that long
        await asyncio.sleep(0.35)
        assert await store.get(session.id) is not None
    assert await redis_client.pttl(link.key("session", session.id)) > 400
    # The index moved too: the cap does not count it as expired.
    score = await redis_client.zscore(link.key("sessions"), session.id)
    assert score > time.time() + 0.4


async def test_expired_sessions_make_room_under_the_cap(links: Any) -> None:
    store = replica(links, max_sessions=1, idle_timeout_s=0.2).store
    await create(store)
    with pytest.raises(SessionLimit):
        await create(store)
    await asyncio.sleep(0.3)
    await create(store)
    assert store.count() == 1


# -- delete -------------------------------------------------------------------------------------


async def test_delete_ends_the_session_for_every_replica(links: Any) -> None:
    one, two = replica(links), replica(links)
    session = await create(one.store)
    assert await two.store.delete(session.id) is True
    assert await one.store.get(session.id) is None
    assert await one.store.delete(session.id) is False


async def test_save_after_delete_does_not_resurrect(links: Any, redis_client: Any) -> None:
    link = links()
    one, two = Replica(link), replica(links)
    session = await create(one.store)
    assert await one.store.get(session.id) is not None  # a request is under way here ...
    assert await two.store.delete(session.id) is True  # ... while DELETE lands elsewhere
    session.log_level = "debug"
    await one.store.save(session)  # the request finishes
    assert await redis_client.exists(link.key("session", session.id)) == 0
    assert await two.store.get(session.id) is None
    assert await one.store.get(session.id) is None


# -- resource subscriptions ---------------------------------------------------------------------


async def test_subscriptions_are_a_set_beside_the_session_shared_by_every_replica(
    links: Any, redis_client: Any
) -> None:
    link = links()
    one, two = Replica(link), replica(links)
    session = await create(one.store)
    assert await one.store.subscribe(session.id, "file:///a.txt") is True
    assert await two.store.subscribe(session.id, "db://table/ünïcode") is True
    assert await two.store.subscribe(session.id, "file:///a.txt") is False  # already there
    assert await one.store.subscriptions(session.id) == {"file:///a.txt", "db://table/ünïcode"}
    assert await one.store.unsubscribe(session.id, "file:///a.txt") is True
    assert await two.store.unsubscribe(session.id, "file:///a.txt") is False
    assert await two.store.subscriptions(session.id) == {"db://table/ünïcode"}
    # Stored one member per URI, not inside the session's hash (which a save rewrites).
    assert await redis_client.smembers(link.key("subs", session.id)) == {
        "db://table/ünïcode".encode()
    }
    assert b"subscriptions" not in await redis_client.hkeys(link.key("session", session.id))
    await one.store.save(session)
    assert await two.store.subscriptions(session.id) == {"db://table/ünïcode"}


async def test_subscriptions_are_capped_per_session(links: Any) -> None:
    store = replica(links, max_subscriptions=3).store
    session, other = await create(store), await create(store)
    for number in range(3):
        assert await store.subscribe(session.id, f"x://{number}")
    with pytest.raises(SubscriptionLimit) as refused:
        await store.subscribe(session.id, "x://3")
    assert http_status(refused.value, "legacy") == 200  # a JSON-RPC error, not an HTTP one
    assert refused.value.to_wire("legacy")["code"] == -32602
    assert "At most 3 resource subscriptions per session" in str(refused.value)
    assert await store.subscribe(session.id, "x://0") is False  # one it holds: no error
    assert await store.subscribe(other.id, "x://3")  # the cap is per session
    assert await store.unsubscribe(session.id, "x://0")
    assert await store.subscribe(session.id, "x://3")
    assert len(await store.subscriptions(session.id)) == 3


async def test_the_default_cap_is_the_hubs(links: Any) -> None:
    assert replica(links).store.max_subscriptions == MAX_RESOURCE_SUBSCRIPTIONS


async def test_subscriptions_live_and_end_with_their_session(links: Any, redis_client: Any) -> None:
    link = links()
    here = Replica(link, idle_timeout_s=0.6)
    session = await create(here.store)
    subs = link.key("subs", session.id)
    await here.store.subscribe(session.id, "x://a")
    assert 0 < await redis_client.pttl(subs) <= 600
    for _ in range(2):  # used (get), then kept busy here (the sweep): never idle 0.6 s
        await asyncio.sleep(0.35)
        assert await here.store.get(session.id) is not None
    here.local.add(session.id)
    here.busy.add(session.id)
    await asyncio.sleep(0.35)
    await here.store.expire()
    assert await redis_client.pttl(subs) > 400
    assert await here.store.subscriptions(session.id) == {"x://a"}
    # Deleted: the set goes with it, and a subscribe racing the DELETE brings nothing back.
    assert await here.store.delete(session.id)
    assert await redis_client.exists(subs) == 0
    assert await here.store.subscribe(session.id, "x://b") is False
    assert await redis_client.exists(subs) == 0
    # Expired: the set expires with the session (the same TTL).
    idle = await create(here.store)
    await here.store.subscribe(idle.id, "x://a")
    await asyncio.sleep(0.8)
    assert await redis_client.exists(link.key("subs", idle.id)) == 0


# -- the cap ------------------------------------------------------------------------------------


async def test_the_cap_counts_the_sessions_of_every_replica(links: Any) -> None:
    one, two = replica(links, max_sessions=3), replica(links, max_sessions=3)
    first = await create(one.store)
    await create(one.store)
    await create(two.store)
    assert two.store.count() == 3
    for store in (one.store, two.store):
        with pytest.raises(SessionLimit) as caught:
            await create(store)
        assert http_status(caught.value, "legacy") == 503
        assert isinstance(caught.value, ServiceUnavailable)
        assert "3" in str(caught.value)
    assert await two.store.delete(first.id)
    await create(one.store)  # a slot freed on one replica is free for the other
    assert one.store.count() == 3


# -- expire -------------------------------------------------------------------------------------


async def test_expire_keeps_busy_local_sessions_alive(links: Any) -> None:
    here = replica(links, idle_timeout_s=0.4)
    busy = await create(here.store)
    idle = await create(here.store)
    here.local |= {busy.id, idle.id}
    here.busy.add(busy.id)
    for _ in range(6):  # 0.6 s: half as long again as the idle timeout
        await asyncio.sleep(0.1)
        await here.store.expire()
    assert await here.store.get(busy.id) is not None
    # The idle one expired in Redis: the sweep released its local part.
    assert here.ended == [idle.id]
    assert here.store.count() == 1


async def test_expire_reports_local_sessions_deleted_by_another_replica(links: Any) -> None:
    here, there = replica(links), replica(links)
    kept = await create(here.store)
    gone = await create(here.store)
    busy_gone = await create(here.store)
    here.local |= {kept.id, gone.id, busy_gone.id}
    here.busy.add(busy_gone.id)
    assert await there.store.delete(gone.id)
    assert await there.store.delete(busy_gone.id)
    ended = await here.store.expire()
    assert sorted(ended) == sorted([gone.id, busy_gone.id])
    assert sorted(here.ended) == sorted(ended)
    assert here.store.count() == 1
    # Being busy here does not bring a deleted session back.
    assert await there.store.get(busy_gone.id) is None
    assert await there.store.get(kept.id) is not None


async def test_expire_with_nothing_local_only_counts(links: Any) -> None:
    one, two = replica(links), replica(links)
    await create(two.store)
    await create(two.store)
    assert await one.store.expire() == []
    assert one.store.count() == 2
    assert one.ended == []


# -- Redis away ---------------------------------------------------------------------------------


async def test_every_method_is_a_prompt_503_while_redis_is_away(
    links: Any, redis_server: RedisServer
) -> None:
    here = replica(links)
    session = await create(here.store)
    here.local.add(session.id)
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "create": lambda: create(here.store),
        "get": lambda: here.store.get(session.id),
        "save": lambda: here.store.save(session),
        "delete": lambda: here.store.delete(session.id),
        "expire": here.store.expire,
        "subscribe": lambda: here.store.subscribe(session.id, "x://a"),
        "unsubscribe": lambda: here.store.unsubscribe(session.id, "x://a"),
        "subscriptions": lambda: here.store.subscriptions(session.id),
    }
    with redis_server.stopped():
        for name, operation in operations.items():
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable):
                await operation()
            assert time.monotonic() - started < TIMEOUT_S * 2 + 1, name
    assert here.ended == []  # an outage is not the end of anyone's session
    # Back (and empty: the test server keeps nothing): the store works again.
    assert await here.store.get(session.id) is None
    await create(here.store)
