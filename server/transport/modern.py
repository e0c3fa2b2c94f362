"""The 2026-07-28 era over HTTP: a request answered as JSON or SSE, and listen streams.

A list page or ``server/discover`` that may be answered as JSON is the cached bytes, written at
once: no handler coroutine and no response writer (a quarter of a ``tools/list``'s time in
process, docs/benchmarks.md). Any other call runs inline in the request's task, started eagerly
(:class:`~server.aio.Started`): one that answers without waiting costs no disconnect watcher at
all, one that waits gets it armed then (a timer, and a watcher task past 20 ms). Its response
is JSON unless it sends something before its result. A closed response stream cancels the
handler, as the spec requires.
``subscriptions/listen`` streams are fed by the :class:`~server.hub.Hub` and written
here, in the request's own task, with keep-alive comments, a send timeout for clients that stop
reading, and the graceful result when the server shuts down (``Application.begin_shutdown``
closes every stream through the hub). They used sse-starlette's ``EventSourceResponse`` at
first: its task group (four tasks a stream) cost ~54 KiB per idle stream; this costs two tasks
(see docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from server.aio import Deadline, Started
from server.asgi import Receive, Send
from server.errors import InternalError, InvalidRequest, McpError, http_status
from server.hub import Closed, Hub, Stream
from server.jsonrpc import encode_error, encode_result
from server.modern.era import ModernCall, ModernEra
from server.records.draft import Draft
from server.transport.sse import (
    KEEP_ALIVE,
    SSE_HEADERS,
    Disconnect,
    DisconnectWatch,
    ResponseWriter,
    send_json,
    sse_frame,
    uncancel,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenListen:
    """A listen stream attached to the hub, not yet answered."""

    stream: Stream
    ack_frame: bytes
    request_id: Any


@dataclass(frozen=True, slots=True)
class StreamOptions:
    keepalive_s: float
    send_timeout_s: float
    shutdown_grace_s: float


class ModernHttp:
    def __init__(self, modern: ModernEra, hub: Hub, options: StreamOptions) -> None:
        self.modern = modern
        self.hub = hub
        self.options = options

    async def answer(
        self,
        receive: Receive,
        send: Send,
        call: ModernCall,
        draft: Draft,
        *,
        json_ok: bool,
        sse_ok: bool,
    ) -> None:
        if json_ok:
            # A cached page (lists, discover) is answered at once: nothing to wait for, so no
            # response writer and no handler coroutine. A refusal (a bad cursor) takes the
            # general way below, which refuses it again and records why.
            try:
                cached = self.modern.cached_result(call)
            except McpError:
                cached = None
            if cached is not None:
                await send_json(send, 200, encode_result(call.request.id, cached))
                return
        writer = ResponseWriter(
            send, json_ok=json_ok, sse_ok=sse_ok, keepalive_s=self.options.keepalive_s
        )
        request_id = call.request.id
        disconnect: Disconnect | None = None
        try:
            try:
                started = Started(self.modern.handle(call, writer.emit))
                if started.done:
                    result = started.result  # answered without waiting: nothing to watch
                else:
                    with DisconnectWatch(receive) as disconnect:
                        result = await started
                payload = encode_result(request_id, result)
                status = 200
            except McpError as error:
                payload = encode_error(request_id, error.to_wire("modern"))
                status = http_status(error, "modern") if not writer.streaming else 200
                draft.error(error.wire_code("modern"), error.message)
            except Exception:
                log.exception("%s failed", call.request.method)
                payload = encode_error(request_id, InternalError("Internal error").to_wire())
                status = 200
                draft.error(InternalError.code, "Internal error")
        except asyncio.CancelledError:
            writer.close()
            if disconnect is not None and disconnect.happened:
                # The client closed the stream: that is the cancellation; nothing more is sent.
                uncancel()
                return
            raise
        try:
            await writer.finish(payload, status)
        finally:
            writer.close()

    def open_listen(self, call: ModernCall, *, sse_ok: bool) -> OpenListen:
        """Check a ``subscriptions/listen`` request and attach its stream to the hub; raises
        McpError (answered by the endpoint) when it cannot be served. What it returns is all
        the stream needs, so the caller can let go of the request itself."""
        if not sse_ok:
            raise InvalidRequest(
                "subscriptions/listen needs Accept: text/event-stream", http_status=406
            )
        granted, ack = self.modern.listen(call)
        request_id = call.request.id
        stream = self.hub.attach(self.modern.listen_frame(granted, request_id))
        # orjson's output keeps a 4 KiB buffer: only the exact-size frame is kept.
        return OpenListen(stream, sse_frame(ack), request_id)

    async def listen(self, receive: Receive, send: Send, opened: OpenListen, draft: Draft) -> None:
        try:
            await self._stream_listen(
                receive, send, opened.stream, opened.ack_frame, opened.request_id, draft
            )
        finally:
            self.hub.detach(opened.stream)

    async def _stream_listen(
        self,
        receive: Receive,
        send: Send,
        stream: Stream,
        ack_frame: bytes,
        request_id: Any,
        draft: Draft,
    ) -> None:
        """The listen stream itself: the request's own task plus a disconnect watcher, so an
        idle stream costs two tasks and an empty queue."""
        with DisconnectWatch(receive) as disconnect:
            try:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                await self._send_frame(send, ack_frame)
                while True:
                    try:
                        async with Deadline(self.options.keepalive_s):
                            item = await stream.queue.get()
                    except TimeoutError:
                        await self._send_frame(send, KEEP_ALIVE)
                        continue
                    if isinstance(item, Closed):
                        draft.stream_end = item.reason
                        if item.reason == "shutdown":
                            closing = self.modern.listen_closing(request_id)
                            await self._send_frame(send, sse_frame(closing))
                        break
                    await self._send_frame(send, sse_frame(item))
            except asyncio.CancelledError:
                if not disconnect.happened:
                    raise
                uncancel()
                return
            except TimeoutError:
                # The client stopped reading: a stuck stream is closed, not kept.
                draft.stream_end = "send_timeout"
                return
        await send({"type": "http.response.body", "body": b""})

    async def _send_frame(self, send: Send, frame: bytes) -> None:
        async with Deadline(self.options.send_timeout_s):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
