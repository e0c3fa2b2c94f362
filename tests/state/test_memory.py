"""server.state.memory: the in-memory session store (ids, idle expiry, busy sessions, the cap);
the other in-memory flavours are tested beside their Redis twins (test_bus, test_mirror,
test_task_stores).

Idle time is simulated by moving a session's ``last_seen`` back, so no test sleeps.
"""

import pytest

from server.errors import McpError, http_status
from server.legacy.sessions import Session, SessionLimit, SubscriptionLimit, new_session_id
from server.state.memory import MemorySessionStore

pytestmark = pytest.mark.anyio

INFO = {"name": "test-client", "version": "1"}


def make_store(*, max_sessions: int = 100, idle_timeout_s: float = 10.0) -> MemorySessionStore:
    return MemorySessionStore(max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)


async def create(store: MemorySessionStore, version: str = "2025-11-25") -> Session:
    return await store.create(version, INFO, {"sampling": {}})


def age(session: Session, seconds: float) -> None:
    """Pretend ``session`` was last used ``seconds`` earlier than it was."""
    session.last_seen -= seconds


def is_visible_ascii(text: str) -> bool:
    return bool(text) and all(0x21 <= ord(char) <= 0x7E for char in text)


# -- ids ----------------------------------------------------------------------------------------


async def test_ids_are_visible_ascii_long_and_unique() -> None:
    store = make_store(max_sessions=500)
    ids = [(await create(store)).id for _ in range(500)]
    ids += [new_session_id() for _ in range(500)]
    assert all(is_visible_ascii(session_id) for session_id in ids)
    # 192 random bits: at least 32 characters of urlsafe base64.
    assert min(len(session_id) for session_id in ids) >= 32
    assert len(set(ids)) == len(ids)


async def test_create_keeps_what_initialize_negotiated() -> None:
    store = make_store()
    session = await store.create("2025-06-18", INFO, {"elicitation": {}})
    assert session.protocol_version == "2025-06-18"
    assert session.client_info == INFO
    assert session.client_capabilities == {"elicitation": {}}
    assert session.initialized is False
    assert session.log_level is None
    assert await store.subscriptions(session.id) == set()
    assert store.count() == 1
    assert await store.get(session.id) is session


async def test_create_keeps_the_owner() -> None:
    store = make_store()
    assert (await store.create("2025-11-25", INFO, {})).owner is None
    owned = await store.create("2025-11-25", INFO, {}, owner="alice")
    assert owned.owner == "alice"
    found = await store.get(owned.id)
    assert found is not None
    assert found.owner == "alice"


# -- get, save, delete --------------------------------------------------------------------------


async def test_get_of_an_unknown_id_is_none() -> None:
    store = make_store()
    await create(store)
    assert await store.get("no-such-session") is None
    assert await store.get("") is None


async def test_get_restarts_the_idle_clock() -> None:
    store = make_store(idle_timeout_s=10)
    session = await create(store)
    age(session, 6)
    before = session.last_seen
    assert await store.get(session.id) is session
    assert session.last_seen > before + 5
    # Idle 6 + 6 = 12 s in total, but never more than 6 s since the last use: still alive.
    age(session, 6)
    assert await store.get(session.id) is session


async def test_get_moves_the_session_to_the_most_recently_used_end() -> None:
    store = make_store(idle_timeout_s=10)
    first, second = await create(store), await create(store)
    age(first, 5)
    age(second, 5)
    await store.get(first.id)
    age(first, 6)
    age(second, 6)
    # Expiry walks least recently used first and stops at the first live one: ``first`` must
    # have moved behind ``second``, or ``second`` (idle 11 s) would survive.
    assert await store.expire() == [second.id]
    assert await store.get(first.id) is first


async def test_a_session_idle_past_the_timeout_is_gone_on_get() -> None:
    store = make_store(idle_timeout_s=10)
    session = await create(store)
    age(session, 10.5)
    assert await store.get(session.id) is None
    assert store.count() == 0
    assert await store.delete(session.id) is False


async def test_save_persists_changes_but_never_resurrects() -> None:
    store = make_store()
    session = await create(store)
    session.log_level = "info"
    await store.save(session)
    stored = await store.get(session.id)
    assert stored is not None
    assert stored.log_level == "info"
    assert await store.delete(session.id) is True
    await store.save(session)
    assert await store.get(session.id) is None
    assert store.count() == 0


async def test_delete_ends_only_that_session() -> None:
    store = make_store()
    kept, ended = await create(store), await create(store)
    assert await store.delete(ended.id) is True
    assert await store.delete(ended.id) is False
    assert await store.get(ended.id) is None
    assert await store.get(kept.id) is kept
    assert store.count() == 1


# -- resource subscriptions ---------------------------------------------------------------------


