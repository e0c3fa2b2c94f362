"""The 2026-07-28 era over HTTP: a request answered as JSON or SSE, and listen streams.

A call runs inline in the request's task (the fast path costs no extra task but the disconnect
watcher); its response is JSON unless it sends something before its result. A closed response
stream cancels the handler, as the spec requires. ``subscriptions/listen`` streams use
sse-starlette's ``EventSourceResponse`` (keep-alives, send timeouts, server-exit detection) fed
by the :class:`~server.subscriptions.Hub`, and end with the graceful result at shutdown.

May import: errors, jsonrpc, modern, records, sse, subscriptions, sse_starlette.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

from sse_starlette import EventSourceResponse, ServerSentEvent

from server.errors import InternalError, InvalidRequest, McpError, http_status
from server.jsonrpc import encode_error, encode_result
from server.modern import ModernCall, ModernEra
from server.records import Draft
from server.sse import DisconnectWatch, ResponseWriter, message_frame, send_json, uncancel
from server.subscriptions import Closed, Hub

log = logging.getLogger("server.modern_http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


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
        writer = ResponseWriter(
            send, json_ok=json_ok, sse_ok=sse_ok, keepalive_s=self.options.keepalive_s
        )
        request_id = call.request.id
        try:
            async with DisconnectWatch(receive) as disconnect:
                try:
                    payload = encode_result(request_id, await self.modern.handle(call, writer.emit))
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
            if disconnect.happened:
                # The client closed the stream: that is the cancellation; nothing more is sent.
                uncancel()
                return
            raise
        try:
            await writer.finish(payload, status)
        finally:
            writer.close()

    async def listen(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        call: ModernCall,
        draft: Draft,
        *,
        sse_ok: bool,
    ) -> None:
        request_id = call.request.id
        try:
            if not sse_ok:
                raise InvalidRequest(
                    "subscriptions/listen needs Accept: text/event-stream", http_status=406
                )
            granted, ack = self.modern.listen(call)
        except McpError as error:
            draft.error(error.wire_code("modern"), error.message)
            await send_json(
                send,
                http_status(error, "modern"),
                encode_error(request_id, error.to_wire("modern")),
            )
            return
        stream = self.hub.attach(self.modern.listen_frame(granted, request_id))
        closing = self.modern.listen_closing(request_id)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield message_frame(ack)
                while True:
                    item = await stream.queue.get()
                    if isinstance(item, Closed):
                        draft.stream_end = item.reason
                        if item.reason == "shutdown":
                            yield message_frame(closing)
                        return
                    yield message_frame(item)
            finally:
                self.hub.detach(stream)

        response = EventSourceResponse(
            events(),
            ping=self.options.keepalive_s,
            ping_message_factory=lambda: ServerSentEvent(comment=""),
            send_timeout=self.options.send_timeout_s,
            # sse-starlette calls .set() when the server begins to exit: closing the stream
            # with reason "shutdown" makes the generator send the graceful result and end.
            shutdown_event=cast(Any, _ShutdownSignal(stream)),
            shutdown_grace_period=self.options.shutdown_grace_s,
        )
        await response(scope, receive, send)


class _ShutdownSignal:
    """Duck-typed stand-in for the ``anyio.Event`` sse-starlette sets on server exit."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def set(self) -> None:
        self._stream.close("shutdown")
