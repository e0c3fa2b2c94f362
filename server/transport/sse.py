"""Server-Sent Events on the MCP endpoint: the framing of every event, and the legacy pump.

:func:`sse_frame` writes every SSE frame the server sends (modern request and listen streams,
legacy call and GET streams with their ids, priming events with ``retry``, and
:data:`KEEP_ALIVE`), CRLF line ends. The bytes are sse-starlette's for the same fields
(tests/transport/test_sse.py checks it, and that the SDK client reads them back), but the
function is ours: that class takes text and costs several times the frame, and importing it
patches uvicorn's exit handling for the whole process (docs/decisions.md#own-sse-framing).
Listen streams are not its ``EventSourceResponse`` either
(docs/decisions.md#listen-streams-in-request-task). :func:`pump` writes a resumable legacy
stream from its event log, with keep-alive comments, every send bounded by the send timeout.
"""

from __future__ import annotations

import asyncio
import re

from server.aio import Deadline
from server.asgi import Receive, Send
from server.legacy.eventstream import EventStream
from server.transport.disconnect import DisconnectWatch, uncancel
from server.transport.send import END_OF_BODY, send_body, send_within

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
CRLF = b"\r\n"
CR, LF = CRLF


def sse_frame(
    data: bytes | None = None,
    *,
    event_id: str | None = None,
    retry_ms: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One SSE frame, its fields in sse-starlette's order (comment, ``id``, ``event``, ``data``,
    ``retry``), lines ended by CRLF, then the blank line that ends the frame. A frame with data
    is a JSON-RPC message (``event: message``); empty data is a priming event (an id to resume
    from, no message); a comment alone is a keep-alive. Data with line breaks becomes several
    ``data:`` lines (the client joins them with ``\\n``); orjson never writes one, so a message
    is one line, copied once."""
    parts: list[bytes] = []
    if comment is not None:
        for line in _LINE_BREAK.split(comment.encode()):
            parts += (b": ", line, CRLF)
    if event_id is not None:
        if "\n" in event_id or "\r" in event_id or "\0" in event_id:
            # A client would cut the id at the break or drop it: resuming would go wrong.
            raise ValueError(f"an SSE event id cannot hold CR, LF or NUL: {event_id!r}")
        parts += (b"id: ", event_id.encode(), CRLF)
    if data:
        parts.append(b"event: message\r\n")
    if data is not None:
        if LF in data or CR in data:  # ints: a memchr each, 4x faster than bytes needles
            for line in _LINE_BREAK.split(data):
                parts += (b"data: ", line, CRLF)
        else:
            parts += (b"data: ", data, CRLF)
    if retry_ms is not None:
        parts.append(b"retry: %d\r\n" % retry_ms)
    parts.append(CRLF)
    return b"".join(parts)


KEEP_ALIVE = sse_frame(comment="")
"""An empty comment: keeps proxies from closing a quiet stream; clients ignore it."""


async def pump(
    receive: Receive,
    send: Send,
    stream: EventStream,
    after: int,
    *,
    keepalive_s: float,
    send_timeout_s: float,
    generation: int | None = None,
) -> str:
    """Write a resumable stream's events after ``after`` until it finishes, the client leaves,
    or the server ends the connection on purpose (``generation`` moves on); then end the
    response. Keep-alive comments fill the silences. Every send, the end too, must finish
    within ``send_timeout_s``. Returns why it ended: ``complete``, ``client_closed``,
    ``send_timeout`` (the response left unfinished), or the reason the server gave for
    ending the connection."""
    generation = stream.generation if generation is None else generation
    cursor = after
    with DisconnectWatch(receive) as disconnect:
        try:
            while True:
                for seq, event in stream.events_after(cursor):
                    frame = sse_frame(event.payload, event_id=event.id)
                    await send_body(send, frame, send_timeout_s)
                    cursor = seq
                if stream.finished or stream.generation != generation:
                    break
                try:
                    async with Deadline(keepalive_s):
                        await stream.wait_beyond(cursor, generation)
                except TimeoutError:
                    await send_body(send, KEEP_ALIVE, send_timeout_s)
            await send_within(send, END_OF_BODY, send_timeout_s)
        except asyncio.CancelledError:
            if not disconnect.happened:
                raise
            uncancel()
            return "client_closed"
        except TimeoutError:
            return "send_timeout"  # the call's events stay resumable
    return "complete" if stream.generation == generation else stream.end_reason
