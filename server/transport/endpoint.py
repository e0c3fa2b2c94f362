"""The MCP endpoint: one ASGI callable for ``POST /mcp``, the thin shell around the eras.

It owns only HTTP: admission (Host/Origin, Content-Type, Accept, body size), reading the body,
choosing the era from headers and ``_meta``, and writing JSON or SSE. Everything MCP means is
in :mod:`server.modern.era` and :mod:`server.legacy.era` (whose HTTP half is
:mod:`server.transport.legacy`); every exception raised before a response starts is turned into a
wire error here, with the status from :func:`server.errors.http_status`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from server.asgi import Headers, Receive, Scope, Send, header_text, read_headers
from server.errors import Era, InternalError, InvalidRequest, McpError, RequestId, http_status
from server.jsonrpc import Message, Notification, Request, Response, decode, encode_error
from server.modern.era import ModernCall, ModernEra
from server.protocol import (
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
)
from server.records.draft import Draft
from server.records.recorder import Recorder
from server.security.auth import Principal
from server.security.gate import Gate
from server.security.limits import Slot
from server.security.networks import Network, client_address
from server.transport.guards import HostGuard, check_content_type, check_origin, negotiate
from server.transport.legacy import LegacyHttp
from server.transport.modern import ModernHttp, OpenListen
from server.transport.sse import send_empty, send_json

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EndpointOptions:
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_body_bytes: int
    # Messages in one batch at most: a batch is one HTTP request whose cost grows with its
    # length (a task, a stream and an answer per call).
    max_batch: int
    trusted_proxies: tuple[Network, ...]


def choose_era(message: Request | Notification, headers: Headers) -> Era:
    """Which era a message belongs to (spec-notes 1.8).

    ``_meta`` naming a protocol version is modern; a legacy version header, or a session id,
    is legacy; any other version header is modern (so ``v999.0.0`` gets -32022, not a session
    error); and a message with neither (``initialize`` above all) is legacy.
    """
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return "modern"
    version = header_text(headers, b"mcp-protocol-version")
    if (version is not None and version.strip() in LEGACY_VERSIONS) or b"mcp-session-id" in headers:
        return "legacy"
    return "legacy" if version is None else "modern"


def _answerable(headers: Headers) -> tuple[bool, bool]:
    """A POST's body type checked (415), and how it may be answered: (JSON, SSE), 406 if
    neither."""
    check_content_type(header_text(headers, b"content-type"))
    return negotiate(header_text(headers, b"accept"))


def _too_large(limit: int) -> InvalidRequest:
    return InvalidRequest(f"Request body larger than {limit} bytes", http_status=413)


async def read_body(receive: Receive, headers: Headers, limit: int, draft: Draft) -> bytes:
    """The whole body, counted into the draft's bytes in as it arrives (read from the server's
    own ``receive``: the draft's observing one would add a coroutine to every request)."""
    declared = headers.get(b"content-length")
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > limit)
    ):
        raise _too_large(limit)
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")  # the whole body in one message: the usual case
        draft.bytes_in += len(body)
        if len(body) > limit:
            raise _too_large(limit)
        return body
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client went away while sending the body")
        chunk = message.get("body", b"")
        draft.bytes_in += len(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()


class McpEndpoint:
    def __init__(
        self,
        modern: ModernEra,
        modern_http: ModernHttp,
        legacy: LegacyHttp,
        gate: Gate,
        recorder: Recorder,
        options: EndpointOptions,
    ) -> None:
        self.modern = modern
        self.modern_http = modern_http
        self.legacy = legacy
        self.gate = gate
        self.recorder = recorder
        self.options = options
        self._hosts = HostGuard(options.allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = read_headers(scope)
        peer = scope.get("client")
        # By position: keywords cost 0.2 us more here, on every request.
        draft = Draft(
            scope["method"],  # verb
            scope["path"],
            header_text(headers, b"user-agent"),
            client_address(
                peer[0] if peer else None,
                header_text(headers, b"x-forwarded-for") if self.options.trusted_proxies else None,
                self.options.trusted_proxies,
            ),
            header_text(headers, b"mcp-protocol-version"),
        )
        # Every request that reaches the endpoint leaves a record, whatever happens to it.
        observed_send = draft.observe(send, self.recorder.record)
        try:
            try:
                self.admit(headers)
                principal = (
                    await self.gate.enter(scope, headers, draft)
                    if self.gate.authenticates
                    else self.gate.enter_anonymous(scope, headers, draft)
                )
            except McpError as error:
                await self._send_error(observed_send, error, "modern", None, draft, scope)
                return
            if scope["method"] == "POST":
                await self.post(scope, receive, observed_send, headers, draft, principal)
            else:
                await self.other(
                    scope, draft.observe_receive(receive), observed_send, headers, draft
                )
        finally:
            draft.finish(self.recorder.record)

    async def other(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers, draft: Draft
    ) -> None:
        method = draft.verb
        draft.era = "legacy"
        try:
            if method == "GET":
                _, sse_ok = negotiate(header_text(headers, b"accept"))
                slot = self.gate.stream_slot(draft)
                try:
                    await self.legacy.get(receive, send, headers, draft, sse_ok=sse_ok)
                finally:
                    slot.release()
            elif method == "DELETE":
                await self.legacy.delete(send, headers, draft)
            else:
                draft.era = None
                raise InvalidRequest(f"Method {method} not allowed", http_status=405)
        except McpError as error:
            await self._send_error(send, error, "legacy", None, draft, scope)

    def admit(self, headers: Headers) -> None:
        """DNS-rebinding protection, for every method."""
        self._hosts.check(headers.get(b"host"))
        if b"origin" in headers:  # browsers send it; most MCP clients do not
            check_origin(
                header_text(headers, b"origin"),
                self.options.allowed_hosts,
                self.options.allowed_origins,
            )

    async def post(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        draft: Draft,
        principal: Principal,
    ) -> None:
        era: Era = "modern"
        request_id: RequestId | None = None
        try:
            json_ok, sse_ok = _answerable(headers)
            body = await read_body(receive, headers, self.options.max_body_bytes, draft)
            # What reads on (a stream's disconnect watcher) tells the draft the client left.
            receive = draft.observe_receive(receive)
            message = decode(body, max_batch=self.options.max_batch)
            self.describe(draft, message)
            if isinstance(message, list):
                era = draft.era = "legacy"
                await self.legacy.batch(send, headers, message, draft)
                return
            if isinstance(message, Response):
                if b"mcp-session-id" not in headers:
                    raise InvalidRequest("Invalid request: this server sent no request to answer")
                era = draft.era = "legacy"
                await self.legacy.response(send, headers, message, draft)
                return
            era = draft.era = choose_era(message, headers)
            if isinstance(message, Notification):
                if era == "modern":
                    # 2026-07-28 defines no client notifications over HTTP: accepted, ignored.
                    await send_empty(send, 202)
                else:
                    await self.legacy.notification(send, headers, message, draft)
                return
            request_id = message.id
            if message.method == "tools/call" and self.gate.authenticates:
                self.require_tool_scopes(principal, message)
            if era == "legacy":
                await self.legacy.request(
                    receive, send, headers, message, draft, json_ok=json_ok, sse_ok=sse_ok
                )
                return
            call = self.validate_modern(message, headers, draft)
            if call.request.method == "server/discover":
                draft.advertised = self.modern.advertised()
        except ConnectionAbortedError:
            return
        except McpError as error:
            await self._send_error(send, error, era, request_id, draft, scope)
            return
        except Exception:
            log.exception("rejecting a request failed")
            internal = InternalError("Internal error")
            await self._send_error(send, internal, era, request_id, draft, scope)
            return
        if call.request.method != "subscriptions/listen":
            await self.answer_modern(receive, send, call, draft, json_ok=json_ok, sse_ok=sse_ok)
            return
        try:
            opened, slot = self.open_listen(call, draft, sse_ok=sse_ok)
        except McpError as error:
            await self._send_error(send, error, era, request_id, draft, scope)
            return
        # A listen stream may stay open for hours: keep nothing of the request itself.
        del call, message, body
        try:
            await self.modern_http.listen(receive, send, opened, draft)
        finally:
            slot.release()

    async def answer_modern(
        self,
        receive: Receive,
        send: Send,
        call: ModernCall,
        draft: Draft,
        *,
        json_ok: bool,
        sse_ok: bool,
    ) -> None:
        """A validated request answered; what it did with a task goes into its record."""
        await self.modern_http.answer(receive, send, call, draft, json_ok=json_ok, sse_ok=sse_ok)
        draft.task = call.task

    def validate_modern(self, message: Request, headers: Headers, draft: Draft) -> ModernCall:
        """The era's checks, and who calls (tasks are bound to the subject, capped per client)."""
        call = self.modern.validate(message, headers)
        call.subject, call.client_key = draft.subject, self.gate.key(draft)
        return call

    def open_listen(
        self, call: ModernCall, draft: Draft, *, sse_ok: bool
    ) -> tuple[OpenListen, Slot]:
        """The client's stream slot (429 past its cap) and the stream, attached to the hub."""
        slot = self.gate.stream_slot(draft)
        try:
            return self.modern_http.open_listen(call, sse_ok=sse_ok), slot
        except BaseException:
            slot.release()
            raise

    def describe(self, draft: Draft, message: Message | list[Message]) -> None:
        """What the request is, as far as the body says, before anything can reject it."""
        if isinstance(message, list):
            draft.batch_size = len(message)
            draft.method = "(batch)"
            return
        if isinstance(message, Response):
            draft.method = "(response)"
            draft.jsonrpc_id = message.id
            return
        draft.method = message.method
        draft.notification = isinstance(message, Notification)
        if isinstance(message, Request):
            draft.jsonrpc_id = message.id
        # Raw here; the record writer applies the privacy rules off the request path.
        draft.params = message.params
        meta = message.params.get("_meta")
        if message.method == "initialize":
            version = message.params.get("protocolVersion")
            draft.body_version = version if isinstance(version, str) else None
            draft.client(message.params.get("clientInfo"), message.params.get("capabilities"))
        elif isinstance(meta, dict):
            version = meta.get(META_PROTOCOL_VERSION)
            draft.body_version = version if isinstance(version, str) else None
            draft.client(meta.get(META_CLIENT_INFO), meta.get(META_CLIENT_CAPABILITIES))

    def require_tool_scopes(self, principal: Principal, message: Request) -> None:
        """Per-tool scopes are checked before the call runs, while a 403 can still be sent."""
        name = message.params.get("name")
        tool = self.modern.catalog.tools.get(name) if isinstance(name, str) else None
        if tool is not None:
            self.gate.require_tool(principal, tool.scopes)

    async def _send_error(
        self,
        send: Send,
        error: McpError,
        era: Era,
        request_id: RequestId | None,
        draft: Draft,
        scope: Scope,
    ) -> None:
        """The one way a refusal leaves the endpoint: status by era, JSON-RPC body with the id
        when it was read, and the headers the refusal needs (Allow, WWW-Authenticate,
        Retry-After)."""
        echo = request_id if request_id is not None else error.request_id
        draft.error(error.wire_code(era), error.message)
        if draft.jsonrpc_id is None:
            draft.jsonrpc_id = echo
        headers = self.gate.headers(error, scope, _host(scope))
        if http_status(error, era) == 405:
            headers.append((b"allow", b"GET, POST, DELETE"))
        body = encode_error(echo, error.to_wire(era))
        await send_json(send, http_status(error, era), body, headers)


def _host(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"host":
            return str(value.decode("latin-1"))
    return None
