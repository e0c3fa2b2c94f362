"""Running authors' sync handlers off the event loop: a small pool of worker threads with a
cheap hand-off.

A ``def`` handler may block, so it must not run on the loop; ``anyio.to_thread.run_sync``
costs a ``def`` tool much of its throughput (docs/decisions.md#worker-pool). Jobs are tuples
on a :class:`queue.SimpleQueue`; a worker starts only when none is idle, up to
:attr:`WorkerPool.limit` (``MCP_TOOL_THREADS``); results come back in batches with at most one
loop wake-up pending; the handler runs in a copy of the caller's context; a cancelled call
returns at once (its thread finishes in the background, the result dropped); workers are
daemon threads ended after :data:`IDLE_S` idle. One pool serves the process (:data:`POOL`).
:func:`invoker` picks once per handler how a call runs it: awaited, in a worker, or on the
loop for a sync handler declared ``blocking=False``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# The default bound on worker threads, as anyio's default thread limiter.
DEFAULT_THREADS = 40
# A worker with nothing to do for this long ends (the next burst starts new ones).
IDLE_S = 10.0

Invoke = Callable[[dict[str, Any]], Awaitable[Any]]

# What a worker takes: the handler and its arguments, the caller's context, the future to
# complete and the completions of the future's loop. None tells a worker to end.
_Job = tuple[
    Callable[..., Any],
    Mapping[str, Any],
    contextvars.Context,
    "asyncio.Future[Any]",
    "_Completions",
]


class _Completions:
    """Results for one loop, handed over in batches: one wake-up of the loop for as many
    results as the workers finished before it ran."""

    # No reference to the loop itself: the pool keeps one of these per loop, weakly keyed.
    __slots__ = ("_done", "_wake_pending")

    def __init__(self) -> None:
        self._done: collections.deque[tuple[asyncio.Future[Any], bool, Any]] = collections.deque()
        self._wake_pending = False

    def add(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        """From a worker thread. The deque's append and the flag are single steps under the
        GIL: a result appended before :meth:`_drain` clears the flag is taken by that drain;
        one appended after it sees the flag clear and wakes the loop again."""
        self._done.append((future, ok, value))
        if not self._wake_pending:
            self._wake_pending = True
            # A closed loop refuses: nobody waits for these results any more.
            with contextlib.suppress(RuntimeError):
                future.get_loop().call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._wake_pending = False
        done = self._done
        while done:
            future, ok, value = done.popleft()
            if future.cancelled():
                continue  # the call was cancelled: its result is dropped
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


class WorkerPool:
    """At most :attr:`limit` daemon threads running sync handlers for event loops."""

    def __init__(
        self, limit: int = DEFAULT_THREADS, *, idle_s: float = IDLE_S, name: str = "mcp-handler"
    ) -> None:
        self._limit = limit
        self._idle_s = idle_s
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        # Workers waiting for a job (or about to) less jobs waiting for a worker: negative
        # when calls queue because every thread is busy.
        self._idle = 0
        # End-markers queued for idle workers and not yet taken: those workers are as good as
        # gone, so a busy worker finishing meanwhile does not end too (one thread too few).
        self._ending = 0
        self._started = 0
        self._completions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Completions] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, limit: int) -> None:
        """A lower bound ends idle workers past it now, busy ones when their handler returns."""
        if limit < 1:
            raise ValueError("the handler pool needs at least one thread")
        with self._lock:
            self._limit = limit
            # Idle workers wait only when no job does (idle > 0): an end-marker each, so
            # none of them takes a job beyond the bound.
            count = min(max(self._idle, 0), max(self._threads - self._ending - limit, 0))
            self._idle -= count
            self._ending += count
        for _ in range(count):
            self._jobs.put(None)

    @property
    def threads(self) -> int:
        """Worker threads alive now (idle or busy)."""
        return self._threads

    def run(self, func: Callable[..., Any], kwargs: Mapping[str, Any]) -> asyncio.Future[Any]:
        """``func(**kwargs)`` in a worker thread, in a copy of the current context: a future
        of its result, on the running loop."""
        loop = asyncio.get_running_loop()
        completions = self._completions.get(loop)
        if completions is None:
            completions = self._completions[loop] = _Completions()
        future = loop.create_future()
        with self._lock:
            self._idle -= 1
            start = self._idle < 0 and self._threads < self._limit
            if start:
                self._threads += 1
                self._idle += 1  # the new worker waits for a job from its start
        self._jobs.put((func, kwargs, contextvars.copy_context(), future, completions))
        if start:
            try:
                self._start_worker()
            except BaseException:
                future.cancel()  # the job stays queued; whichever worker takes it skips it
                raise
        return future

    def _start_worker(self) -> None:
        self._started += 1
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{self._started}", daemon=True
        )
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._threads -= 1
                self._idle -= 1
            raise

    def _work(self) -> None:
        jobs, lock = self._jobs, self._lock
        while True:
            try:
                job = jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with lock:
                    # More waiting workers than jobs: this one ends. Otherwise a job is on
                    # its way (put just after its count was taken): wait for it.
                    if self._idle > 0:
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            if job is None:
                with lock:
                    self._threads -= 1
                    self._ending -= 1
                return
            _run(job)
            del job  # nothing of it held while idle
            with lock:
                if self._threads - self._ending > self._limit:  # the limit was lowered
                    self._threads -= 1
                    return
                self._idle += 1

    def stop(self) -> None:
        """Tell every idle worker to end; busy ones end after their handler (they are daemon
        threads: nothing waits for them)."""
        with self._lock:
            count = max(self._idle, 0)
            self._idle -= count
        for _ in range(count):
            self._jobs.put(None)


def _run(job: _Job) -> None:
    func, kwargs, context, future, completions = job
    if future.cancelled():  # a read of a flag: at worst the work is done for naught
        return
    try:
        value = context.run(func, **kwargs)
    except BaseException as failure:
        if isinstance(failure, StopIteration):
            # A future cannot hold a StopIteration (it would end the awaiting coroutine as
            # if it had returned).
            failure = RuntimeError(f"the handler raised {failure!r}")
        completions.add(future, False, failure)
    else:
        completions.add(future, True, value)


POOL = WorkerPool()


def set_thread_limit(limit: int) -> None:
    """Bound the worker threads (``MCP_TOOL_THREADS``); excess workers end when idle."""
    POOL.limit = limit


def invoker(handler: Callable[..., Any], *, blocking: bool = True) -> Invoke:
    """How a call runs ``handler`` with its bound arguments: awaited when it is a coroutine
    function; else in a worker thread, or on the event loop when ``blocking`` is False (the
    author says it never blocks: no I/O, no sleep, little CPU)."""
    if inspect.iscoroutinefunction(handler):
        return lambda kwargs: handler(**kwargs)
    if not blocking:

        async def on_loop(kwargs: dict[str, Any]) -> Any:
            return handler(**kwargs)

        return on_loop
    run = POOL.run
    return lambda kwargs: run(handler, kwargs)
