"""server.tasks.waits: a wait ends when its task is terminal or asks something, or when its
time is up; it is woken by the task's changes, and leaves nothing behind."""

import asyncio

import pytest

from server.tasks.model import TaskRecord
from server.tasks.waits import Waits

pytestmark = pytest.mark.anyio


def record(**fields: object) -> TaskRecord:
    return TaskRecord(
        task_id="t1",
        owner=None,
        client="c1",
        session=None,
        era="modern",
        tool="job",
        created_ms=0,
        ttl_ms=60_000,
        poll_ms=1000,
        **fields,  # type: ignore[arg-type]
    )


async def test_a_wait_is_woken_by_a_change_and_returns_the_ended_task() -> None:
    waits = Waits()
    current = record()
    reads = 0

    async def read() -> TaskRecord:
        nonlocal reads
        reads += 1
        return current

    waiting = asyncio.create_task(waits.wait("t1", read, timeout_s=30))
    await asyncio.sleep(0)
    assert reads == 1
    assert not waiting.done()
    current = record(status="completed")
    waits.wake("t1")
    assert (await waiting).status == "completed"
    assert reads == 2
    assert waits.waiting == {}


async def test_a_question_ends_the_wait_and_so_does_its_time() -> None:
    waits = Waits()
    asking = record(status="input_required", inputs={"k": {"method": "elicitation/create"}})

    async def asks() -> TaskRecord:
        return asking

    assert await waits.wait("t1", asks, timeout_s=30) is asking
    working = record()

    async def works() -> TaskRecord:
        return working

    assert await waits.wait("t1", works, timeout_s=0.01) is working
    assert waits.waiting == {}
    waits.wake("nobody-waits")  # nothing to do
