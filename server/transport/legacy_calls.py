"""Where a legacy call runs: inline in its request's task, or in a task of its own.

The era starts the call (:meth:`~server.legacy.era.LegacyEra.start`, a
:class:`~server.dispatch.Handling`); this side looks at ``done``, watches the client only
while it waits, and turns a failure into its wire error. :func:`run_inline` runs a single
request's call in the request's own task (docs/decisions.md#inline-legacy-calls), cancelled
through the :class:`InlineCall` in the session's in-flight table; :func:`start_in_task` gives
the calls of a batch and of the HTTP+SSE transport a task each, their stream open from the
start. A call never moves between tasks; whatever happens, its stream is finished and it
leaves the in-flight table.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager

from server.aio import create_task, current_task
from server.errors import InvalidRequest, wire_error
from server.jsonrpc import encode_error, encode_result
from server.legacy.calls import LegacyCall
from server.legacy.era import LegacyEra
from server.legacy.eventstream import EventStream
from server.legacy.exchange import Outbox
from server.transport.legacy_answer import Answer

# A call's answer: the response (None: cancelled, the spec wants no response at all), its HTTP
# status, and the wire error's (code, message) for the record when it failed.
Outcome = tuple[bytes | None, int, tuple[int, str] | None]
CANCELLED: Outcome = (None, 200, None)


class DuplicateId(InvalidRequest):
    """A request whose id is that of a request of the session still running: it would run
    beyond cancellation, the session's end and the pending cap, which all go by id."""

    def __init__(self, request_id: str | int) -> None:
        super().__init__(
            f"Invalid request: id {request_id!r} is that of a request of this session still "
            "running; give each request an id of its own"
        )


class InlineCall:
    """A call running inline in a request's task, as the session's in-flight table sees it
    (:class:`~server.legacy.runtime.Running`)."""

    __slots__ = ("cancelled", "over", "owner")

    def __init__(self, owner: asyncio.Task[object]) -> None:
        self.owner = owner
        # Whether the session or the client cancelled it (the request's task then goes on).
        self.cancelled = False
        self.over = False

    def cancel(self) -> bool:
        """``notifications/cancelled`` or the session ending: stop the call."""
        if self.over or self.owner.done():
            return False
        if self.cancelled:
            return True  # asked once: the task's cancel count stays one to undo
        self.cancelled = True
        return self.owner.cancel()

    def done(self) -> bool:
        return self.over or self.owner.done()


async def outcome_of(
    era: LegacyEra,
    call: LegacyCall,
    outbox: Outbox,
    watch: AbstractContextManager[object] | None = None,
) -> Outcome:
    """Run ``call`` to its answer, in the current task; ``watch`` is entered only if it waits.
    A cancellation goes on up."""
    request = call.request
    try:
        handling = era.start(call, outbox)
        if handling.done:
            result = handling.result
        elif watch is None:
            result = await handling
        else:
            with watch:
                result = await handling
        return encode_result(request.id, result), 200, None
    except Exception as error:
        wire = wire_error(error, "legacy", request.method)
        return encode_error(request.id, wire.body), wire.status, (wire.code, wire.message)


async def run_inline(era: LegacyEra, call: LegacyCall, answer: Answer) -> Outcome:
    """Run ``call`` inline, in the current task, to its end, writing what it sends to
    ``answer``; a cancellation that is the call's own (:class:`InlineCall`) ends it without a
    response and is swallowed here, any other is raised."""
    owner = current_task()
    assert owner is not None
    inline = InlineCall(owner)
    inflight, request_id = call.runtime.inflight, call.request.id
    inflight[request_id] = inline
    try:
        return await outcome_of(era, call, answer, answer)
    except asyncio.CancelledError:
        if not inline.cancelled:
            answer.end(None)  # no response, and its stream (if any) finished
            raise
        return CANCELLED
    finally:
        inline.over = True
        if inflight.get(request_id) is inline:
            del inflight[request_id]
        if inline.cancelled:
            # The cancellation asked for is the call's own (delivered, or swallowed by the
            # handler): the request's task goes on to answer, its cancel count as before.
            owner.uncancel()


def start_in_task(
    era: LegacyEra, call: LegacyCall, *, replayable: bool = True
) -> tuple[asyncio.Task[Outcome], EventStream]:
    """Run ``call`` in a task of its own, registered in the session's in-flight table; what it
    sends, and its response last, go to the stream returned with the task (one that keeps
    nothing when not ``replayable``). The task's result is the call's outcome; it is cancelled
    when the call is."""
    runtime, request_id = call.runtime, call.request.id
    stream = runtime.open_stream(replayable=replayable)
    task = create_task(_in_task(era, call, stream))
    runtime.inflight[request_id] = task

    def settle(done: asyncio.Task[Outcome]) -> None:
        # A cancelled call (even before its first step) sends no response: its stream ends.
        if not stream.finished:
            stream.finish(None)
        if runtime.inflight.get(request_id) is done:
            del runtime.inflight[request_id]

    task.add_done_callback(settle)
    return task, stream


async def _in_task(era: LegacyEra, call: LegacyCall, stream: EventStream) -> Outcome:
    try:
        outcome = await outcome_of(era, call, stream)
    finally:
        inflight = call.runtime.inflight
        if inflight.get(call.request.id) is current_task():
            del inflight[call.request.id]
    stream.finish(outcome[0])
    return outcome
