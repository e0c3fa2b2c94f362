"""One call of a legacy session: where it runs, its stream, and its outcome.

A call writes everything it sends, the response last, to its
:class:`~server.legacy.eventstream.EventStream`, which the HTTP side follows and a client
resumes with ``Last-Event-ID``. The stream is opened on first need (:meth:`Call.open`): most
calls send nothing before their result, and their answer is plain JSON that needs no ids, no
replay buffer and no follower. :attr:`Call.on_stream` hears the moment a stream opens, so the
HTTP side can start streaming it then.

A call runs in one of two places, and stays there for its whole life:

- inline, in the task of the HTTP request that carried it (:func:`run_call`, what a single
  request does). No task is created for it; the request's task is the call's, and
  ``notifications/cancelled`` or the session ending cancels that task through the
  :class:`Call` registered in the session's in-flight table (:meth:`Call.cancel` marks the
  cancellation as the call's own, so the request can tell it from any other);
- in a task of its own (:func:`start_call`: the calls of a batch, which run side by side).

A call is never moved from one task to another once started: code that captures the current
task in its first step (a deadline, a task group, the handler timer) would then act on the
wrong task (docs/decisions.md#inline-legacy-calls). Whatever happens (a result, an error, a
cancellation even before a task's first step), the stream, if any, is finished and the call
leaves the session's in-flight table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from server.aio import Started, create_task, current_task
from server.context import Caller, Context, Recorded
from server.dispatch import Target
from server.errors import wire_error
from server.jsonrpc import Request, encode_error, encode_result
from server.legacy.era import LegacyEra, LegacyExchange
from server.legacy.eventstream import EventStream
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.protocol import PRIMING_SINCE

# The caller, the request headers and the record's request_id, for the call's Context.
# Who calls and what the request was: the caller, the headers, the record, the client's key.
Origin = tuple[Caller | None, Mapping[bytes, bytes] | None, Recorded | None, str | None]

# Made once a call waits (never for one that answers at once): what watches the client
# meanwhile, without cancelling anything.
Watch = Callable[[], AbstractContextManager[object]]


class Call:
    """One request running in a session: its stream (once it needs one), its outcome, and
    the task it runs in, for ``notifications/cancelled``."""

    __slots__ = (
        "cancelled",
        "error",
        "final",
        "on_stream",
        "over",
        "owner",
        "runtime",
        "status",
        "stream",
        "task",
    )

    def __init__(self, runtime: SessionRuntime, stream: EventStream | None = None) -> None:
        self.runtime = runtime
        self.stream = stream
        # Told once, when the stream opens (the HTTP side starts streaming it then).
        self.on_stream: Callable[[EventStream], None] | None = None
        self.status = 200
        self.error: tuple[int, str] | None = None
        # The response itself; None while running, and forever if the call was cancelled.
        self.final: bytes | None = None
        # The task it created or showed, for the request's record.
        self.task: dict[str, str] | None = None
        # The task running an inline call, and whether the session or the client cancelled it.
        self.owner: asyncio.Task[object] | None = None
        self.cancelled = False
        self.over = False

    def open(self) -> EventStream:
        """The call's stream, opened on first need."""
        stream = self.stream
        if stream is None:
            stream = self.stream = self.runtime.open_stream()
            if self.on_stream is not None:
                self.on_stream(stream)
        return stream

    # What the call's exchange sends through (the shape of an EventStream's).

    @property
    def finished(self) -> bool:
        return self.over or (self.stream is not None and self.stream.finished)

    def publish(self, payload: bytes) -> object:
        if self.over:
            # As on a finished stream (and no stream opened once the answer is out).
            raise RuntimeError("the call is over: nothing more goes to its client")
        return self.open().publish(payload)

    def end_connections(self, reason: str = "server_closed") -> None:
        if not self.over:
            self.open().end_connections(reason)
        elif self.stream is not None:
            self.stream.end_connections(reason)

    def end(self, payload: bytes | None = None) -> None:
        """The call is over: ``payload`` is its response (None: cancelled, no response)."""
        self.over = True
        if payload is not None:
            self.final = payload
        if self.stream is not None:
            self.stream.finish(payload)

    # What the session's in-flight table asks of an inline call (a Task's shape).

    def cancel(self) -> bool:
        """``notifications/cancelled`` or the session ending: stop the call."""
        if self.owner is None or self.owner.done():
            return False
        if self.cancelled:
            return True  # asked once: the task's cancel count stays one to undo
        self.cancelled = True
        return self.owner.cancel()

    def done(self) -> bool:
        return self.over or self.owner is None or self.owner.done()


