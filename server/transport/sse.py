"""Server-Sent Events on the MCP endpoint: the framing of every event, and the responses.

:func:`sse_frame` writes every SSE frame the server sends: the messages of modern request
streams and listen streams, the events of legacy call and GET streams with their ids, priming
events with ``retry``, and the keep-alive comment (:data:`KEEP_ALIVE`). Lines end with CRLF,
sse-starlette's default. The bytes are what sse-starlette's ``ServerSentEvent(...).encode()``
writes for the same fields (tests/transport/test_sse_frames.py checks that, and that the SDK
client's parser reads every field back), but the function is this module's own: that class
takes text, so orjson's bytes would be decoded, split by a regex, written through a
``StringIO`` and encoded again, several times the cost of the frame
(docs/decisions.md#own-sse-framing). The server does not import sse-starlette at all: its
import replaces uvicorn's ``Server.handle_exit`` for the whole process (its ``AppStatus``). The
tests keep it, as the reference for the bytes.

Nor are listen streams its ``EventSourceResponse``. A listen stream stays open as long as its
client, idle most of the time, reads a bounded queue with a send timeout, and is ended by the
hub (with the graceful result at shutdown); it runs in the request's own task, watched by a
:class:`DisconnectWatch` that is no task (server/transport/modern.py). An
``EventSourceResponse`` runs a task group per response (the writer, a ping task, a disconnect
listener, a server-exit listener on the process-global ``AppStatus``), which costs an idle
stream several times its memory (docs/decisions.md#listen-streams-in-request-task).

:class:`ResponseWriter` lets a request decide its response shape by what it does: a handler
that finishes without sending anything gets one ``application/json`` response; the first
notification it sends (progress, a log message) turns the response into an SSE stream, which
then carries the rest and the result. So does a silence of ``keepalive_s`` (MCP_KEEPALIVE_S):
a call that sends nothing for minutes would otherwise send no byte at all, and a proxy or load
balancer with an idle timeout (60 s is common) cuts it. As the official SDKs, FastMCP and the
Go SDK do, the answer then becomes SSE with keep-alive comments. A client whose Accept has no
``text/event-stream`` gets what JSON allows instead: whitespace before the value
(:data:`PADDING`, RFC 8259's ``ws``; Amazon S3 keeps its long CompleteMultipartUpload answers
alive the same way), rather than nothing, which would leave it to the proxy. Both commit the
status to 200, so a failure after the silence is the JSON-RPC error in the body, as on every
stream. Request streams are short and live inline in the request's task, so they cost no extra
tasks except a keep-alive while one is open. :func:`pump` writes a resumable legacy stream from
its event log until it ends or the client leaves, with keep-alive comments in its silences;
its sends, like a listen stream's, are bounded by the send timeout (:func:`send_within`).

Longer than 400 lines because: the framing, the response shapes, the writer, the pump and the
disconnect watch are every stream's send path, kept in one module so it has one set of rules.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from server.aio import (
    Deadline,
    TimerKey,
    coarse_timers,
    create_task,
    current_task,
    running_loop,
)
from server.asgi import ASGIMessage, Receive, Send
from server.legacy.eventstream import EventStream

log = logging.getLogger(__name__)

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

PADDING = b" "
"""What keeps a silent JSON answer alive: whitespace before the value, which JSON allows."""

PADDED_HEADERS = [
    (b"content-type", b"application/json"),  # first: the draft looks for it there
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]


def json_response_start(
    status: int, length: int, extra: list[tuple[bytes, bytes]] | None = None
) -> ASGIMessage:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    if extra:
        headers.extend(extra)
    return {"type": "http.response.start", "status": status, "headers": headers}


async def send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(json_response_start(status, len(body), extra))
    await send({"type": "http.response.body", "body": body})


async def send_empty(
    send: Send, status: int, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": extra or []})
    await send({"type": "http.response.body", "body": b""})


class ResponseWriter:
    """JSON unless the request sends something before its result, or stays silent for
    ``keepalive_s``; then SSE, or, for a client that takes only JSON, JSON led by whitespace.

    A response becomes a stream the moment the request sends its first message before the
    result (progress, a log line), or when :meth:`watch_silence` was called and nothing at all
    was sent for ``keepalive_s``: a proxy or load balancer with an idle timeout (often 60 s)
    would otherwise cut a silent call. From then on a keep-alive task sends a filler every
    ``keepalive_s`` until the result: the SSE comment :data:`KEEP_ALIVE`, or, for a client
    whose Accept has no ``text/event-stream``, :data:`PADDING`, whitespace before the JSON
    body (RFC 8259 allows whitespace before a value; no JSON parser the MCP clients use
    rejects it). Either way the status is then 200, and a failure that comes later is the
    JSON-RPC error in the body, as on any stream. Watching for silence is one coarse timer
    (a dict entry, :mod:`server.aio`), armed only once a request has lasted long enough to be
    watched for a disconnect (the writer itself is made then too): a call that answers within
    ``keepalive_s`` costs no task and sends its JSON as before.

    Every send on the stream must finish within ``send_timeout_s``. A client that stops
    reading is treated as one that closed the stream: the writer is ``stalled``, and (with
    ``stall_cancels``, the modern era's rule) the handler is cancelled (a send it was waiting
    on raises CancelledError; a keep-alive that times out cancels the request's task), nothing
    more is sent, and the response is left unfinished for the HTTP protocol to reset."""

    # One per call answered: slots make it cheaper to build and smaller to keep.
    __slots__ = (
        "_json_ok",
        "_keepalive",
        "_keepalive_s",
        "_lock",
        "_owner",
        "_send",
        "_send_timeout_s",
        "_silence",
        "_sse_ok",
        "_stall_cancels",
        "_started",
        "padded",
        "stalled",
        "streaming",
    )

    def __init__(
        self,
        send: Send,
        *,
        json_ok: bool,
        sse_ok: bool,
        keepalive_s: float,
        send_timeout_s: float,
        stall_cancels: bool = True,
    ) -> None:
        self._send = send
        self._json_ok = json_ok
        self._sse_ok = sse_ok
        self._keepalive_s = keepalive_s
        self._send_timeout_s = send_timeout_s
        self._stall_cancels = stall_cancels
        self._keepalive: asyncio.Task[None] | None = None
        self._owner: asyncio.Task[object] | None = None
        self._silence: TimerKey | None = None
        # Made when the response is committed: from then on the keep-alive task sends too.
        self._lock: asyncio.Lock | None = None
        self._started = False  # http.response.start sent
        self.streaming = False
        self.padded = False
        self.stalled = False

    @property
    def committed(self) -> bool:
        """Whether the status (200) and the shape are decided: a stream, or padded JSON."""
        return self.streaming or self.padded

    def watch_silence(self, owner: asyncio.Task[Any], waited_s: float = 0.0) -> None:
        """Commit the response (SSE, else padded JSON) if nothing is sent for ``keepalive_s``
        since the request began, ``waited_s`` ago; ``owner`` is the request's task, which a
        stalled keep-alive cancels. Given to :class:`DisconnectWatch` as ``on_watching``, it
        costs nothing to a call that answers before the watch starts."""
        self._owner = owner
        delay = max(self._keepalive_s - waited_s, 0.0)
        self._silence = coarse_timers().call_later(delay, self._fell_silent)

    def _fell_silent(self) -> None:
        self._silence = None
        if not (self.streaming or self.padded):
            self._commit(padded=not self._sse_ok, at_once=True)

    def unwatch_silence(self) -> None:
        if self._silence is not None:
            coarse_timers().cancel(self._silence)
            self._silence = None

    async def emit(self, payload: bytes) -> None:
        """Send a message that precedes the result (dropped if the client takes no SSE)."""
        if not self._sse_ok:
            return
        if not self.streaming:
            self._owner = current_task()
            self._commit(padded=False, at_once=False)
        try:
            await self._body(sse_frame(payload))
        except TimeoutError:
            raise asyncio.CancelledError from None  # the handler ends, as on a disconnect

    def finish(self, payload: bytes, status: int = 200) -> Awaitable[None]:
        """Send the final message (result or error) and end the response: a JSON answer (most)
        is send_json's own awaitable. Raises TimeoutError if the stream is (or becomes)
        stalled."""
        self.unwatch_silence()
        if not (self.streaming or self.padded) and (self._json_ok or status != 200):
            return send_json(self._send, status, payload)
        return self._finish_stream(payload)

    async def _finish_stream(self, payload: bytes) -> None:
        if not (self.streaming or self.padded):
            self.streaming = True  # a client that takes only SSE: the head and the result
        self._stop_keepalive()
        await self._body(payload if self.padded else sse_frame(payload), more_body=False)

    def close(self) -> None:
        self.unwatch_silence()
        self._stop_keepalive()

    def _commit(self, *, padded: bool, at_once: bool) -> None:
        """The response is a stream from now on (its head goes with the first body): start
        the keep-alive, whose first filler goes out ``at_once`` when silence committed it."""
        self.unwatch_silence()
        self.padded = padded
        self.streaming = not padded
        self._lock = asyncio.Lock()
        self._keepalive = create_task(self._keep_alive(at_once))

    def _body(self, body: bytes, *, more_body: bool = True) -> Awaitable[None]:
        if self._lock is None:  # no keep-alive task: the request's task sends alone
            return self._write(body, more_body)
        return self._write_locked(self._lock, body, more_body)

    async def _write_locked(self, lock: asyncio.Lock, body: bytes, more_body: bool) -> None:
        # Two senders (the request's task, the keep-alive task): the head must go first, once.
        async with lock:
            await self._write(body, more_body)

    async def _write(self, body: bytes, more_body: bool) -> None:
        if self.stalled:
            raise TimeoutError
        try:
            if not self._started:
                headers = PADDED_HEADERS if self.padded else SSE_HEADERS
                start = {"type": "http.response.start", "status": 200, "headers": headers}
                await send_within(self._send, start, self._send_timeout_s)
                self._started = True
            message = {"type": "http.response.body", "body": body, "more_body": more_body}
            await send_within(self._send, message, self._send_timeout_s)
        except TimeoutError:
            self.stalled = True
            raise

    async def _keep_alive(self, at_once: bool) -> None:
        filler = PADDING if self.padded else KEEP_ALIVE
        if not at_once:
            await asyncio.sleep(self._keepalive_s)
        while True:
            try:
                await self._body(filler)
            except TimeoutError:
                if self._stall_cancels and self._owner is not None:
                    self._owner.cancel()  # the handler ends, as on a disconnect
                return
            await asyncio.sleep(self._keepalive_s)

    def _stop_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None


# What a disconnect watch steps through: receive()'s coroutine, or another awaitable's iterator.
_Reading = Coroutine[Any, None, ASGIMessage] | Generator[Any, None, ASGIMessage]


class DisconnectWatch:
    """Cancel the current task if the client goes away (or, given ``on_disconnect``, call that
    instead: the legacy era, where a disconnect is not a cancellation); ``with`` gives the
    watch itself, whose ``happened`` says whether it did.

    The request's own task runs the handler, so a closed connection cancels the handler itself,
    as the 2026-07-28 spec requires. Watching starts only once the request has run for
    ``WATCH_AFTER_S``: a call that answers sooner (most do) never pays for it, and one that
    takes longer is watched for the rest of its life; ``on_watching`` (given the request's
    task) is called then, for whatever else only a request that lasts needs (the silence
    watch of :class:`ResponseWriter`). A plain (not async) context manager: arming and
    disarming never wait, and this runs on every request that waits.

    The watch is no task of its own. It drives ``receive()`` the way a task would, one step
    each time the future it waits on is done: an idle listen stream (open for hours, thousands
    of them) would otherwise hold a task for nothing but this, about 600 bytes more each
    (``tests/bench/streams_bench.py``). What ``receive`` awaits must then be an asyncio future
    (a bare ``yield`` also works): an ASGI server's ``receive`` always is; past anything else,
    or an error, the watch stops watching, as a task's failure would have.
    """

    WATCH_AFTER_S = 0.02
    __slots__ = (
        "_ended",
        "_on_disconnect",
        "_on_watching",
        "_pending",
        "_reading",
        "_receive",
        "_task",
        "_timer",
        "_timers",
        "happened",
    )

    def __init__(
        self,
        receive: Receive,
        on_disconnect: Callable[[], object] | None = None,
        on_watching: Callable[[asyncio.Task[Any]], object] | None = None,
    ) -> None:
        self._receive = receive
        self._on_disconnect = on_disconnect
        self._on_watching = on_watching
        self.happened = False
        self._reading: _Reading | None = None
        self._pending: asyncio.Future[Any] | None = None
        self._timer: TimerKey | None = None
        self._ended = False

    def __enter__(self) -> DisconnectWatch:
        task = current_task()
        assert task is not None
        self._task = task
        self._timers = coarse_timers()
        self._timer = self._timers.call_later(self.WATCH_AFTER_S, self._start)
        return self

    def _start(self) -> None:
        self._timer = None
        if self._on_watching is not None:
            self._on_watching(self._task)
        self._read()

    def _read(self) -> None:
        reading = self._receive()
        # A coroutine (any server's receive) is stepped as it is; any other awaitable through
        # its iterator (one object more).
        self._reading = reading if isinstance(reading, Coroutine) else reading.__await__()
        self._step(None)

    def _read_next(self) -> None:
        if not self._ended:
            self._read()

    def _step(self, _done: object) -> None:
        """One step of ``receive()`` (what a task's step does), until it returns a message."""
        reading = self._reading
        if reading is None:  # ended while this step was on its way
            return
        self._pending = None
        try:
            waiting_on = reading.send(None)
        except StopIteration as finished:
            message = finished.value
            if message["type"] == "http.disconnect":
                self._reading = None
                self.happened = True
                (self._on_disconnect or self._task.cancel)()
            else:
                # More of the body: not what is watched for. Read on from the next loop turn
                # (a receive that answers at once must not recurse, nor hold the loop).
                self._reading = None
                running_loop().call_soon(self._read_next)
            return
        except asyncio.CancelledError:
            self._reading = None  # what it waited on was cancelled: nothing more to read
            return
        except Exception:
            log.exception("the disconnect watch stopped: receive() failed")
            self._reading = None
            return
        if getattr(waiting_on, "_asyncio_future_blocking", None):
            waiting_on._asyncio_future_blocking = False
            self._pending = waiting_on
            waiting_on.add_done_callback(self._step)
        elif waiting_on is None:  # a bare yield: the next loop turn
            running_loop().call_soon(self._step, None)
        else:
            log.error("the disconnect watch stopped: receive() awaits %r", waiting_on)
            self._stop()

    def _stop(self) -> None:
        reading, self._reading = self._reading, None
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.remove_done_callback(self._step)
            pending.cancel()  # as a task's cancellation would: nobody waits for it now
        if reading is not None:
            reading.close()

    def __exit__(self, *exc_info: object) -> None:
        self._ended = True
        if self._timer is not None:
            self._timers.cancel(self._timer)
        self._stop()


def uncancel() -> None:
    """Swallow the cancellation the disconnect watch caused (the request simply ends)."""
    task = asyncio.current_task(running_loop())
    if task is not None:
        task.uncancel()


END_OF_BODY: ASGIMessage = {"type": "http.response.body", "body": b""}


async def send_within(send: Send, message: ASGIMessage, timeout_s: float) -> None:
    """Send, or raise TimeoutError after ``timeout_s``: a send waits while the client does not
    read (uvicorn's flow control), and a client that stops reading must not keep a stream.
    The caller then returns with its response unfinished, and the server's HTTP protocol
    aborts the connection (server/serving/uvicorn_protocol.py)."""
    async with Deadline(timeout_s):
        await send(message)


def send_body(send: Send, body: bytes, timeout_s: float) -> Awaitable[None]:
    """One piece of a streamed body, within the send timeout."""
    return send_within(
        send, {"type": "http.response.body", "body": body, "more_body": True}, timeout_s
    )


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
