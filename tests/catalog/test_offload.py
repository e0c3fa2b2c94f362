"""server.catalog.offload: the worker threads of sync handlers, and how a call picks where its
handler runs."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from server.catalog import Catalog
from server.catalog.offload import POOL, WorkerPool, invoker, set_thread_limit
from server.catalog.prompts import Prompt
from server.catalog.resources import Resource, ResourceTemplate
from server.catalog.tools import Tool
from server.context import Context
from server.logs import request_fields
from server.settings import Settings
from server.testing import Client
from tests.support.core_helpers import make_context
from tests.support.polling import wait_until

pytestmark = pytest.mark.anyio

# Long enough for any loaded machine; a test that needs it has already failed.
PATIENCE_S = 10.0

REQUEST = contextvars.ContextVar[str]("request", default="none")


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    made = WorkerPool(2, name="test-pool")
    yield made
    made.stop()


def blocker() -> tuple[threading.Event, threading.Event]:
    """(entered, release): the handler sets the first and waits for the second."""
    return threading.Event(), threading.Event()


async def test_runs_in_a_worker_thread_and_returns_its_value(pool: WorkerPool) -> None:
    def where(tag: str) -> tuple[str, int]:
        return tag, threading.get_ident()

    tag, thread = await pool.run(where, {"tag": "x"})
    assert tag == "x"
    assert thread != threading.get_ident()


async def test_the_handler_sees_the_callers_context_variables_and_changes_only_its_copy(
    pool: WorkerPool,
) -> None:
    def read_and_set() -> str:
        seen = REQUEST.get()
        REQUEST.set("changed in the thread")
        return seen

    token = REQUEST.set("request-7")
    try:
        assert await pool.run(read_and_set, {}) == "request-7"
        assert REQUEST.get() == "request-7"
    finally:
        REQUEST.reset(token)


async def test_exceptions_reach_the_caller(pool: WorkerPool) -> None:
    def fails() -> None:
        raise ValueError("broken")

    def stops() -> None:
        raise StopIteration

    with pytest.raises(ValueError, match="broken"):
        await pool.run(fails, {})
    # A StopIteration cannot travel in a future: it arrives as a RuntimeError.
    with pytest.raises(RuntimeError, match="StopIteration"):
        await pool.run(stops, {})
    assert await pool.run(lambda: "still serving", {}) == "still serving"


async def test_a_cancelled_call_returns_at_once_and_its_thread_finishes_in_the_background(
    pool: WorkerPool,
) -> None:
    entered, release = blocker()
    finished = threading.Event()

    def slow() -> str:
        entered.set()
        release.wait(PATIENCE_S)
        finished.set()
        return "late"

    call = asyncio.ensure_future(pool.run(slow, {}))
    assert await asyncio.to_thread(entered.wait, PATIENCE_S)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not finished.is_set()  # returned while the handler still ran
    release.set()
    assert await asyncio.to_thread(finished.wait, PATIENCE_S)
    # The thread is free again, and the dropped result broke nothing.
    assert await pool.run(lambda: "next", {}) == "next"


async def test_a_call_cancelled_while_queued_never_runs() -> None:
    pool = WorkerPool(1)
    entered, release = blocker()
    ran: list[str] = []
    try:

        def hold() -> None:
            entered.set()
            release.wait(PATIENCE_S)

        first = asyncio.ensure_future(pool.run(hold, {}))
        assert await asyncio.to_thread(entered.wait, PATIENCE_S)
        queued = pool.run(lambda: ran.append("queued"), {})
        queued.cancel()
        release.set()
        await first
        assert await pool.run(lambda: "after", {}) == "after"  # the queue is in order
        assert ran == []
    finally:
        pool.stop()


async def test_threads_are_bounded_and_further_calls_wait_their_turn(pool: WorkerPool) -> None:
    release = threading.Event()
    lock = threading.Lock()
    running = [0]
    most = [0]

    def blocking(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(PATIENCE_S)
        with lock:
            running[0] -= 1
        return n

    calls = [asyncio.ensure_future(pool.run(blocking, {"n": n})) for n in range(6)]
    await wait_until(lambda: running[0] == 2, PATIENCE_S)
    await asyncio.sleep(0.05)  # room for a third thread to start, if the bound did not hold
    assert running[0] == 2
    assert not any(call.done() for call in calls)
    release.set()
    assert await asyncio.gather(*calls) == list(range(6))
    assert most[0] == 2
    assert pool.threads <= 2


async def test_idle_workers_end_and_new_ones_start_on_demand() -> None:
    pool = WorkerPool(4, idle_s=0.05)
    release = threading.Event()
    calls = [pool.run(lambda: release.wait(PATIENCE_S), {}) for _ in range(3)]
    await wait_until(lambda: pool.threads == 3, PATIENCE_S)
    release.set()
    await asyncio.gather(*calls)
    await wait_until(lambda: pool.threads == 0, PATIENCE_S)
    assert await pool.run(lambda: "again", {}) == "again"
    pool.stop()
    await wait_until(lambda: pool.threads == 0, PATIENCE_S)


async def test_a_lowered_limit_ends_the_extra_workers() -> None:
    pool = WorkerPool(3)
    release = threading.Event()
    calls = [pool.run(lambda: release.wait(PATIENCE_S), {}) for _ in range(3)]
    await wait_until(lambda: pool.threads == 3, PATIENCE_S)
    pool.limit = 1
    release.set()
    await asyncio.gather(*calls)
    await wait_until(lambda: pool.threads == 1, PATIENCE_S)
    pool.stop()


async def test_a_lowered_limit_holds_for_idle_workers_too() -> None:
    pool = WorkerPool(3)
    release = threading.Event()
    calls = [pool.run(lambda: release.wait(PATIENCE_S), {}) for _ in range(3)]
    await wait_until(lambda: pool.threads == 3, PATIENCE_S)
    release.set()
    await asyncio.gather(*calls)  # three idle workers now
    pool.limit = 1
    await wait_until(lambda: pool.threads == 1, PATIENCE_S)
    entered, hold = blocker()
    running = [0]

    def blocking() -> None:
        running[0] += 1
        entered.set()
        hold.wait(PATIENCE_S)

    both = [pool.run(blocking, {}) for _ in range(2)]
    assert await asyncio.to_thread(entered.wait, PATIENCE_S)
    await asyncio.sleep(0.05)
    assert running[0] == 1
    hold.set()
    await asyncio.gather(*both)
    assert running[0] == 2
    pool.stop()


async def lower_while_a_worker_finishes() -> int:
    """Threads left after the limit drops from 3 to 1 while one worker is between its
    handler's return and going idle, and two idle workers are sent their end-markers."""
    pool = WorkerPool(3)
    release, busy_release = threading.Event(), threading.Event()
    quick = [pool.run(lambda: release.wait(PATIENCE_S), {}) for _ in range(2)]
    slow = pool.run(lambda: busy_release.wait(PATIENCE_S), {})
    await wait_until(lambda: pool.threads == 3, PATIENCE_S)
    release.set()
    await asyncio.gather(*quick)
    await wait_until(lambda: pool._idle == 2, PATIENCE_S)
    lower = threading.Thread(target=setattr, args=(pool, "limit", 1))
    with pool._lock:
        busy_release.set()
        lower.start()
        await asyncio.sleep(0.02)  # the third worker and the setter now wait for the lock
    lower.join(PATIENCE_S)
    await slow
    await wait_until(lambda: pool.threads <= 1, PATIENCE_S)
    await asyncio.sleep(0.02)  # an extra worker ending would show by now
    threads = pool.threads
    pool.stop()
    return threads


