"""Where a legacy call runs: inline in its request's task, or in a task of its own.

The era starts the call (:meth:`~server.legacy.era.LegacyEra.start`, a
:class:`~server.dispatch.Handling`); this side looks at ``done``, watches the client only
while it waits, and turns a failure into its wire error. :func:`run_inline` runs a single
request's call in the request's own task (docs/decisions.md#inline-legacy-calls), cancelled
through the :class:`InlineCall` in the session's in-flight table; :func:`start_in_task` gives
the calls of a batch (:func:`answer_batch`) and of the HTTP+SSE transport a task each, their
stream open from the start. A call never moves between tasks; whatever happens, its stream is
finished and it leaves the in-flight table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

from server.aio import create_task, current_task
from server.asgi import Send
from server.errors import InvalidRequest, WireError, wire_error
from server.jsonrpc import Notification, Response, encode_error, encode_result
from server.legacy.calls import LegacyCall
from server.legacy.era import LegacyEra
from server.legacy.eventstream import EventStream
from server.legacy.exchange import Outbox
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.records.draft import Draft
from server.transport.legacy_answer import Answer, LegacyOptions
from server.transport.response_writer import ResponseWriter
from server.transport.send import send_empty

# A call's answer: the response (None: cancelled, the spec wants no response at all), its HTTP
# status, and the wire error (its code and message for the record, its headers) when it failed.
Outcome = tuple[bytes | None, int, WireError | None]
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
        return encode_error(request.id, wire.body), wire.status, wire


async def run_inline(era: LegacyEra, call: LegacyCall, answer: Answer) -> Outcome:
    """Run ``call`` inline, in the current task, to its end, writing what it sends to
    ``answer``; a cancellation that is the call's own (:class:`InlineCall`) ends it without a
    response and is swallowed here, any other is raised."""
    owner = current_task()
    assert owner is not None
    inline = InlineCall(owner)
    inflight, request_id = call.runtime.inflight, call.request.id
    inflight[request_id] = inline
    answer.request_id = request_id
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
    stream = runtime.open_stream(replayable=replayable, request_id=request_id)
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


async def answer_batch(
    send: Send,
    era: LegacyEra,
    options: LegacyOptions,
    session: Session,
    runtime: SessionRuntime,
    messages: list[LegacyCall | Notification | Response],
    draft: Draft,
    take: Callable[[Notification | Response], Awaitable[None]],
) -> None:
    """A JSON-RPC batch (2025-03-26 only): its notifications and answers ``take``n, each of its
    calls run in a task of its own; one whose id is running already (before, or earlier in the
    batch) is refused, in the record too. One JSON array answers it, whatever the Accept."""
    if session.protocol_version != "2025-03-26":
        raise InvalidRequest("Invalid request: batches exist only in protocol version 2025-03-26")
    running: list[bytes | tuple[asyncio.Task[Outcome], EventStream]] = []
    for message in messages:
        if not isinstance(message, LegacyCall):
            await take(message)
        elif message.request.method == "initialize":
            refusal = InvalidRequest("initialize must not be part of a batch")
            running.append(encode_error(message.request.id, wire_error(refusal, "legacy").body))
        elif message.request.id in runtime.inflight:
            wire = wire_error(DuplicateId(message.request.id), "legacy")
            draft.error(wire.code, wire.message)
            running.append(encode_error(message.request.id, wire.body))
        else:
            running.append(start_in_task(era, message))
    # A batch is answered as one JSON array, whatever the Accept: padded with whitespace
    # while its calls are silent, so that an idle timeout on the way does not cut it.
    writer = ResponseWriter(
        send,
        json_ok=True,
        sse_ok=False,
        keepalive_s=options.keepalive_s,
        send_timeout_s=options.send_timeout_s,
        stall_cancels=False,  # the calls end as they would for a client that left
    )
    owner = current_task()
    assert owner is not None
    writer.watch_silence(owner)
    try:
        answers = []
        for each in running:
            if isinstance(each, bytes):
                answers.append(each)
                continue
            task, stream = each
            await asyncio.wait((task,))  # waiting cancels nothing if the batch is cancelled
            runtime.drop_stream(stream)
            if not task.cancelled() and (final := task.result()[0]) is not None:
                answers.append(final)  # a cancelled call has no answer
        if not answers and not writer.padded:
            await send_empty(send, 202)
            return
        await writer.finish(b"[" + b",".join(answers) + b"]" if answers else b"")
    except TimeoutError:
        return  # the client stopped reading: the server's HTTP protocol resets it
    finally:
        writer.close()
