"""The two task stores (server.state.memory, server.state.redis.tasks) keep the same contract;
with Redis, two store instances on their own links stand for two replicas. Then the service on
Redis: a task created through one replica is answered, cancelled and reported failed through
another."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from server.state.memory import MemoryTaskStore
from server.tasks.model import TaskLimits, TaskRecord
from server.tasks.service import TaskService
from server.tasks.store import TaskLimit, TaskStore

pytestmark = pytest.mark.anyio

LEASE_MS = 10_000


def record(task_id: str, *, client: str = "c", session: str | None = None, ttl_ms: int = 60_000):
    now = int(time.time() * 1000)
    return TaskRecord(
        task_id, "owner", client, session, "modern", "job", now, ttl_ms, 500, updated_ms=now
    )


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], TaskStore]]:
    """Makes stores that share their records: one memory store, or Redis links on one prefix."""
    if request.param == "memory":
        shared = MemoryTaskStore()
        yield lambda: shared
        return
    from server.state.redis.link import RedisLink
    from server.state.redis.tasks import RedisTaskStore
    from tests.support.redis_server import fresh_prefix

    server = request.getfixturevalue("redis_server")
    prefix = fresh_prefix()
    links: list[RedisLink] = []

    def make() -> TaskStore:
        link = RedisLink(server.url, prefix=prefix, timeout_s=1.0)
        links.append(link)
        return RedisTaskStore(link)

    yield make
    for link in links:
        await link.close()


async def test_create_get_and_every_field_round_trip(stores: Any) -> None:
    one, two = stores(), stores()
    await one.create(record("t1", session="s1"), per_client=10, total=10, lease_ms=LEASE_MS)
    got = await two.get("t1")
    assert got is not None
    assert (got.task_id, got.owner, got.client, got.session, got.status) == (
        "t1",
        "owner",
        "c",
        "s1",
        "working",
    )
    assert got.alive
    assert await two.get("nope") is None
    question = {"method": "elicitation/create", "params": {"requestedSchema": {"required": []}}}
    asked = await one.transition("t1", "input_required", now_ms=1, inputs={"q": question})
    assert asked is not None
    assert asked.inputs == {"q": question}  # an empty list stays a list
    assert await two.deliver("t1", {"q": {"action": "accept"}, "x": {}}, now_ms=2) == ["q"]
    assert (await one.get("t1")).inputs == {}
    assert await one.take_answers("t1", ["q", "x"]) == {"q": {"action": "accept"}}
    assert await one.take_answers("t1", ["q"]) == {}
    await two.set_message("t1", "half way", now_ms=3)
    result = {"content": [], "structuredContent": {"items": []}}
    done = await one.transition("t1", "completed", now_ms=4, result=result)
    assert done is not None
    assert (done.status, done.result, done.message) == ("completed", result, "half way")
    # Final: nothing changes an ended task any more.
    assert await two.transition("t1", "cancelled", now_ms=5) is None
    assert await two.deliver("t1", {"q": {}}, now_ms=5) == []
    await two.set_message("t1", "late", now_ms=6)
    assert (await one.get("t1")).message == "half way"


async def test_caps_per_client_and_in_all(stores: Any) -> None:
    store = stores()
    await store.create(record("a1", client="a"), per_client=2, total=3, lease_ms=LEASE_MS)
    await store.create(record("a2", client="a"), per_client=2, total=3, lease_ms=LEASE_MS)
    with pytest.raises(TaskLimit, match="per client"):
        await store.create(record("a3", client="a"), per_client=2, total=3, lease_ms=LEASE_MS)
    await store.create(record("b1", client="b"), per_client=2, total=3, lease_ms=LEASE_MS)
    with pytest.raises(TaskLimit, match="at most 3"):
        await store.create(record("c1", client="c"), per_client=2, total=3, lease_ms=LEASE_MS)


async def test_records_expire_at_their_ttl_and_stop_counting(stores: Any) -> None:
    store = stores()
    await store.create(record("short", ttl_ms=200), per_client=1, total=10, lease_ms=LEASE_MS)
    await asyncio.sleep(0.3)
    assert await store.get("short") is None
    await store.create(record("next"), per_client=1, total=10, lease_ms=LEASE_MS)


async def test_a_session_lists_its_tasks_by_page(stores: Any) -> None:
    store = stores()
    for number in range(5):
        await store.create(
            record(f"t{number}", session="s", ttl_ms=60_000 + number),
            per_client=10,
            total=10,
            lease_ms=LEASE_MS,
        )
    await store.create(record("other", session="z"), per_client=10, total=10, lease_ms=LEASE_MS)
    first, more = await store.session_tasks("s", 0, 2)
    assert ([task.task_id for task in first], more) == (["t0", "t1"], True)
    last, more = await store.session_tasks("s", 4, 2)
    assert ([task.task_id for task in last], more) == (["t4"], False)


async def test_dropped_tasks_are_gone_and_free_their_places(stores: Any) -> None:
    store = stores()
    for number in range(2):
        await store.create(
            record(f"d{number}", client="a", session="s"),
            per_client=2,
            total=10,
            lease_ms=LEASE_MS,
        )
    page, _ = await store.session_tasks("s", 0, 10)
    await store.drop(page)
    assert await store.get("d0") is None
    assert await store.session_tasks("s", 0, 10) == ([], False)
    for number in range(2):  # the client's two places are free again
        await store.create(record(f"n{number}", client="a"), per_client=2, total=10, lease_ms=1)


async def test_redis_leases_say_whether_the_running_replica_lives(redis_server: Any) -> None:
    from server.state.redis.link import RedisLink
    from server.state.redis.tasks import RedisTaskStore
    from tests.support.redis_server import fresh_prefix

    link = RedisLink(redis_server.url, prefix=fresh_prefix(), timeout_s=1.0)
    try:
        store = RedisTaskStore(link)
        await store.create(record("t"), per_client=10, total=10, lease_ms=150)
        assert (await store.get("t")).alive  # type: ignore[union-attr]
        await store.heartbeat(["t"], lease_ms=150)
        await asyncio.sleep(0.25)
        assert not (await store.get("t")).alive  # type: ignore[union-attr]
        await store.heartbeat(["t"], lease_ms=1000)
        assert (await store.get("t")).alive  # type: ignore[union-attr]
        await store.release("t")
        assert not (await store.get("t")).alive  # type: ignore[union-attr]
    finally:
        await link.close()


async def test_two_replicas_share_a_task_through_redis(redis_server: Any) -> None:
    """A task running on replica A is answered and cancelled through B (the bus carries the
    wake-up and the cancel), and when A dies B reports it failed once the lease runs out."""
    from server.state.redis.link import RedisLink
    from server.state.redis.tasks import RedisTaskStore
    from tests.support.redis_server import fresh_prefix

    prefix = fresh_prefix()
    links = [RedisLink(redis_server.url, prefix=prefix, timeout_s=1.0) for _ in range(2)]
    bus: list[TaskService] = []

    def announce(kind: str, data: dict[str, Any]) -> None:
        for replica in bus:  # every other replica hears it, as the Redis bus does
            if replica is not sender[0]:
                replica.remote(data)

    sender: list[TaskService] = []
    a = TaskService(RedisTaskStore(links[0]), TaskLimits(lease_s=1), announce=announce)
    b = TaskService(RedisTaskStore(links[1]), TaskLimits(lease_s=1), announce=announce)
    bus += [a, b]
    try:
        sender[:] = [a]
        created = await a.open(owner="o", client="c", session=None, era="modern", tool="job")
        answered = asyncio.ensure_future(a.ask(created.task_id, {"q": {"method": "x"}}))
        for _ in range(200):
            if (await b.get(created.task_id, "o")).status == "input_required":
                break
            await asyncio.sleep(0.01)
        sender[:] = [b]
        await b.update(created.task_id, "o", {"q": {"ok": True}})
        assert await asyncio.wait_for(answered, 5) == {"q": {"ok": True}}

        handler = asyncio.ensure_future(asyncio.sleep(60))
        a.attach(created.task_id, handler)
        cancelled, changed = await b.cancel(created.task_id, "o")
        assert (cancelled.status, changed) == ("cancelled", True)
        await asyncio.sleep(0)
        assert handler.cancelled()  # A stopped its handler

        sender[:] = [a]
        orphan = await a.open(owner="o", client="c", session=None, era="modern", tool="job")
        a.running.clear()  # A "dies": no more heartbeats, and it forgets its handler
        await a.store.release(orphan.task_id)
        failed = await b.get(orphan.task_id, "o")
        assert failed.status == "failed"
        assert "stopped before it finished" in failed.error["message"]  # type: ignore[index]
    finally:
        for replica in bus:
            replica.leases.stop()
        for link in links:
            await link.close()


async def test_handlers_of_tasks_redis_lost_are_stopped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis restarts empty under a running task: its handler was left running, uncancellable
    and unlogged (the task "not found"). The next lease renewal stops it, and logs an error
    naming the task."""
    from server.state.redis.link import RedisLink
    from server.state.redis.tasks import RedisTaskStore
    from tests.support.redis_server import RedisServer, fresh_prefix

    redis = RedisServer().start()  # its own: this test empties it
    link = RedisLink(redis.url, prefix=fresh_prefix(), timeout_s=1.0)
    service = TaskService(RedisTaskStore(link), TaskLimits(lease_s=1))
    try:
        lost = await service.open(owner="o", client="c", session=None, era="modern", tool="job")
        handler = asyncio.ensure_future(asyncio.sleep(60))
        service.attach(lost.task_id, handler)
        with redis.stopped():
            await asyncio.sleep(0.5)
        with caplog.at_level("ERROR", logger="server.tasks.leases"):
            for _ in range(300):
                if handler.done():
                    break
                await asyncio.sleep(0.02)
        assert handler.cancelled()
        assert any(lost.task_id in line and "vanished" in line for line in caplog.messages)
        # A task that ended (its cancel message lost) stops its handler too, quietly.
        ended = await service.open(owner="o", client="c", session=None, era="modern", tool="job")
        other = asyncio.ensure_future(asyncio.sleep(60))
        service.attach(ended.task_id, other)
        await service.store.transition(ended.task_id, "cancelled", now_ms=1)
        await asyncio.wait_for(asyncio.gather(other, return_exceptions=True), 3)
        assert other.cancelled()
    finally:
        service.leases.stop()
        await link.close()
        redis.close()