async def test_subscriptions_are_added_and_removed_one_at_a_time() -> None:
    store = make_store()
    session = await create(store)
    assert await store.subscribe(session.id, "test://docs") is True
    assert await store.subscribe(session.id, "test://docs") is False  # already there
    assert await store.subscribe(session.id, "test://dir/") is True
    assert await store.subscriptions(session.id) == {"test://docs", "test://dir/"}
    assert await store.unsubscribe(session.id, "test://docs") is True
    assert await store.unsubscribe(session.id, "test://docs") is False
    assert await store.subscriptions(session.id) == {"test://dir/"}
    # A copy: what the caller does with it is not the store's set.
    (await store.subscriptions(session.id)).clear()
    assert await store.subscriptions(session.id) == {"test://dir/"}


async def test_subscriptions_are_capped_per_session() -> None:
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=10, max_subscriptions=2)
    session, other = await create(store), await create(store)
    await store.subscribe(session.id, "x://1")
    await store.subscribe(session.id, "x://2")
    with pytest.raises(SubscriptionLimit) as raised:
        await store.subscribe(session.id, "x://3")
    assert raised.value.to_wire("legacy")["code"] == -32602
    assert "At most 2 resource subscriptions per session" in raised.value.message
    assert await store.subscribe(session.id, "x://1") is False  # held already: no error
    assert await store.subscribe(other.id, "x://3") is True  # per session


async def test_subscriptions_end_with_their_session() -> None:
    store = make_store(idle_timeout_s=10)
    deleted, expired, swept = await create(store), await create(store), await create(store)
    for session in (deleted, expired, swept):
        await store.subscribe(session.id, "x://a")
    await store.delete(deleted.id)
    age(expired, 11)
    assert await store.get(expired.id) is None
    age(swept, 11)
    assert await store.expire() == [swept.id]
    for session in (deleted, expired, swept):
        assert await store.subscriptions(session.id) == set()
        assert await store.subscribe(session.id, "x://b") is False  # nothing comes back
    assert store._subscriptions == {}


# -- expiry -------------------------------------------------------------------------------------


async def test_expire_ends_idle_sessions_and_returns_their_ids() -> None:
    store = make_store(idle_timeout_s=10)
    old, older, fresh = await create(store), await create(store), await create(store)
    age(old, 11)
    age(older, 20)
    ended = await store.expire()
    assert sorted(ended) == sorted([old.id, older.id])
    assert store.count() == 1
    assert await store.get(fresh.id) is fresh
    assert await store.expire() == []


async def test_busy_sessions_are_spared_and_that_counts_as_use() -> None:
    asked: list[str] = []
    ended: list[str] = []
    busy_ids: set[str] = set()

    def busy(session_id: str) -> bool:
        asked.append(session_id)
        return session_id in busy_ids

    store = MemorySessionStore(max_sessions=100, idle_timeout_s=10, busy=busy, ended=ended.append)
    busy_one, idle, fresh = await create(store), await create(store), await create(store)
    busy_ids.add(busy_one.id)
    age(busy_one, 11)
    age(idle, 11)

    assert await store.expire() == [idle.id]
    assert ended == [idle.id]  # the process hears of it, to release what it holds
    # Only idle sessions are asked about; a fresh one is not.
    assert fresh.id not in asked
    assert busy_one.id in asked
    assert await store.get(busy_one.id) is busy_one
    # Being busy restarted its clock: the next expiry leaves it alone even when no longer busy.
    busy_ids.clear()
    assert await store.expire() == []
    assert store.count() == 2


async def test_a_session_found_expired_on_use_is_reported_ended() -> None:
    ended: list[str] = []
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=10, ended=ended.append)
    session = await create(store)
    age(session, 11)
    assert await store.get(session.id) is None
    assert ended == [session.id]


# -- the cap ------------------------------------------------------------------------------------


async def test_the_cap_raises_session_limit_with_status_503() -> None:
    store = make_store(max_sessions=2)
    await create(store)
    await create(store)
    with pytest.raises(SessionLimit) as raised:
        await create(store)
    error = raised.value
    assert isinstance(error, McpError)
    assert error.status == 503
    assert http_status(error, "legacy") == 503
    assert error.to_wire("legacy")["code"] == -32000
    assert "2" in error.message
    assert store.count() == 2


async def test_at_the_cap_idle_sessions_make_room() -> None:
    store = make_store(max_sessions=2, idle_timeout_s=10)
    stale, live = await create(store), await create(store)
    age(stale, 11)
    newcomer = await create(store)
    assert store.count() == 2
    assert await store.get(stale.id) is None
    assert await store.get(live.id) is live
    assert await store.get(newcomer.id) is newcomer


async def test_deleting_a_session_frees_a_place_under_the_cap() -> None:
    store = make_store(max_sessions=1)
    first = await create(store)
    with pytest.raises(SessionLimit):
        await create(store)
    await store.delete(first.id)
    assert (await create(store)).id != first.id
