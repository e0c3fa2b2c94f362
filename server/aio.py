"""asyncio helpers for the hot paths: which loop and task without a system call, and timers
that cost a dict entry instead of a loop timer.

On Python 3.11 ``get_running_loop()`` and ``current_task()`` call ``getpid()``, a real system
call under sandboxed kernels (docs/decisions.md#loop-and-task-without-getpid):
:func:`running_loop` remembers the loop per thread. A request's timers are nearly always
cancelled, so :class:`CoarseTimers` is a per-loop wheel of 10 ms slots behind one loop timer
(arm: a dict insert; callbacks up to one slot late), used by :class:`Deadline` too; cheaper
still, :class:`Started` runs a coroutine in the caller's task up to its first real wait, so
timers are armed only for calls that wait, and it never moves to another task
(docs/decisions.md#started-and-coarse-timers).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


RESOLUTION_S = 0.01

TimerKey = tuple[int, int]


class CoarseTimers:
    """Timers for one loop, in slots of ``resolution_s``: many armed, few ever firing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution_s: float = RESOLUTION_S) -> None:
        self._loop = loop
        self._resolution = resolution_s
        self._per_second = 1 / resolution_s
        self._slots: dict[int, dict[int, Callable[[], object]]] = {}
        # Slot numbers in time order (a slot emptied by cancels stays here until it is due).
        self._due: list[int] = []
        self._numbers = itertools.count()
        self._wakeup: asyncio.TimerHandle | None = None
        self._wakeup_slot = 0

    def __len__(self) -> int:
        return sum(len(slot) for slot in self._slots.values())

    def call_later(self, delay: float, callback: Callable[[], object]) -> TimerKey:
        # The first slot boundary past the deadline (floor + 1: ceil's answer but for exact
        # boundaries, a slot later, which the resolution allows anyway).
        slot = int((self._loop.time() + delay) * self._per_second) + 1
        callbacks = self._slots.get(slot)
        if callbacks is None:
            callbacks = self._slots[slot] = {}
            heapq.heappush(self._due, slot)
        number = next(self._numbers)
        callbacks[number] = callback
        if self._wakeup is None or slot < self._wakeup_slot:
            self._schedule(slot)
        return slot, number

    def cancel(self, key: TimerKey) -> None:
        slot, number = key
        callbacks = self._slots.get(slot)
        if callbacks is not None:
            callbacks.pop(number, None)
        # An emptied slot stays until it is due: a timer armed for the same slot next (most
        # are: one per request, cancelled when it ends) finds it instead of pushing the slot
        # onto the heap once more. The loop timer stays too: waking for an empty slot is
        # cheaper than rescheduling.

    def _schedule(self, slot: int) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup_slot = slot
        self._wakeup = self._loop.call_at(slot * self._resolution, self._fire)

    def _fire(self) -> None:
        self._wakeup = None
        # uvloop's timers have 1 ms resolution and may fire that much early.
        now = (self._loop.time() + 0.001) / self._resolution
        due = self._due
        while due and due[0] <= now:
            for callback in self._slots.pop(heapq.heappop(due), {}).values():
                try:
                    callback()
                except Exception:
                    log.exception("a timer callback failed")
        while due and due[0] not in self._slots:
            heapq.heappop(due)  # emptied by cancels
        if due:
            self._schedule(due[0])


class _Cache(threading.local):
    loop: asyncio.AbstractEventLoop | None = None
    timers: CoarseTimers | None = None


_cache = _Cache()


class PerLoop(Generic[T]):
    """One ``factory(loop)`` object per event loop, made on first use and let go with the
    loop (a server per thread in tests, one loop in production)."""

    def __init__(self, factory: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._factory = factory
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, loop: asyncio.AbstractEventLoop) -> T:
        made = self._made.get(loop)
        if made is None:
            made = self._made[loop] = self._factory(loop)
        return made


def running_loop() -> asyncio.AbstractEventLoop:
    """The running loop of this thread (RuntimeError outside one, like asyncio's)."""
    loop = _cache.loop
    if loop is None or not loop.is_running():
        loop = _cache.loop = asyncio.get_running_loop()
        _cache.timers = CoarseTimers(loop)
    return loop


def coarse_timers() -> CoarseTimers:
    """The running loop's :class:`CoarseTimers`."""
    running_loop()
    assert _cache.timers is not None
    return _cache.timers


def current_task() -> asyncio.Task[Any] | None:
    return asyncio.current_task(running_loop())


async def next_batch(queue: asyncio.Queue[T], limit: int) -> list[T]:
    """Wait for one item, then take whatever else is already queued, up to ``limit`` in all:
    what a background writer sends in one round trip."""
    batch = [await queue.get()]
    while not queue.empty() and len(batch) < limit:
        batch.append(queue.get_nowait())
    return batch


def create_task(coroutine: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
    return running_loop().create_task(coroutine, name=name)


class Deadline:
    """``async with Deadline(seconds):`` — like ``asyncio.timeout``, raising TimeoutError when
    the block runs past ``seconds`` (give or take a timer slot), at a fraction of its cost.

    Only a cancellation this deadline caused becomes TimeoutError; any other one goes on."""

    __slots__ = ("_cancelling", "_seconds", "_task", "_timer", "_timers", "expired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self.expired = False

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()

    async def __aenter__(self) -> Deadline:
        task = asyncio.current_task(running_loop())
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._timers = coarse_timers()
        self._timer = self._timers.call_later(self._seconds, self._expire)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> bool | None:
        self._timers.cancel(self._timer)
        # As asyncio.timeout does: take back our cancellation; it becomes TimeoutError unless
        # someone else cancelled the task too.
        if (
            self.expired
            and self._task.uncancel() <= self._cancelling
            and kind is asyncio.CancelledError
        ):
            raise TimeoutError
        return None


class Started(Generic[T]):
    """A coroutine run in the caller's task up to its first real wait, the way ``await`` would.

    ``done`` tells whether it finished without ever waiting (``result`` then holds its value);
    otherwise awaiting this object runs the rest, in the same task. What that buys: work that
    only matters while a coroutine waits (a disconnect watcher, a handler timeout) is set up
    only for coroutines that do wait; most MCP handlers answer without waiting at all.
    Exceptions from the first step propagate from the constructor, as they would from
    ``await``; a cancellation while suspended goes into the coroutine, as it would there.
    """

    __slots__ = ("_coroutine", "_pending", "done", "result")

    def __init__(self, coroutine: Coroutine[Any, Any, T]) -> None:
        self._coroutine = coroutine
        self.done = False
        try:
            # What the coroutine's first wait yielded (a future, or None for a bare yield):
            # handed to the task when this object is awaited.
            self._pending: Any = coroutine.send(None)
        except StopIteration as finished:
            self.done = True
            self.result: T = finished.value

    def __await__(self) -> Generator[Any, Any, T]:
        if self.done:
            return self.result
        coroutine, pending = self._coroutine, self._pending
        # A hand-written ``yield from``: the coroutine already took its first step, so the
        # pending future is yielded first, and what the task sends or throws is passed on.
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as thrown:  # a cancellation, among others
                try:
                    pending = coroutine.throw(thrown)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
            else:
                try:
                    pending = coroutine.send(sent)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]


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
