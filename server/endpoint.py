"""The MCP endpoint: one ASGI callable for ``POST /mcp``, the thin shell around the eras.

It owns only HTTP: admission (Host/Origin, Content-Type, Accept, body size), reading the body,
choosing the era from headers and ``_meta``, and writing JSON or SSE. Everything MCP means is
in :mod:`server.modern` (and the legacy era once it lands); every exception is turned into a
wire error here and nowhere else, with the status from :func:`server.errors.http_status`.

May import: everything in the core, guards, sse, sse_starlette.
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


def choose_era(request: Request, headers: dict[str, str]) -> Era:
    """Modern when the request says so: ``_meta`` names a protocol version, or the version
    header is one the legacy era never used (so ``v999.0.0`` gets -32022, not a session error).
    """
    meta = request.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return "modern"
    version = headers.get("mcp-protocol-version")
    if version is None:
        return "legacy"
    return "legacy" if version.strip() in LEGACY_VERSIONS else "modern"


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
    def __init__(self, modern: ModernEra, hub: Hub, options: EndpointOptions) -> None:
        self.modern = modern
        self.hub = hub
        self.options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "POST":
            await self.post(scope, receive, send)
            return
        # GET and DELETE belong to the legacy era's sessions; until then, say what is served.
        error = InvalidRequest(
            f"Method {scope['method']} not allowed; send JSON-RPC with POST", http_status=405
        )
        await send_json(send, 405, encode_error(None, error.to_wire()), [(b"allow", b"POST")])

    async def post(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = read_headers(scope)
        era: Era = "modern"
        request_id: RequestId | None = None
        try:
            check_host(headers.get("host"), self.options.allowed_hosts)
            check_origin(
                headers.get("origin"), self.options.allowed_hosts, self.options.allowed_origins
            )
            check_content_type(headers.get("content-type"))
            json_ok, sse_ok = negotiate(headers.get("accept"))
            body = await read_body(receive, headers, self.options.max_body_bytes)
            message = decode(body)
            if isinstance(message, list):
                raise InvalidRequest(
                    "Invalid request: batches are not accepted; send one message per POST"
                )
            if isinstance(message, Response):
                raise InvalidRequest("Invalid request: this server sent no request to answer")
            if isinstance(message, Notification):
                # 2026-07-28 defines no client notifications over HTTP; accepted and ignored.
                await send_empty(send, 202)
                return
            request_id = message.id
            era = choose_era(message, headers)
            if era == "legacy":
                raise InvalidRequest(
                    "This server speaks MCP 2026-07-28 here: send params._meta with "
                    f"{META_PROTOCOL_VERSION!r} and the MCP-Protocol-Version header "
                    "(the initialize era is not served yet)"
                )
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
