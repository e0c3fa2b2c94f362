"""server.aio: the cached running loop, Deadline behaving like asyncio.timeout, coarse timers,
and Started running a coroutine eagerly the way await would."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from server.aio import (
    CoarseTimers,
    Deadline,
    Started,
    coarse_timers,
    create_task,
    current_task,
    running_loop,
    stop_task,
)


def test_the_loop_is_remembered_per_thread_and_renewed_with_a_new_loop() -> None:
    async def which() -> asyncio.AbstractEventLoop:
        assert running_loop() is asyncio.get_running_loop()
        assert running_loop() is running_loop()
        return running_loop()

    first = asyncio.run(which())
    second = asyncio.run(which())  # a new loop in the same thread: not the stale one
    assert first is not second

    seen: list[asyncio.AbstractEventLoop] = []
    thread = threading.Thread(target=lambda: seen.append(asyncio.run(which())))
    thread.start()
    thread.join()
    assert seen[0] is not second


def test_outside_a_loop_it_fails_like_asyncio() -> None:
    with pytest.raises(RuntimeError):
        running_loop()


def test_current_task_and_create_task() -> None:
    async def main() -> None:
        me = current_task()
        assert me is asyncio.current_task()

        async def child() -> asyncio.Task[object] | None:
            return current_task()

        task = create_task(child(), name="child")
        assert task.get_name() == "child"
        assert await task is task

    asyncio.run(main())


def test_a_deadline_that_passes_raises_timeout_and_leaves_the_task_uncancelled() -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with Deadline(0.01) as deadline:
                await asyncio.sleep(1)
        assert deadline.expired
        task = asyncio.current_task()
        assert task is not None
        assert task.cancelling() == 0
        await asyncio.sleep(0)  # still runs: nothing left pending

    asyncio.run(main())


def test_a_block_done_in_time_is_untouched() -> None:
    async def main() -> int:
        async with Deadline(1.0) as deadline:
            await asyncio.sleep(0)
        assert not deadline.expired
        return 7

    assert asyncio.run(main()) == 7


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def main() -> None:
        async def guarded() -> None:
            async with Deadline(5.0):
                await asyncio.sleep(5)

        task = asyncio.ensure_future(guarded())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_both_expired_and_cancelled_elsewhere_stays_a_cancellation() -> None:
    async def main() -> None:
        async def guarded() -> None:
            async with Deadline(0.01):
                try:
                    await asyncio.sleep(5)
                finally:
                    # Someone else cancels too, before the block ends.
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()
                    await asyncio.sleep(0)

        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(guarded())

    asyncio.run(main())


# -- stop_task ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stop_task_stops_a_task_that_swallows_one_cancellation() -> None:
    swallowed = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            swallowed.append(True)  # as redis-py may do inside a pipeline's execute
        await asyncio.sleep(30)

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    started = time.monotonic()
    await stop_task(task, patience_s=0.1)
    assert time.monotonic() - started < 1
    assert swallowed == [True]
    assert task.cancelled()


@pytest.mark.anyio
async def test_stop_task_retrieves_a_failure_and_accepts_a_finished_task() -> None:
    async def failing() -> None:
        raise RuntimeError("failed before it was stopped")

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    assert task.done()
    await stop_task(task, patience_s=0.1)  # no exception, and none left unretrieved

    async def quick() -> None:
        return None

    done = asyncio.create_task(quick())
    await done
    await stop_task(done, patience_s=0.1)
    assert done.done()
    assert not done.cancelled()


@pytest.mark.anyio
async def test_stop_task_gives_up_on_a_task_that_never_stops() -> None:
    release = asyncio.Event()
    refusals = []

    async def immortal() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                refusals.append(True)

    task = asyncio.create_task(immortal())
    await asyncio.sleep(0)
    started = time.monotonic()
    await stop_task(task, patience_s=0.02)
    assert time.monotonic() - started < 1  # bounded: five tries, then it logs and returns
    assert len(refusals) == 5
    assert not task.done()
    release.set()
    task.cancel()
    await asyncio.wait({task}, timeout=1)
    assert task.done()


# -- CoarseTimers -------------------------------------------------------------------------------


def test_coarse_timers_fire_in_order_never_early_and_not_when_cancelled() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        timers = coarse_timers()
        assert timers is coarse_timers()  # one per loop
        fired: list[tuple[str, float]] = []
        started = loop.time()

        def note(name: str) -> Callable[[], None]:
            return lambda: fired.append((name, loop.time() - started))

        timers.call_later(0.05, note("late"))
        timers.call_later(0.02, note("early"))  # earlier than the armed wake-up: re-armed
        gone = timers.call_later(0.03, note("cancelled"))
        timers.cancel(gone)
        timers.cancel(gone)  # twice is harmless
        assert len(timers) == 2
        await asyncio.sleep(0.1)
        assert len(timers) == 0
        return fired

    fired = asyncio.run(main())
    assert [name for name, _ in fired] == ["early", "late"]
    early, late = (at for _, at in fired)
    assert early >= 0.02 - 0.0011
    assert late >= 0.05 - 0.0011


def test_a_failing_timer_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[str]:
        timers = coarse_timers()
        ran: list[str] = []

        def fail() -> None:
            raise RuntimeError("boom")

        timers.call_later(0.01, fail)
        timers.call_later(0.01, lambda: ran.append("after"))
        await asyncio.sleep(0.05)
        return ran

    assert asyncio.run(main()) == ["after"]
    assert "a timer callback failed" in caplog.text


def test_timers_armed_and_cancelled_in_one_slot_keep_one_heap_entry() -> None:
    """One timer per request, cancelled when it ends: the heap must not grow per request
    (it once did, by one entry a request, until the slot came due)."""

    async def main() -> tuple[int, int]:
        timers = CoarseTimers(asyncio.get_running_loop(), resolution_s=10.0)
        for _ in range(1000):
            timers.cancel(timers.call_later(5.0, lambda: None))
        return len(timers), len(timers._due)

    assert asyncio.run(main()) == (0, 1)


def test_each_loop_gets_its_own_timers() -> None:
    async def which() -> object:
        return coarse_timers()

    assert asyncio.run(which()) is not asyncio.run(which())


# -- Started -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_coroutine_that_never_waits_is_done_at_once() -> None:
    steps: list[str] = []

    async def quick() -> int:
        steps.append("ran")
        return 42

    started = Started(quick())
    assert started.done
    assert started.result == 42
    assert steps == ["ran"]  # ran inside the constructor, in this task
    assert await started == 42  # awaiting a finished one just gives the value


@pytest.mark.anyio
async def test_a_coroutine_that_waits_finishes_when_awaited_in_the_same_task() -> None:
    task = asyncio.current_task()
    seen: list[object] = []

    async def slow() -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)  # a bare yield
        await asyncio.sleep(0.01)  # a future
        seen.append(asyncio.current_task())
        return "late"

    started = Started(slow())
    assert not started.done
    assert await started == "late"
    assert seen == [task, task]


@pytest.mark.anyio
async def test_errors_come_out_where_await_would_raise_them() -> None:
    async def fails_at_once() -> None:
        raise ValueError("first step")

    async def fails_later() -> None:
        await asyncio.sleep(0.001)
        raise KeyError("later")

    with pytest.raises(ValueError, match="first step"):
        Started(fails_at_once())
    started = Started(fails_later())
    with pytest.raises(KeyError):
        await started


@pytest.mark.anyio
async def test_a_cancellation_while_suspended_reaches_the_coroutine() -> None:
    cleaned = asyncio.Event()
    waiting = asyncio.Event()

    async def blocked() -> None:
        try:
            waiting.set()
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    async def runner() -> None:
        started = Started(blocked())
        assert not started.done
        await started

    task = asyncio.create_task(runner())
    async with asyncio.timeout(5):
        await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


@pytest.mark.anyio
async def test_a_caught_cancellation_lets_the_coroutine_carry_on() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            await asyncio.sleep(0)
            return "recovered"
        return "slept"

    async def runner() -> str:
        return await Started(stubborn())

    task = asyncio.create_task(runner())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "recovered"
