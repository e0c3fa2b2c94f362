"""server.transport.legacy_calls: where a legacy call runs, without sockets.

A real :class:`~server.legacy.era.LegacyEra` over an in-memory store runs each call; the HTTP
side is an :class:`~server.transport.legacy_answer.Answer` on an ASGI ``send`` that keeps what
it is given. What is checked: the outcome (result, wire error, or no response when cancelled),
the session's in-flight table left empty whatever happens, the call's own cancellation told
apart from any other, and the stream of a call in a task of its own finished in every case.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import anyio
import orjson
import pytest

from server.catalog import Catalog
from server.context import Context
from server.dispatch import Handling
from server.jsonrpc import Request
from server.legacy.calls import LegacyCall
from server.legacy.era import LegacyEra
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.transport.legacy_answer import Answer, LegacyOptions
from server.transport.legacy_calls import (
    CANCELLED,
    InlineCall,
    outcome_of,
    run_inline,
    start_in_task,
)
from tests.legacy.test_era import make_era, new_session

pytestmark = pytest.mark.anyio

OPTIONS = LegacyOptions(keepalive_s=30, retry_ms=100, send_timeout_s=5)


class Gate:
    """What a waiting tool waits on, and whether it saw its cancellation."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False


def gated_catalog(gate: Gate) -> Catalog:
    catalog = Catalog("legacy-calls-test", "1.0.0")

    @catalog.tool
    async def plain(text: str) -> str:
        """Answers at once, with no Context."""
        return text.upper()

    @catalog.tool
    async def waits() -> str:
        """Waits for the test to let it go."""
        gate.entered.set()
        try:
            await gate.release.wait()
        except asyncio.CancelledError:
            gate.cancelled = True
            raise
        return "released"

    @catalog.tool
    async def reports(ctx: Context) -> str:
        """Sends a log line before its result."""
        await ctx.info("working")
        return "reported"

    return catalog


class Setup:
    def __init__(self, era: LegacyEra, session: Session) -> None:
        self.era = era
        self.session = session
        self.runtime = SessionRuntime(session.id, 64)
        self.sent: list[MutableMapping[str, Any]] = []

    def call(self, name: str, arguments: dict[str, Any] | None = None, id: Any = 1) -> LegacyCall:
        request = Request(id, "tools/call", {"name": name, "arguments": arguments or {}})
        return LegacyCall(request, self.era.resolve(request), self.session, self.runtime)

    def answer(self) -> Answer:
        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()  # the client stays
            return {}

        async def send(message: MutableMapping[str, Any]) -> None:
            self.sent.append(message)

        return Answer(receive, send, self.runtime, OPTIONS, priming=True, sse_ok=False)


async def setup(gate: Gate | None = None) -> Setup:
    era = make_era(gated_catalog(gate or Gate()))
    return Setup(era, await new_session(era))


def body_of(outcome: tuple[bytes | None, int, Any]) -> dict[str, Any]:
    assert outcome[0] is not None
    decoded: dict[str, Any] = orjson.loads(outcome[0])
    return decoded


# -- the era's side: start ------------------------------------------------------------------------


async def test_a_plain_tool_is_done_at_once_and_opens_no_stream() -> None:
    s = await setup()
    answer = s.answer()
    handling = s.era.start(s.call("plain", {"text": "hi"}), answer)
    assert type(handling) is Handling
    assert handling.done
    result = handling.result
    assert isinstance(result, dict)
    assert result["content"] == [{"type": "text", "text": "HI"}]
    assert answer.stream is None


async def test_what_a_call_sends_goes_to_its_outbox() -> None:
    s = await setup()
    answer = s.answer()
    outcome = await outcome_of(s.era, s.call("reports"), answer)
    assert body_of(outcome)["result"]["content"] == [{"type": "text", "text": "reported"}]
    assert answer.stream is not None  # the log line opened it
    sent = [orjson.loads(event.payload) for _, event in answer.stream.events_after(0)]
    assert [message["method"] for message in sent] == ["notifications/message"]


# -- inline ---------------------------------------------------------------------------------------


async def test_an_inline_call_answers_and_leaves_the_in_flight_table() -> None:
    s = await setup()
    outcome = await run_inline(s.era, s.call("plain", {"text": "a"}), s.answer())
    assert body_of(outcome)["result"]["content"] == [{"type": "text", "text": "A"}]
    assert outcome[1:] == (200, None)
    assert s.runtime.inflight == {}


async def test_a_failure_is_answered_as_its_wire_error() -> None:
    s = await setup()
    outcome = await run_inline(s.era, s.call("nope"), s.answer())
    assert body_of(outcome)["error"]["code"] == -32602
    assert outcome[2] is not None
    assert outcome[2].code == -32602
    assert s.runtime.inflight == {}


async def test_the_calls_own_cancellation_ends_it_without_a_response() -> None:
    gate = Gate()
    s = await setup(gate)
    running = asyncio.ensure_future(run_inline(s.era, s.call("waits", id=7), s.answer()))
    with anyio.fail_after(2):
        await gate.entered.wait()
    inline = s.runtime.inflight[7]
    assert isinstance(inline, InlineCall)
    assert inline.cancel() is True
    assert inline.cancel() is True  # asked twice, cancelled once
    with anyio.fail_after(2):
        assert await running == CANCELLED
    assert gate.cancelled
    assert not running.cancelled()  # the request's task goes on to answer
    assert s.runtime.inflight == {}
    assert inline.done()
    assert inline.cancel() is False


async def test_any_other_cancellation_goes_on_up_and_ends_the_answer() -> None:
    gate = Gate()
    s = await setup(gate)
    answer = s.answer()
    running = asyncio.ensure_future(run_inline(s.era, s.call("waits", id=8), answer))
    with anyio.fail_after(2):
        await gate.entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert answer.over
    assert answer.final is None
    assert s.runtime.inflight == {}


# -- in a task of its own -------------------------------------------------------------------------


async def test_a_call_in_its_own_task_finishes_its_stream_with_the_response() -> None:
    s = await setup()
    task, stream = start_in_task(s.era, s.call("plain", {"text": "b"}, id=3))
    assert s.runtime.inflight[3] is task
    with anyio.fail_after(2):
        outcome = await task
    assert stream.finished
    last = [event.payload for _, event in stream.events_after(0)][-1]
    assert last == outcome[0]
    assert s.runtime.inflight == {}


async def test_a_call_cancelled_before_its_first_step_finishes_its_stream() -> None:
    s = await setup()
    task, stream = start_in_task(s.era, s.call("plain", {"text": "c"}, id=4))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)  # the done callback
    assert stream.finished
    assert s.runtime.inflight == {}


async def test_a_call_in_its_own_task_is_stopped_by_notifications_cancelled() -> None:
    gate = Gate()
    s = await setup(gate)
    task, stream = start_in_task(s.era, s.call("waits", id=5))
    with anyio.fail_after(2):
        await gate.entered.wait()
    assert s.era.cancel(s.runtime, {"requestId": 5}) is True
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert gate.cancelled
    assert stream.finished
    assert [event.payload for _, event in stream.events_after(0)] == []  # no response
    assert s.runtime.inflight == {}
