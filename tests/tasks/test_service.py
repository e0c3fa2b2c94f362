"""server.tasks.service with the in-process store: bounds (tasks per client and in all, TTL,
result size), a task whose replica stopped, the shutdown drain, and the bus messages."""

import asyncio
from typing import Any

import pytest

from server.errors import InvalidParams, ServiceUnavailable
from server.state.memory import MemoryTaskStore
from server.tasks.model import TaskLimits, TaskRecord, iso
from server.tasks.service import TaskService
from server.tasks.store import TaskLimit

pytestmark = pytest.mark.anyio


def service(**limits: Any) -> tuple[TaskService, list[tuple[str, dict[str, Any]]]]:
    announced: list[tuple[str, dict[str, Any]]] = []
    return (
        TaskService(
            MemoryTaskStore(),
            TaskLimits(**limits),
            announce=lambda kind, data: announced.append((kind, data)),
        ),
        announced,
    )


async def open_task(tasks: TaskService, client: str = "c1", **kwargs: Any) -> TaskRecord:
    return await tasks.open(
        owner=kwargs.pop("owner", None),
        client=client,
        session=kwargs.pop("session", None),
        era="modern",
        tool="job",
        **kwargs,
    )


async def test_tasks_are_capped_per_client_and_in_all() -> None:
    tasks, _ = service(per_client=2, total=3)
    await open_task(tasks, "a")
    await open_task(tasks, "a")
    with pytest.raises(TaskLimit, match="per client") as refused:
        await open_task(tasks, "a")
    assert refused.value.status == 503
    await open_task(tasks, "b")
    with pytest.raises(TaskLimit, match="at most 3"):
        await open_task(tasks, "c")


async def test_a_record_lives_for_its_ttl() -> None:
    tasks, _ = service(default_ttl_ms=150, min_ttl_ms=100)
    record = await open_task(tasks, "a")
    assert (await tasks.get(record.task_id, None)).status == "working"
    await asyncio.sleep(0.2)
    with pytest.raises(InvalidParams):
        await tasks.get(record.task_id, None)
    # The cap counts kept tasks only: the expired one no longer counts.
    assert len(tasks.store) == 0  # type: ignore[arg-type]


async def test_a_handler_running_past_its_ttl_is_failed_and_stopped() -> None:
    tasks, _ = service(default_ttl_ms=300, min_ttl_ms=100)
    record = await open_task(tasks)
    stopped = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    tasks.attach(record.task_id, asyncio.ensure_future(forever()))
    await asyncio.wait_for(stopped.wait(), 5)
    got = await tasks.get(record.task_id, None)
    assert got.status == "failed"
    assert "time to live" in got.error["message"]  # type: ignore[index]


def test_requested_ttls_are_clamped() -> None:
    tasks, _ = service(default_ttl_ms=5000, min_ttl_ms=1000, max_ttl_ms=9000)
    assert tasks.ttl(None) == 5000
    assert tasks.ttl(10) == 1000
    assert tasks.ttl(10**9) == 9000
    assert tasks.ttl(7000) == 7000
    assert tasks.ttl(True) == 5000
    assert tasks.ttl("7000") == 5000


async def test_a_result_too_large_fails_the_task() -> None:
    tasks, _ = service(max_result_bytes=1024)
    record = await open_task(tasks)
    await tasks.settle(record.task_id, result={"content": [{"type": "text", "text": "x" * 2000}]})
    got = await tasks.get(record.task_id, None)
    assert got.status == "failed"
    assert "larger than the 1024 bytes" in got.error["message"]  # type: ignore[index]
    assert got.result is None


async def test_a_terminal_status_is_final() -> None:
    tasks, announced = service()
    record = await open_task(tasks, owner="alice")
    cancelled, changed = await tasks.cancel(record.task_id, "alice")
    assert (cancelled.status, changed) == ("cancelled", True)
    await tasks.settle(record.task_id, result={"content": []})
    assert (await tasks.get(record.task_id, "alice")).status == "cancelled"
    again, changed = await tasks.cancel(record.task_id, "alice")
    assert (again.status, changed) == ("cancelled", False)
    # No handler was attached here: the cancel went on the bus for whichever replica runs it.
    assert ("task", {"op": "cancel", "id": record.task_id}) in announced
    statuses = [data["record"]["status"] for kind, data in announced if data.get("op") == "status"]
    assert statuses == ["working", "cancelled"]


async def test_a_cancel_for_a_handler_elsewhere_goes_on_the_bus() -> None:
    tasks, announced = service()
    record = await open_task(tasks)
    tasks.running.pop(record.task_id)  # as if another replica ran it
    await tasks.cancel(record.task_id, None)
    assert ("task", {"op": "cancel", "id": record.task_id}) in announced


class DeadLeases(MemoryTaskStore):
    """A store whose leases have all run out: the replica running every task died."""

    async def get(self, task_id: str) -> TaskRecord | None:
        record = await super().get(task_id)
        if record is not None:
            record.alive = False
        return record


