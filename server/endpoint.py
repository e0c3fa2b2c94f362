"""The MCP endpoint: one ASGI callable for ``POST /mcp``, the thin shell around the eras.

It owns only HTTP: admission (Host/Origin, Content-Type, Accept, body size), reading the body,
choosing the era from headers and ``_meta``, and writing JSON or SSE. Everything MCP means is
in :mod:`server.modern` and :mod:`server.legacy` (whose HTTP half is
:mod:`server.legacy_http`); every exception raised before a response starts is turned into a
wire error here, with the status from :func:`server.errors.http_status`.

May import: everything in the core, guards, legacy_http, sse, sse_starlette.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

from sse_starlette import EventSourceResponse, ServerSentEvent

from server.errors import Era, InternalError, InvalidRequest, McpError, RequestId, http_status
from server.guards import check_content_type, check_host, check_origin, negotiate
from server.jsonrpc import Notification, Request, Response, decode, encode_error, encode_result
from server.legacy_http import LegacyHttp
from server.modern import ModernCall, ModernEra
from server.protocol import LEGACY_VERSIONS, META_PROTOCOL_VERSION
from server.sse import ResponseWriter, cancel_on_disconnect, message_frame, send_empty, send_json
from server.subscriptions import Closed, Hub

log = logging.getLogger("server.endpoint")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class EndpointOptions:
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_body_bytes: int
    keepalive_s: float
    send_timeout_s: float
    shutdown_grace_s: float


def read_headers(scope: Scope) -> dict[str, str]:
    # Latin-1 keeps every byte; the modern layer rejects anything outside visible ASCII.
    return {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
    }


def choose_era(message: Request | Notification, headers: dict[str, str]) -> Era:
    """Which era a message belongs to (spec-notes 1.8).

    ``_meta`` naming a protocol version is modern; a legacy version header, or a session id,
    is legacy; any other version header is modern (so ``v999.0.0`` gets -32022, not a session
    error); and a message with neither (``initialize`` above all) is legacy.
    """
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return "modern"
    version = headers.get("mcp-protocol-version")
    if (version is not None and version.strip() in LEGACY_VERSIONS) or "mcp-session-id" in headers:
        return "legacy"
    return "legacy" if version is None else "modern"


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    too_large = InvalidRequest(f"Request body larger than {limit} bytes", http_status=413)
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client went away while sending the body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class McpEndpoint:
    def __init__(
        self, modern: ModernEra, legacy: LegacyHttp, hub: Hub, options: EndpointOptions
    ) -> None:
        self.modern = modern
        self.legacy = legacy
        self.hub = hub
        self.options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method == "POST":
            await self.post(scope, receive, send)
            return
        headers = read_headers(scope)
        try:
            self.admit(headers)
            if method == "GET":
                _, sse_ok = negotiate(headers.get("accept"))
                await self.legacy.get(receive, send, headers, sse_ok)
            elif method == "DELETE":
                await self.legacy.delete(send, headers)
            else:
                raise InvalidRequest(f"Method {method} not allowed", http_status=405)
        except McpError as error:
            extra = [(b"allow", b"GET, POST, DELETE")] if error.http_status == 405 else None
            status = http_status(error, "legacy")
            await send_json(send, status, encode_error(None, error.to_wire("legacy")), extra)

    def admit(self, headers: dict[str, str]) -> None:
        """DNS-rebinding protection, for every method."""
        check_host(headers.get("host"), self.options.allowed_hosts)
        check_origin(
            headers.get("origin"), self.options.allowed_hosts, self.options.allowed_origins
        )

    async def post(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = read_headers(scope)
        era: Era = "modern"
        request_id: RequestId | None = None
        try:
            self.admit(headers)
            check_content_type(headers.get("content-type"))
            json_ok, sse_ok = negotiate(headers.get("accept"))
            body = await read_body(receive, headers, self.options.max_body_bytes)
            message = decode(body)
            if isinstance(message, list):
                era = "legacy"
                await self.legacy.batch(send, headers, message)
                return
            if isinstance(message, Response):
                if "mcp-session-id" not in headers:
                    raise InvalidRequest("Invalid request: this server sent no request to answer")
                era = "legacy"
                await self.legacy.response(send, headers, message)
                return
            era = choose_era(message, headers)
            if isinstance(message, Notification):
                if era == "modern":
                    # 2026-07-28 defines no client notifications over HTTP: accepted, ignored.
                    await send_empty(send, 202)
                else:
                    await self.legacy.notification(send, headers, message)
                return
            request_id = message.id
            if era == "legacy":
                await self.legacy.request(
                    receive, send, headers, message, json_ok=json_ok, sse_ok=sse_ok
                )
                return
            call = self.modern.validate(message, headers)
        except ConnectionAbortedError:
            return
        except McpError as error:
            await self._send_error(send, error, era, request_id)
            return
        except Exception:
            log.exception("rejecting a request failed")
            await self._send_error(send, InternalError("Internal error"), era, request_id)
            return
        if call.request.method == "subscriptions/listen":
            await self.listen(scope, receive, send, call, sse_ok)
        else:
            await self.answer(receive, send, call, json_ok, sse_ok)

    async def answer(
        self, receive: Receive, send: Send, call: ModernCall, json_ok: bool, sse_ok: bool
    ) -> None:
        writer = ResponseWriter(
            send, json_ok=json_ok, sse_ok=sse_ok, keepalive_s=self.options.keepalive_s
        )
        request_id = call.request.id
        try:
            async with cancel_on_disconnect(receive) as disconnect:
                try:
                    payload = encode_result(request_id, await self.modern.handle(call, writer.emit))
                    status = 200
                except McpError as error:
                    payload = encode_error(request_id, error.to_wire("modern"))
                    status = http_status(error, "modern") if not writer.streaming else 200
                except Exception:
                    log.exception("%s failed", call.request.method)
                    payload = encode_error(request_id, InternalError("Internal error").to_wire())
                    status = 200
        except asyncio.CancelledError:
            writer.close()
            if disconnect.happened:
                # The client closed the stream: that is the cancellation; nothing more is sent.
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                return
            raise
        try:
            await writer.finish(payload, status)
        finally:
            writer.close()

    async def listen(
        self, scope: Scope, receive: Receive, send: Send, call: ModernCall, sse_ok: bool
    ) -> None:
        request_id = call.request.id
        try:
            if not sse_ok:
                raise InvalidRequest(
                    "subscriptions/listen needs Accept: text/event-stream", http_status=406
                )
            granted, ack = self.modern.listen(call)
        except McpError as error:
            await self._send_error(send, error, "modern", request_id)
            return
        stream = self.hub.attach(self.modern.listen_frame(granted, request_id))
        closing = self.modern.listen_closing(request_id)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield message_frame(ack)
                while True:
                    item = await stream.queue.get()
                    if isinstance(item, Closed):
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

    async def _send_error(
        self, send: Send, error: McpError, era: Era, request_id: RequestId | None
    ) -> None:
        echo = request_id if request_id is not None else error.request_id
        await send_json(send, http_status(error, era), encode_error(echo, error.to_wire(era)))


class _ShutdownSignal:
    """Duck-typed stand-in for the ``anyio.Event`` sse-starlette sets on server exit."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def set(self) -> None:
        self._stream.close("shutdown")