def start_call(
    era: LegacyEra,
    session: Session,
    runtime: SessionRuntime,
    request: Request,
    target: Target,
    origin: Origin | None = None,
) -> Call:
    """Run ``request`` (naming ``target``, as :meth:`LegacyEra.resolve` found it) in a task of
    its own, its stream open from the start; ``origin`` is what its Context says of the HTTP
    request that carried it."""
    call = Call(runtime, runtime.open_stream())
    task = create_task(_run(era, session, runtime, request, target, call, origin, None))
    runtime.inflight[request.id] = task

    def settle(done: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs _run's cleanup: do it here.
        call.end()
        if runtime.inflight.get(request.id) is done:
            del runtime.inflight[request.id]

    task.add_done_callback(settle)
    return call


async def run_call(
    era: LegacyEra,
    session: Session,
    runtime: SessionRuntime,
    request: Request,
    target: Target,
    call: Call,
    origin: Origin | None,
    watch: Watch | None,
) -> None:
    """Run ``request`` inline, in the current task, to its end: a result or an error in
    ``call``, or a cancellation, which ends the call without a response and is swallowed here
    when it was the call's own (:meth:`Call.cancel`); any other cancellation is raised."""
    owner = call.owner = current_task()
    assert owner is not None
    runtime.inflight[request.id] = call
    try:
        await _run(era, session, runtime, request, target, call, origin, watch)
    except asyncio.CancelledError:
        if not call.cancelled:
            raise
    finally:
        if call.cancelled:
            # The cancellation asked for is the call's own (delivered, or swallowed by the
            # handler): the request's task goes on to answer, its cancel count as before.
            owner.uncancel()


async def _run(
    era: LegacyEra,
    session: Session,
    runtime: SessionRuntime,
    request: Request,
    target: Target,
    call: Call,
    origin: Origin | None,
    watch: Watch | None,
) -> None:
    context: Context | None = None
    try:
        if era.needs_context(request, target):
            context = _context(era, session, runtime, request, call, origin)
            handling = era.handle(session, runtime, request, context, target)
        else:
            handling = era.call_plain(request, target)  # most tools: no Context to make
        # Started eagerly (the only Started on this way): the handler timer, and the watch on
        # the client, are armed only for a call that waits.
        started = Started(handling)
        if started.done:
            result = started.result
        elif watch is None:
            result = await era.finish(request, started)
        else:
            with watch():
                result = await era.finish(request, started)
        payload = encode_result(request.id, result)
    except asyncio.CancelledError:
        call.end()  # cancelled: the spec wants no response at all
        raise
    except Exception as error:
        wire = wire_error(error, "legacy", request.method)
        payload = encode_error(request.id, wire.body)
        call.status = wire.status
        call.error = (wire.code, wire.message)
    finally:
        if context is not None:
            context.finish()
            call.task = context.task_outcome
        entry = runtime.inflight.get(request.id)
        if entry is call or (entry is not None and entry is current_task()):
            del runtime.inflight[request.id]
    call.end(payload)


def _context(
    era: LegacyEra,
    session: Session,
    runtime: SessionRuntime,
    request: Request,
    call: Call,
    origin: Origin | None,
) -> Context:
    exchange = LegacyExchange(
        runtime,
        call,
        era.client_request_timeout_s,
        resumable=session.protocol_version >= PRIMING_SINCE,
    )
    if origin is None:
        return era.context(session, request, exchange)
    caller, headers, record, client_key = origin
    return era.context(
        session,
        request,
        exchange,
        caller=caller,
        headers=headers,
        record=record,
        client_key=client_key,
    )


async def wait_finished(stream: EventStream) -> None:
    """Wait until ``stream`` has its last event (a batch's answers are sent together)."""
    while not stream.finished:
        await stream.wait_beyond(stream.last_seq, stream.generation)
