"""CPU of waiting ``tasks/result`` calls: N tasks that run on, each with a waiter on it.

Run from the repository root (not collected by pytest)::

    python tests/bench/task_waits.py                  # 1,000 waiters, 10 s window
    PYTHONPATH=/path/to/other/checkout python tests/bench/task_waits.py   # another tree

In one process, on the in-memory store, it opens ``--tasks`` tasks (their handlers sleep),
starts one :meth:`TaskService.wait` per task (what a 2025-11-25 ``tasks/result`` does while the
task runs), lets them settle for a second, then measures the process's CPU time over
``--seconds`` (``time.process_time``) and prints it as a share of one core. Ends every task
before it exits. Prints which ``server`` package it imported, so a before/after run says which
tree it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import server
from server.state.memory import MemoryTaskStore
from server.tasks.model import TaskLimits
from server.tasks.service import TaskService


async def measure(tasks: int, seconds: float) -> float:
    limits = TaskLimits(per_client=tasks, total=tasks)
    service = TaskService(MemoryTaskStore(), limits)
    handlers = []
    for _ in range(tasks):
        record = await service.open(
            owner=None, client="bench", session=None, era="legacy", tool="sleep"
        )
        handler = asyncio.ensure_future(asyncio.sleep(3600))
        service.attach(record.task_id, handler)
        handlers.append((record.task_id, handler))
    waiters = [
        asyncio.ensure_future(service.wait(task_id, None, seconds + 60)) for task_id, _ in handlers
    ]
    await asyncio.sleep(1.0)
    started = time.process_time()
    await asyncio.sleep(seconds)
    used = time.process_time() - started
    for waiter in waiters:
        waiter.cancel()
    for _, handler in handlers:
        handler.cancel()
    await asyncio.gather(*waiters, *(handler for _, handler in handlers), return_exceptions=True)
    await service.drain(0.1)
    return used / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args()
    if not 1 <= options.tasks <= 10_000 or not 1 <= options.seconds <= 60:
        parser.error("--tasks in 1..10000, --seconds in 1..60")
    share = asyncio.run(measure(options.tasks, options.seconds))
    print(f"server: {server.__file__}")
    print(f"{options.tasks} waiting tasks/result: {share:.1%} of a core over {options.seconds:g} s")


if __name__ == "__main__":
    main()