async def test_a_task_whose_replica_died_is_reported_failed() -> None:
    tasks = TaskService(DeadLeases(), TaskLimits(lease_s=7))
    record = await open_task(tasks)
    # Still running here: this replica knows it is alive, whatever the lease says.
    assert (await tasks.get(record.task_id, None)).status == "working"
    tasks.running.pop(record.task_id)
    failed = await tasks.get(record.task_id, None)
    assert failed.status == "failed"
    assert "stopped before it finished (no sign of life for 7 s)" in failed.error["message"]  # type: ignore[index]


async def test_drain_lets_handlers_finish_then_fails_the_rest() -> None:
    tasks, _ = service()
    quick, slow = await open_task(tasks), await open_task(tasks)

    async def finish_quickly() -> None:
        await asyncio.sleep(0.05)
        await tasks.settle(quick.task_id, result={"content": []})

    tasks.attach(quick.task_id, asyncio.ensure_future(finish_quickly()))
    tasks.attach(slow.task_id, asyncio.ensure_future(asyncio.sleep(60)))
    await tasks.drain(0.3)
    assert (await tasks.get(quick.task_id, None)).status == "completed"
    failed = await tasks.get(slow.task_id, None)
    assert failed.status == "failed"
    assert "shut down" in failed.error["message"]  # type: ignore[index]
    assert tasks.running == {}
    with pytest.raises(ServiceUnavailable):
        await open_task(tasks)


async def test_answers_wake_the_handler_and_status_follows() -> None:
    tasks, _ = service()
    record = await open_task(tasks, owner="o")
    task_id = record.task_id
    question = {"q": {"method": "elicitation/create", "params": {}}}
    waiting = asyncio.ensure_future(tasks.ask(task_id, question))
    for _ in range(200):
        if (await tasks.get(task_id, "o")).status == "input_required":
            break
        await asyncio.sleep(0.005)
    got = await tasks.get(task_id, "o")
    assert got.detailed()["inputRequests"] == question
    await tasks.update(task_id, "o", {"q": {"action": "accept", "content": {}}})
    assert await asyncio.wait_for(waiting, 5) == {"q": {"action": "accept", "content": {}}}
    assert (await tasks.get(task_id, "o")).status == "working"


async def test_remote_messages_reach_handlers_and_listeners() -> None:
    tasks, _ = service()
    seen: list[str] = []
    tasks.listeners.append(lambda record: seen.append(record.status))
    record = await open_task(tasks)
    handler = asyncio.ensure_future(asyncio.sleep(60))
    tasks.attach(record.task_id, handler)
    tasks.remote({"op": "wake", "id": record.task_id})
    assert tasks.running[record.task_id].wake.is_set()
    tasks.remote({"op": "status", "record": {**record.to_json(), "status": "completed"}})
    tasks.remote({"op": "status", "record": {"nonsense": True}})
    tasks.remote({"op": "cancel", "id": record.task_id})
    await asyncio.sleep(0)
    assert handler.cancelled()
    assert seen == ["working", "completed"]


def test_wire_forms() -> None:
    record = TaskRecord("t1", None, "c", None, "modern", "job", 1_700_000_000_123, 60_000, 500)
    assert record.task() == {
        "taskId": "t1",
        "status": "working",
        "createdAt": "2023-11-14T22:13:20.123Z",
        "lastUpdatedAt": "2023-11-14T22:13:20.123Z",
        "ttlMs": 60_000,
        "pollIntervalMs": 500,
    }
    legacy = record.task(legacy=True)
    assert (legacy["ttl"], legacy["pollInterval"]) == (60_000, 500)
    assert "ttlMs" not in legacy
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert TaskRecord.from_json(record.to_json()) == record


async def test_waiting_for_a_thousand_tasks_reads_the_store_only_when_they_change() -> None:
    # 1,000 waiting tasks/result polled the store ten times a second each (32% of a core):
    # a wait reads the task once, then sleeps until the task's status changes.
    tasks, _ = service(per_client=1000, total=1000)
    records = [await open_task(tasks) for _ in range(1000)]
    reads = 0
    get = tasks.store.get

    async def counted(task_id: str) -> TaskRecord | None:
        nonlocal reads
        reads += 1
        return await get(task_id)

    tasks.store.get = counted  # type: ignore[method-assign]
    waiters = [asyncio.ensure_future(tasks.wait(r.task_id, None, 30)) for r in records]
    await asyncio.sleep(1.0)
    assert reads <= 1000  # one read each, however long they wait
    await tasks.settle(records[0].task_id, result={"content": []})
    done = await asyncio.wait_for(waiters[0], 1)  # woken by the change, at once
    assert done.status == "completed"
    await tasks.fail(records[1].task_id, "stopped")  # so is a failure
    assert (await asyncio.wait_for(waiters[1], 1)).status == "failed"
    for waiter in waiters[2:]:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert not tasks.waits.waiting


async def test_a_wait_wakes_on_a_change_another_replica_announces() -> None:
    tasks, _ = service()
    record = await open_task(tasks)
    waiter = asyncio.ensure_future(tasks.wait(record.task_id, None, 30))
    await asyncio.sleep(0.05)
    # What the replica running the task wrote, as the bus brings it (the store changed too).
    ended = await tasks.store.transition(
        record.task_id, "completed", now_ms=1, result={"content": []}
    )
    assert ended is not None
    tasks.remote({"op": "status", "record": ended.to_json()})
    assert (await asyncio.wait_for(waiter, 1)).status == "completed"
