"""asyncio's "which loop, which task" without a system call per question.

On Python 3.11, ``asyncio.get_running_loop()`` and ``asyncio.current_task()`` (and so
``asyncio.timeout``, ``asyncio.create_task`` and friends) call ``getpid()`` every time, to
notice a fork. On a plain Linux host that is cheap; under the sandboxed kernels containers
often run on it is a real system call, and profiling a ``tools/call`` here found four of them
costing 17% of the server's CPU. :func:`running_loop` remembers the loop per thread and only
asks again when that loop is no longer running (a new loop in the same thread, as in tests);
the helpers below take it from there.

May import: the standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("server.aio")


class _Cache(threading.local):
    loop: asyncio.AbstractEventLoop | None = None


_cache = _Cache()


def running_loop() -> asyncio.AbstractEventLoop:
    """The running loop of this thread (RuntimeError outside one, like asyncio's)."""
    loop = _cache.loop
    if loop is None or not loop.is_running():
        loop = _cache.loop = asyncio.get_running_loop()
    return loop


def current_task() -> asyncio.Task[Any] | None:
    return asyncio.current_task(running_loop())


def create_task(coroutine: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
    return running_loop().create_task(coroutine, name=name)


class Deadline:
    """``async with Deadline(seconds):`` — like ``asyncio.timeout``, raising TimeoutError when
    the block runs past ``seconds``, at a fraction of its cost (one timer, no system call).

    Only a cancellation this deadline caused becomes TimeoutError; any other one goes on."""

    __slots__ = ("_cancelling", "_seconds", "_task", "_timer", "expired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self.expired = False

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()

    async def __aenter__(self) -> Deadline:
        loop = running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._timer = loop.call_later(self._seconds, self._expire)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> bool | None:
        self._timer.cancel()
        # As asyncio.timeout does: take back our cancellation; it becomes TimeoutError unless
        # someone else cancelled the task too.
        if (
            self.expired
            and self._task.uncancel() <= self._cancelling
            and kind is asyncio.CancelledError
        ):
            raise TimeoutError
        return None


async def stop_task(task: asyncio.Task[Any], patience_s: float = 1.0) -> None:
    """Cancel a background task and wait for it, cancelling again if the first cancellation
    was swallowed (redis-py can absorb one that lands inside a pipeline's execute)."""
    for _ in range(5):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=patience_s)
    if task.done() and not task.cancelled():
        with contextlib.suppress(Exception):
            task.result()  # retrieved, so asyncio does not log it as never retrieved
    elif not task.done():
        log.error("background task %s did not stop", task.get_name())
