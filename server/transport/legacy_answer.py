"""The HTTP answer to one legacy call: JSON when it sends nothing first, else resumable SSE.

The call runs inline in the request's task (:func:`server.transport.legacy_calls.run_inline`)
and the :class:`Answer` is its outbox. A call that sends nothing before its result is answered
with plain JSON: no second task, no event stream. Its first message (or ``keepalive_s`` of
silence, or a client that takes only SSE) opens the stream: a writer task sends a priming
event, every message with an id (resumable with ``GET`` + ``Last-Event-ID``) and keep-alive
comments, while the call goes on. A disconnect is not a cancellation in this era: the call
opens its stream so what it sends is kept for a resume; only ``notifications/cancelled`` or
the session's end stop it. Why inline, and what it costs:
docs/decisions.md#inline-legacy-calls.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from server.aio import TimerKey, coarse_timers, create_task
from server.asgi import Receive, Send
from server.legacy.eventstream import EventStream
from server.legacy.runtime import SessionRuntime
from server.transport.disconnect import DisconnectWatch
from server.transport.response_writer import ResponseWriter
from server.transport.send import send_body, send_empty, send_json
from server.transport.sse import KEEP_ALIVE, SSE_HEADERS, pump, sse_frame


@dataclass(frozen=True, slots=True)
class LegacyOptions:
    keepalive_s: float
    retry_ms: int
    send_timeout_s: float


class Answer:
    """The HTTP side of one inline call, and its outbox: nothing while it sends nothing; its
    stream opened, and a writer task streaming it, from its first message (unless the client
    takes only JSON, or has gone); for a silent call, its stream opened (or its JSON padded)
    once it is silent for keepalive_s."""

    __slots__ = (
        "_disconnect",
        "_options",
        "_receive",
        "_send",
        "_silence",
        "extra",
        "final",
        "left",
        "over",
        "padding",
        "priming",
        "request_id",
        "runtime",
        "silenced",
        "sse_ok",
        "status",
        "stream",
        "writer",
    )

    def __init__(
        self,
        receive: Receive,
        send: Send,
        runtime: SessionRuntime,
        options: LegacyOptions,
        *,
        priming: bool,
        sse_ok: bool,
    ) -> None:
        self._receive = receive
        self._send = send
        self._options = options
        self.request_id: str | int | None = None  # the call's, for its stream's copy
        self.runtime = runtime
        self.priming = priming
        self.sse_ok = sse_ok
        # The call's event stream, once it needs one.
        self.stream: EventStream | None = None
        self.status = 200
        # The response itself; None while running, and forever if the call was cancelled.
        self.final: bytes | None = None
        self.extra: list[tuple[bytes, bytes]] | None = None
        self.over = False
        self.writer: asyncio.Task[str] | None = None
        # The JSON answer of a client that takes no SSE, padded with whitespace while silent.
        self.padding: ResponseWriter | None = None
        self._silence: TimerKey | None = None
        self._disconnect: DisconnectWatch | None = None
        self.silenced = False
        self.left = False

    # -- the call's outbox (what its exchange sends through) --------------------------------

    def open(self) -> EventStream:
        """The call's stream, opened on first need, and streamed from then on to a client that
        takes SSE and is there."""
        stream = self.stream
        if stream is None:
            stream = self.stream = self.runtime.open_stream(request_id=self.request_id)
            self._quiet()
            if self.sse_ok and not self.left:
                self.writer = create_task(self.write(stream, stream.generation))
        return stream

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

    def end(
        self,
        payload: bytes | None,
        status: int = 200,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """The call is over: ``payload`` is its response (None: cancelled, no response), with
        ``extra`` headers (a refusal's Retry-After) if it is still the response's own."""
        self.over = True
        self.final, self.status, self.extra = payload, status, extra
        if self.stream is not None:
            self.stream.finish(payload)

    # -- while the call waits ----------------------------------------------------------------

    def __enter__(self) -> Answer:
        """Watch a call that waits: the client, for :meth:`leave` (cancelling nothing), and
        past the watch's delay the call's silence, for :meth:`silent`."""
        watch = DisconnectWatch(self._receive, self.leave, self._watching)
        self._disconnect = watch.__enter__()
        return self

    def _watching(self, task: asyncio.Task[Any]) -> None:
        """The call has lasted (the disconnect watch starts): watch its silence too."""
        if self.stream is not None or self.left:
            return  # streaming already, with its keep-alives; or nobody to keep
        options, waited_s = self._options, DisconnectWatch.WATCH_AFTER_S
        if self.sse_ok:
            delay = max(options.keepalive_s - waited_s, 0.0)
            self._silence = coarse_timers().call_later(delay, self.silent)
            return
        # The legacy rule: a client that stops reading does not cancel the call.
        self.padding = ResponseWriter(
            self._send,
            json_ok=True,
            sse_ok=False,
            keepalive_s=options.keepalive_s,
            send_timeout_s=options.send_timeout_s,
            stall_cancels=False,
        )
        self.padding.watch_silence(task, waited_s)

    def __exit__(self, *exc_info: object) -> None:
        self._quiet()
        if self.padding is not None:
            self.padding.unwatch_silence()  # a padding already begun goes on to the answer
        disconnect, self._disconnect = self._disconnect, None  # it holds self.leave: no cycle
        if disconnect is not None:
            disconnect.__exit__(*exc_info)

    def _quiet(self) -> None:
        if self._silence is not None:
            coarse_timers().cancel(self._silence)
            self._silence = None

    def silent(self) -> None:
        """The call sent nothing for keepalive_s: it opens its stream, which keep-alive
        comments then keep open until its result (a proxy's idle timeout would cut it)."""
        self._silence = None
        if not self.over and self.stream is None:
            self.silenced = True
            self.open()

    def leave(self) -> None:
        """The client went away while the call waits: the call goes on, and what it sends
        from now on, and its result, are kept on its stream for a resume."""
        self.left = True
        self.close()
        if not self.over:
            self.open()

    def close(self) -> None:
        """Nothing more is written for the call: its padding stops."""
        self._quiet()
        if self.padding is not None:
            self.padding.close()

    async def finish(self, json_ok: bool) -> str | None:
        """Answer the call, which has ended; for a stream, why its connection ended."""
        if self.writer is not None:
            return await self.writer  # it writes the stream to its end
        if self.left:
            return "client_closed"
        if self.stream is not None:
            # The messages of a client that takes no SSE (they went nowhere), or of a
            # cancelled call: nothing to resume.
            self.runtime.drop_stream(self.stream)
        padding = self.padding
        if padding is not None and (self.final is not None or padding.padded):
            try:
                # The JSON answer; once padded, the rest of its body (none for a cancelled
                # call, whose padding alone then ends the response).
                await padding.finish(self.final or b"", self.status, self.extra)
            except TimeoutError:
                return "send_timeout"  # the client stopped reading; the call has ended
            return None
        if self.final is None:
            # Cancelled: the spec wants no response, so none is sent.
            if self.sse_ok:
                await self._send(
                    {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                )
                await self._send({"type": "http.response.body", "body": b""})
            else:
                await send_empty(self._send, 204)
            return None
        await send_json(self._send, self.status, self.final, self.extra)
        return None

    async def write(self, stream: EventStream, generation: int) -> str:
        """The call's stream as this response: the priming event (or, when its silence opened
        it, a keep-alive comment), then every message until the stream finishes, the client
        leaves, or the server ends the connection."""
        options = self._options
        try:
            await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if self.priming:
                priming = sse_frame(b"", event_id=stream.priming_id, retry_ms=options.retry_ms)
                await send_body(self._send, priming, options.send_timeout_s)
            elif self.silenced:
                await send_body(self._send, KEEP_ALIVE, options.send_timeout_s)
        except TimeoutError:
            return "send_timeout"  # the call goes on; its messages stay resumable
        # If the call already ended this connection (SSE polling), pump sends what there is
        # and closes; the client resumes from the priming id.
        return await pump(
            self._receive,
            self._send,
            stream,
            0,
            keepalive_s=options.keepalive_s,
            send_timeout_s=options.send_timeout_s,
            generation=generation,
        )
