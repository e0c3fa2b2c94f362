"""One call of a legacy session: its task, its stream, and its outcome.

A call runs in its own task (a disconnect is not a cancellation in this era; only
``notifications/cancelled`` or the session ending stops it) and writes everything it sends, the
response last, to its :class:`~server.legacy.eventstream.EventStream`; the HTTP side follows that
stream. Whatever happens (a result, an error, a cancellation even before the task's first step),
the stream is finished and the call leaves the session's in-flight table.

The task and the stream are the price of this era's semantics: even a plain JSON answer
travels through them (a legacy ``tools/call`` takes about twice a modern one's time in
process). Starting legacy calls eagerly in the request's task was measured and reverted: code
that captures the current task in its first step would then cancel the request's task instead
of the call's (docs/benchmarks.md, "Tried and left out").
"""

from __future__ import annotations

import asyncio

from server.aio import Started, create_task, current_task
from server.dispatch import Target
from server.errors import wire_error
from server.jsonrpc import Request, encode_error, encode_result
from server.legacy.era import LegacyEra, LegacyExchange
from server.legacy.eventstream import EventStream
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.protocol import PRIMING_SINCE


class Call:
    """One request running in a session: its task, its stream, and its HTTP status."""

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self.status = 200
        self.error: tuple[int, str] | None = None
        # The response itself; None while running, and forever if the call was cancelled.
        self.final: bytes | None = None
        # The task it created or showed, for the request's record.
        self.task: dict[str, str] | None = None


def start_call(
    era: LegacyEra, session: Session, runtime: SessionRuntime, request: Request, target: Target
) -> Call:
    """Run ``request`` (naming ``target``, as :meth:`LegacyEra.resolve` found it) in a task of
    its own."""
    call = Call(runtime.open_stream())
    task = create_task(_run(era, session, runtime, request, target, call))
    runtime.inflight[request.id] = task

    def settle(done: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs _run's cleanup: do it here.
        call.stream.finish()
        if runtime.inflight.get(request.id) is done:
            del runtime.inflight[request.id]

    task.add_done_callback(settle)
    return call


async def _run(
    era: LegacyEra,
    session: Session,
    runtime: SessionRuntime,
    request: Request,
    target: Target,
    call: Call,
) -> None:
    exchange = LegacyExchange(
        runtime,
        call.stream,
        era.client_request_timeout_s,
        resumable=session.protocol_version >= PRIMING_SINCE,
    )
    context = era.context(session, request, exchange)
    try:
        # Started eagerly (the only Started on this way): the handler timer is armed only for a
        # call that waits.
        started = Started(era.handle(session, runtime, request, context, target))
        result = started.result if started.done else await era.finish(request, started)
        payload = encode_result(request.id, result)
    except asyncio.CancelledError:
        call.stream.finish()  # cancelled: the spec wants no response at all
        raise
    except Exception as error:
        wire = wire_error(error, "legacy", request.method)
        payload = encode_error(request.id, wire.body)
        call.status = wire.status
        call.error = (wire.code, wire.message)
    finally:
        context.finish()
        call.task = context.task_outcome
        if runtime.inflight.get(request.id) is current_task():
            del runtime.inflight[request.id]
    call.final = payload
    call.stream.finish(payload)


async def finished(stream: EventStream) -> None:
    while not stream.finished:
        await stream.wait_beyond(stream.last_seq, stream.generation)
