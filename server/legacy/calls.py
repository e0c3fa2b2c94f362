"""One call of a legacy session: its task, its stream, and its outcome.

A call runs in its own task (a disconnect is not a cancellation in this era; only
``notifications/cancelled`` or the session ending stops it) and writes everything it sends, the
response last, to its :class:`~server.legacy.eventstream.EventStream`; the HTTP side follows that
stream. Whatever happens (a result, an error, a cancellation even before the task's first step),
the stream is finished and the call leaves the session's in-flight table.
"""

from __future__ import annotations

import asyncio
import logging

from server.aio import create_task, current_task
from server.errors import InternalError, McpError, http_status
from server.jsonrpc import Request, encode_error, encode_result
from server.legacy.era import LegacyEra, LegacyExchange
from server.legacy.eventstream import EventStream
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.protocol import PRIMING_SINCE

log = logging.getLogger(__name__)


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


def start_call(era: LegacyEra, session: Session, runtime: SessionRuntime, request: Request) -> Call:
    call = Call(runtime.open_stream())
    task = create_task(_run(era, session, runtime, request, call))
    runtime.inflight[request.id] = task

    def settle(done: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs _run's cleanup: do it here.
        call.stream.finish()
        if runtime.inflight.get(request.id) is done:
            del runtime.inflight[request.id]

    task.add_done_callback(settle)
    return call


async def _run(
    era: LegacyEra, session: Session, runtime: SessionRuntime, request: Request, call: Call
) -> None:
    exchange = LegacyExchange(
        runtime,
        call.stream,
        era.client_request_timeout_s,
        resumable=session.protocol_version >= PRIMING_SINCE,
    )
    context = era.context(session, request, exchange)
    try:
        result = await era.handle(session, runtime, request, context)
        payload = encode_result(request.id, result)
    except McpError as error:
        payload = encode_error(request.id, error.to_wire("legacy"))
        call.status = http_status(error, "legacy")
        call.error = (error.wire_code("legacy"), error.message)
    except asyncio.CancelledError:
        call.stream.finish()  # cancelled: the spec wants no response at all
        raise
    except Exception:
        log.exception("%s failed", request.method)
        payload = encode_error(request.id, InternalError("Internal error").to_wire("legacy"))
        call.error = (InternalError.code, "Internal error")
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