async def test_lowering_the_limit_as_a_worker_finishes_ends_no_more_than_the_excess() -> None:
    # The markers already end the excess, so the finishing worker must stay; when it ended too,
    # threads fell to 0, below the limit. Who gets the lock first is the scheduler's pick:
    # repeated so that both orders come up.
    assert [await lower_while_a_worker_finishes() for _ in range(12)] == [1] * 12


def test_the_thread_limit_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        set_thread_limit(0)
    with pytest.raises(ValueError, match="at least one"):
        WorkerPool().limit = 0


async def test_invoker_awaits_coroutines_and_runs_sync_handlers_where_declared() -> None:
    loop_thread = threading.get_ident()

    async def asynchronous() -> int:
        return threading.get_ident()

    def synchronous() -> int:
        return threading.get_ident()

    assert await invoker(asynchronous)({}) == loop_thread
    assert await invoker(asynchronous, blocking=False)({}) == loop_thread
    assert await invoker(synchronous)({}) != loop_thread
    assert await invoker(synchronous, blocking=False)({}) == loop_thread


async def test_blocking_false_runs_sync_tools_prompts_and_resources_on_the_loop() -> None:
    loop_thread = threading.get_ident()
    threads: dict[str, list[int]] = {}

    def recorded(kind: str) -> Any:
        def handler() -> str:
            threads.setdefault(kind, []).append(threading.get_ident())
            return "ok"

        handler.__name__ = kind
        return handler

    context = make_context()
    for blocking in (True, False):
        await Tool.from_function(recorded("tool"), blocking=blocking).call({}, context)
        await Prompt(recorded("prompt"), blocking=blocking).get({}, context)
        await Resource("a://r", recorded("resource"), blocking=blocking).read(context)

        def by_name(name: str) -> str:
            threads.setdefault("template", []).append(threading.get_ident())
            return name

        template = ResourceTemplate("a://t/{name}", by_name, blocking=blocking)
        await template.read("a://t/x", {"name": "x"}, context)
    for kind in ("tool", "prompt", "resource", "template"):
        in_thread, on_loop = threads[kind]
        assert in_thread != loop_thread, kind
        assert on_loop == loop_thread, kind


