"""server.tasks.leases: renewing the leases of the handlers running here, and stopping those
whose task ended or vanished, with the in-process store."""

import asyncio
import logging

import pytest

from server.state.memory import MemoryTaskStore
from server.tasks.leases import Leases
from server.tasks.running import Running

pytestmark = pytest.mark.anyio


def handler(running: dict[str, Running], task_id: str) -> asyncio.Task[None]:
    task = asyncio.ensure_future(asyncio.sleep(60))
    running[task_id] = Running(task_id, 0, 60_000, task=task)
    return task


async def test_keep_renews_while_handlers_run_and_stop_ends_it() -> None:
    running: dict[str, Running] = {}
    leases = Leases(MemoryTaskStore(), running, lease_s=1)
    leases.keep()
    first = leases.heartbeat
    assert first is not None
    await asyncio.sleep(0)
    assert first.done()  # nothing runs here: the renewal ends at once
    task = handler(running, "t1")
    leases.keep()
    assert leases.heartbeat is not first
    leases.keep()  # under way already: the same one
    renewing = leases.heartbeat
    assert renewing is not None
    assert not renewing.done()
    leases.stop()
    task.cancel()
    await asyncio.gather(renewing, task, return_exceptions=True)
    assert renewing.cancelled()


async def test_an_orphaned_handler_is_stopped_a_vanished_one_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    running: dict[str, Running] = {}
    leases = Leases(MemoryTaskStore(), running, lease_s=1)
    ended, vanished = handler(running, "ended"), handler(running, "vanished")
    running["not-started"] = Running("not-started", 0, 60_000)
    with caplog.at_level(logging.ERROR, logger="server.tasks.leases"):
        leases.orphaned("ended", "cancelled")
        leases.orphaned("vanished", None)
        leases.orphaned("not-started", None)
        leases.orphaned("unknown", None)
    await asyncio.gather(ended, vanished, return_exceptions=True)
    assert ended.cancelled()
    assert vanished.cancelled()
    assert [record.message.split(" ")[1] for record in caplog.records] == ["vanished"]
