"""A request's answer, shaped by what the request does: JSON, an SSE stream, or padded JSON.

:class:`ResponseWriter`: a handler that finishes without sending anything gets one
``application/json`` response; its first notification (progress, a log message) turns the
response into SSE, which carries the rest and the result. So does a silence of
``keepalive_s``, with keep-alive comments, so a proxy's idle timeout does not cut a long
silent call (as the official SDKs do). A client that takes no ``text/event-stream`` gets
whitespace before its JSON instead (:data:`PADDING`, RFC 8259's ``ws``). Both commit the
status to 200, so a later failure is the JSON-RPC error in the body. Frames are
:mod:`server.transport.sse`'s, bounded sends :mod:`server.transport.send`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from server.aio import TimerKey, coarse_timers, create_task, current_task
from server.asgi import Send
from server.transport.send import send_json, send_within
from server.transport.sse import KEEP_ALIVE, SSE_HEADERS, sse_frame

PADDING = b" "
"""What keeps a silent JSON answer alive: whitespace before the value, which JSON allows."""

PADDED_HEADERS = [
    (b"content-type", b"application/json"),  # first: the draft looks for it there
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
]


class ResponseWriter:
    """JSON unless the request sends something before its result, or stays silent for
    ``keepalive_s``; then SSE, or, for a client that takes only JSON, JSON led by whitespace.

    A response becomes a stream the moment the request sends its first message before the result
    (progress, a log line), or when :meth:`watch_silence` was called and nothing at all was sent
    for ``keepalive_s``: a proxy or load balancer with an idle timeout (often 60 s) would
    otherwise cut a silent call. From then on a keep-alive task sends a filler every
    ``keepalive_s`` until the result: the SSE comment :data:`~server.transport.sse.KEEP_ALIVE`,
    or, for a client whose Accept has no ``text/event-stream``, :data:`PADDING`, whitespace
    before the JSON body (RFC 8259 allows whitespace before a value; no JSON parser the MCP
    clients use rejects it). Either way the status is then 200, and a failure that comes later
    is the JSON-RPC error in the body, as on any stream. Watching for silence is one coarse
    timer (a dict entry, :mod:`server.aio`), armed only once a request has lasted long enough to
    be watched for a disconnect (the writer itself is made then too): a call that answers within
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
        stalled keep-alive cancels. Given to
        :class:`~server.transport.disconnect.DisconnectWatch` as ``on_watching``, it costs
        nothing to a call that answers before the watch starts."""
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

    def finish(
        self, payload: bytes, status: int = 200, extra: list[tuple[bytes, bytes]] | None = None
    ) -> Awaitable[None]:
        """Send the final message (result or error) and end the response: a JSON answer (most)
        is send_json's own awaitable, with the ``extra`` headers (an error's Retry-After).
        Raises TimeoutError if the stream is (or becomes) stalled."""
        self.unwatch_silence()
        if not (self.streaming or self.padded) and (self._json_ok or status != 200):
            return send_json(self._send, status, payload, extra)
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


class LazyWriter:
    """A request's :class:`ResponseWriter`, made the first time something needs it (a message
    sent before the result, a silence to watch, an SSE answer): most calls answer with plain
    JSON and never do. One object per call that may send, not two closures and a cell."""

    __slots__ = ("_json_ok", "_keepalive_s", "_send", "_send_timeout_s", "_sse_ok", "writer")

    def __init__(
        self, send: Send, json_ok: bool, sse_ok: bool, keepalive_s: float, send_timeout_s: float
    ) -> None:
        self._send, self._json_ok, self._sse_ok = send, json_ok, sse_ok
        self._keepalive_s, self._send_timeout_s = keepalive_s, send_timeout_s
        self.writer: ResponseWriter | None = None

    def opened(self) -> ResponseWriter:
        writer = self.writer
        if writer is None:
            writer = self.writer = ResponseWriter(
                self._send,
                json_ok=self._json_ok,
                sse_ok=self._sse_ok,
                keepalive_s=self._keepalive_s,
                send_timeout_s=self._send_timeout_s,
            )
        return writer

    async def emit(self, payload: bytes) -> None:
        """What the call sends before its result (progress, a log message)."""
        await self.opened().emit(payload)