async def test_the_catalog_decorators_take_blocking() -> None:
    catalog = Catalog()
    threads: dict[str, int] = {}

    @catalog.tool(blocking=False)
    def quick() -> str:
        threads["quick"] = threading.get_ident()
        return "q"

    @catalog.tool
    def default() -> str:
        threads["default"] = threading.get_ident()
        return "d"

    @catalog.prompt(blocking=False)
    def greeting() -> str:
        threads["greeting"] = threading.get_ident()
        return "hello"

    @catalog.resource("a://fixed", blocking=False)
    def fixed() -> str:
        threads["fixed"] = threading.get_ident()
        return "f"

    @catalog.resource_template("a://items/{item}", blocking=False)
    def item(item: str) -> str:
        threads["item"] = threading.get_ident()
        return item

    async with Client(catalog) as client:
        await client.call_tool("quick", {})
        await client.call_tool("default", {})
        await client.get_prompt("greeting")
        await client.read_resource("a://fixed")
        await client.read_resource("a://items/x")
    loop_thread = threading.get_ident()
    assert threads["default"] != loop_thread
    assert {threads[name] for name in ("quick", "greeting", "fixed", "item")} == {loop_thread}


async def test_a_blocking_sync_tool_does_not_stall_the_server() -> None:
    """One thread, two calls to a tool that blocks: the second waits its turn, and all the
    while other requests are answered."""
    catalog = Catalog()
    entered, release = blocker()
    calls = [0]

    @catalog.tool
    def wait_for_release() -> str:
        calls[0] += 1
        entered.set()
        release.wait(PATIENCE_S)
        return "released"

    @catalog.tool
    def echo(text: str) -> str:
        return text

    settings = Settings(_env_file=None, records=["none"], tool_threads=1)
    try:
        async with Client(catalog, settings=settings) as client:
            assert POOL.limit == 1
            first = asyncio.ensure_future(client.call_tool("wait_for_release", {}))
            second = asyncio.ensure_future(client.call_tool("wait_for_release", {}))
            assert await asyncio.to_thread(entered.wait, PATIENCE_S)
            # The one thread is taken: a sync echo would queue behind it, an async request
            # does not.
            assert await client.list_tools()
            await asyncio.sleep(0.05)
            assert calls[0] == 1  # the second call waits for the thread
            assert not first.done()
            assert not second.done()
            release.set()
            results = await asyncio.gather(first, second)
            assert [result["content"][0]["text"] for result in results] == ["released"] * 2
            answer = await client.call_tool("echo", {"text": "after"})
            assert answer["content"][0]["text"] == "after"
    finally:
        release.set()
        set_thread_limit(Settings(_env_file=None).tool_threads)


async def test_a_sync_tool_in_its_thread_logs_as_part_of_its_request() -> None:
    catalog = Catalog()
    seen: dict[str, Any] = {}

    @catalog.tool
    def who(ctx: Context) -> str:
        seen["thread"] = threading.get_ident()
        seen["fields"] = request_fields()
        seen["record_id"] = ctx.record_id
        return "me"

    async with Client(catalog) as client:
        await client.call_tool("who", {})
    assert seen["thread"] != threading.get_ident()
    assert seen["fields"]["request_id"] == seen["record_id"]
    assert seen["record_id"]
    assert seen["fields"]["method"] == "tools/call"
