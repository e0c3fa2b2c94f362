"""The MCP endpoint: one ASGI callable for ``/mcp``, the thin shell around the eras.

It owns only HTTP: admission (header sizes, Host/Origin, retirements, the auth gate, the rate),
Content-Type and Accept, reading and decoding the body, describing it to the record, choosing
the era; then one call, ``post`` of the era's HTTP half (``ModernHttp``, ``LegacyHttp``), which
takes the message the rest of the way and its answer back. No MCP method is named here. Every
refusal raised before a response starts is written here, the one place that adds the headers a
refusal needs (Allow, WWW-Authenticate, Retry-After; a retirement's problem details).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from itertools import chain
from typing import Protocol

from server.asgi import (
    HEAD_BYTES,
    Headers,
    Receive,
    Scope,
    Send,
    header_text,
    read_headers,
)
from server.call_note import CALL_NOTE
from server.errors import Era, InvalidRequest, McpError, RequestId, wire_error
from server.jsonrpc import Message, Request, Response, decode, encode_error
from server.protocol import LEGACY_VERSIONS, META_PROTOCOL_VERSION
from server.records.draft import Draft
from server.records.recorder import Recorder
from server.retirement.wire import Retired
from server.security.auth import Principal
from server.security.gate import Gate
from server.security.networks import Network, client_address, in_networks
from server.transport.guards import (
    ANSWERABLE,
    HostGuard,
    answerable,
    check_header_sizes,
    check_origin,
    negotiate,
)
from server.transport.legacy import LegacyHttp
from server.transport.request_body import (
    check_declared_length,
    read_body,
    read_rest,
    whole_body,
)
from server.transport.retiring import Retiring
from server.transport.send import send_json


@dataclass(frozen=True, slots=True)
class EndpointOptions:
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    max_body_bytes: int
    # Messages in one batch at most: a request whose cost grows with its length.
    max_batch: int
    trusted_proxies: tuple[Network, ...]
    # Request headers: all of them together, how many, one value (431 above; see Settings).
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_header_value_bytes: int = 8 * 1024


# Batches and the client's responses (a tuple: isinstance with an X | Y union costs more).
_LEGACY_ONLY = (list, Response)


class EraHttp(Protocol):
    """The HTTP half of an era: takes a decoded POST the rest of the way, answer included. A
    refusal before anything is sent is raised, for the endpoint to write. What reads on from
    ``receive`` (a disconnect watch) wraps it in ``draft.observe_receive`` first."""

    def post(
        self,
        receive: Receive,
        send: Send,
        headers: Headers,
        message: Message | list[Message],
        draft: Draft,
        principal: Principal,
        json_ok: bool,
        sse_ok: bool,
    ) -> Awaitable[None]: ...


class SseStreams(Protocol):
    """The HTTP+SSE transport's stream (:mod:`server.transport.legacy_sse`), for a client
    that falls back to it on the MCP path."""

    def stream(
        self, scope: Scope, receive: Receive, send: Send, draft: Draft, principal: Principal | None
    ) -> Awaitable[None]: ...


def choose_era(message: Message | list[Message], headers: Headers) -> Era:
    """Which era a message belongs to (spec-notes 1.8).

    Batches and the client's responses exist only in the legacy era. ``_meta`` naming a
    protocol version is modern; a legacy version header, or a session id, is legacy; any other
    version header is modern (so ``v999.0.0`` gets -32022, not a session error); and a message
    with neither (``initialize`` above all) is legacy.
    """
    if isinstance(message, _LEGACY_ONLY):
        return "legacy"
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return "modern"
    version = header_text(headers, b"mcp-protocol-version")
    if (version is not None and version.strip() in LEGACY_VERSIONS) or b"mcp-session-id" in headers:
        return "legacy"
    return "legacy" if version is None else "modern"


class McpEndpoint:
    def __init__(
        self,
        modern: EraHttp,
        legacy: LegacyHttp,
        gate: Gate,
        recorder: Recorder,
        options: EndpointOptions,
    ) -> None:
        self.eras: dict[Era, EraHttp] = {"modern": modern, "legacy": legacy}
        self.legacy = legacy  # GET and DELETE are the legacy era's alone
        # The HTTP+SSE transport, when on: a GET with no session that takes SSE opens its stream.
        self.sse: SseStreams | None = None
        # Set when MCP_RETIRE names something: the checks run before authentication.
        self.retiring: Retiring | None = None
        self.gate = gate
        self.recorder = recorder
        self.options = options
        self._hosts = HostGuard(options.allowed_hosts)
        # A head this short passes every size limit (see admit).
        self._small_head = min(options.max_header_bytes, options.max_header_value_bytes)
        # A Content-Length of fewer digits than this is within the body limit: not parsed.
        self._limit_digits = len(str(options.max_body_bytes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])  # read_headers written out: a call fewer
        peer = scope.get("client")
        address = peer[0] if peer else None
        trusted = self.options.trusted_proxies
        from_proxy = bool(trusted) and address is not None and in_networks(address, trusted)
        if from_proxy:
            address = client_address(address, header_text(headers, b"x-forwarded-for"), trusted)
        # header_text written out: two calls fewer on every request.
        agent = headers.get(b"user-agent")
        version = headers.get(b"mcp-protocol-version")
        # By position, on every request (docs/decisions.md#positional-draft).
        draft = Draft(
            scope["method"],  # verb
            scope["path"],
            None if agent is None else agent.decode("latin-1"),
            address,
            None if version is None else version.decode("latin-1"),
        )
        if from_proxy or b"traceparent" in headers:
            draft.carry(headers, from_proxy)
        # The request this task serves, for its log lines and call notes (logs.bind_request,
        # written out: a call fewer).
        bound = CALL_NOTE.set(draft)
        # Every request that reaches the endpoint leaves a record, whatever happens to it.
        record = self.recorder.record
        observed_send = draft.observe(send, record)
        decoded: tuple[Message | list[Message], Era] | None = None
        if self.retiring is not None:
            observed_send = self.retiring.headers_on(observed_send, draft)
        try:
            try:
                # admitted(), without its coroutine: the head, then the gate.
                if self.retiring is None:
                    self.check_head(scope, headers, draft)
                else:  # before authentication: a POST's body is read and decoded for it
                    decoded = await self.retirement_check(scope, receive, headers, draft)
                gate = self.gate
                principal = (
                    await gate.enter(scope, headers, draft)
                    if gate.authenticates
                    else gate.enter_anonymous(scope, headers, draft)  # nothing to await
                )
            except Exception as error:
                era: Era = "legacy" if draft.era == "legacy" else "modern"
                await self.refuse(observed_send, error, era, None, draft, scope)
                return
            if scope["method"] == "POST":
                await self.post(scope, receive, observed_send, headers, draft, principal, decoded)
            else:
                await self.get_or_delete(
                    scope, draft.observe_receive(receive), observed_send, headers, draft, principal
                )
        finally:
            CALL_NOTE.reset(bound)
            if draft.rate_due:  # refused before it was counted in Redis: counted now
                await self.gate.settle(draft, late=True)
            draft.finish(record)

    async def get_or_delete(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        draft: Draft,
        principal: Principal | None = None,
    ) -> None:
        """A request that is not a POST: GET opens a legacy session's stream (or the HTTP+SSE
        fallback's), DELETE ends a session, any other method is 405."""
        method = draft.verb
        draft.era = "legacy"
        try:
            if method == "GET":
                _, sse_ok = negotiate(header_text(headers, b"accept"))
                if self.sse is not None and self.sse_fallback(headers):
                    await self.sse.stream(scope, receive, send, draft, principal)  # its view
                    return
                slot = self.gate.stream_slot(draft)
                try:
                    await self.gate.settle(draft, slot)  # with Redis: its lease there too
                    await self.legacy.get(
                        receive, send, headers, draft, sse_ok=sse_ok, principal=principal
                    )
                finally:
                    slot.release()
            elif method == "DELETE":
                await self.gate.settle(draft)
                await self.legacy.delete(send, headers, draft)
            else:
                draft.era = None
                raise InvalidRequest(f"Method {method} not allowed", http_status=405)
        except Exception as error:
            if draft.status is not None:
                raise  # the answer has begun: too late to refuse
            await self.refuse(send, error, "legacy", None, draft, scope)

    def sse_fallback(self, headers: Headers) -> bool:
        """A GET on the MCP path that opens the HTTP+SSE stream: no session, and it takes SSE
        by name (a client falling back to the 2024-11-05 transport; a bare */* is a probe)."""
        return (
            self.sse is not None
            and b"mcp-session-id" not in headers
            and b"text/event-stream" in headers.get(b"accept", b"")
        )

    async def retirement_check(
        self, scope: Scope, receive: Receive, headers: Headers, draft: Draft
    ) -> tuple[Message | list[Message], Era] | None:
        """What a retirement says of the request, before authentication (:class:`Retired`
        when retired now), after :meth:`check_head`; a POST's body is decoded, described and
        its era chosen for it, and both returned for :meth:`post`."""
        assert self.retiring is not None
        self.check_head(scope, headers, draft)
        version = header_text(headers, b"mcp-protocol-version")
        version = version.strip() if version is not None else None
        if scope["method"] != "POST":
            sse = scope["method"] == "GET" and self.sse_fallback(headers)
            self.retiring.check(draft, sse=sse, era="legacy", version=version)
            return None
        body = await read_body(receive, headers, self.options.max_body_bytes, draft)
        message = decode(body, max_batch=self.options.max_batch)
        draft.describe(message)  # the client's name, for the WARNING a retirement logs
        draft.era = era = choose_era(message, headers)
        self.retiring.check_message(draft, message, era, version)
        return message, era

    async def admitted(
        self, scope: Scope, headers: Headers, draft: Draft, *, head_checked: bool = False
    ) -> Principal:
        """The checks every request on an MCP path passes (this endpoint's and the HTTP+SSE
        transport's): :meth:`check_head` (unless done already), then the gate; the caller."""
        if not head_checked:
            self.check_head(scope, headers, draft)
        if self.gate.authenticates:
            return await self.gate.enter(scope, headers, draft)
        return self.gate.enter_anonymous(scope, headers, draft)

    def check_head(self, scope: Scope, headers: Headers, draft: Draft) -> None:
        """:meth:`admit`, a refusal charged to the address: before authentication it costs a
        record (RateLimited, answered 429, once over its rate)."""
        try:
            self.admit(scope, headers)
        except McpError:
            self.gate.charge_refusal(scope, headers, draft)
            raise

    def admit(self, scope: Scope, headers: Headers) -> None:
        """Header sizes (431), and DNS-rebinding protection, for every method."""
        options = self.options
        raw = scope["headers"]
        # The usual head is shorter than one value may be, which settles every size limit at
        # once: the head's size (HEAD_BYTES) or one C join, not a loop over the headers.
        small = self._small_head
        if not (
            type(raw) is list
            and len(raw) <= options.max_headers
            and (
                scope.get(HEAD_BYTES, small + 1) <= small
                or len(b"".join(chain.from_iterable(raw))) <= small
            )
        ):
            check_header_sizes(
                raw, options.max_header_bytes, options.max_headers, options.max_header_value_bytes
            )
        host = headers.get(b"host")
        if host is None or host not in self._hosts.allowed_raw:  # HostGuard.check's memo first
            self._hosts.check(host)
        if b"origin" in headers:  # browsers send it; most MCP clients do not
            check_origin(
                header_text(headers, b"origin"), options.allowed_hosts, options.allowed_origins
            )

    async def post(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        draft: Draft,
        principal: Principal,
        decoded: tuple[Message | list[Message], Era] | None = None,
    ) -> None:
        era: Era = "modern"
        request_id: RequestId | None = None
        try:
            content_type, accept = headers.get(b"content-type"), headers.get(b"accept")
            # answerable's memo first: the pair a client sends every time.
            json_ok, sse_ok = ANSWERABLE.get((content_type, accept)) or answerable(
                content_type, accept
            )
            if decoded is None:
                # read_body written out: its coroutine costs 1.2 thousand instructions a request
                # (measured in issue 39's third round).
                limit = self.options.max_body_bytes
                declared = headers.get(b"content-length")
                if declared is not None and len(declared) >= self._limit_digits:
                    check_declared_length(headers, limit)
                first = await receive()
                body = whole_body(first, limit, draft)
                if body is None:
                    body = await read_rest(receive, first, limit, draft)
                del first
                message = decode(body, max_batch=self.options.max_batch)
                del body
                draft.describe(message)
                era = draft.era = choose_era(message, headers)
            else:
                message, era = decoded  # described, its era chosen, for a retirement check
                del decoded
            if isinstance(message, Request):
                request_id = message.id
            if draft.rate_due:  # with Redis: counted there now, or with its quota or slot
                await self.gate.settle(draft, message=message)
            answering = self.eras[era].post(
                receive, send, headers, message, draft, principal, json_ok, sse_ok
            )
            # A listen stream may stay open for hours: this frame keeps nothing of the request.
            del message
            await answering
        except ConnectionAbortedError:
            return
        except Exception as error:
            if draft.status is not None:
                raise  # the answer has begun: too late to refuse
            await self.refuse(send, error, era, request_id, draft, scope)

    async def refuse(
        self,
        send: Send,
        error: Exception,
        era: Era,
        request_id: RequestId | None,
        draft: Draft,
        scope: Scope,
    ) -> None:
        """The one way a refusal leaves the endpoint: status by era, JSON-RPC body with the id
        when it was read, and the headers the refusal needs (Allow, WWW-Authenticate,
        Retry-After)."""
        if isinstance(error, Retired):
            draft.error(error.code, error.message)
            await send({"type": "http.response.start", "status": 410, "headers": error.headers})
            await send({"type": "http.response.body", "body": error.body})
            return
        wire = wire_error(error, era, "rejecting a request")
        echo = request_id
        if echo is None and isinstance(error, McpError):
            echo = error.request_id
        draft.error(wire.code, wire.message)
        if draft.jsonrpc_id is None:
            draft.jsonrpc_id = echo
        headers = []
        if isinstance(error, McpError):
            headers = self.gate.headers(error, scope, header_text(read_headers(scope), b"host"))
        if wire.status == 405:
            headers.append((b"allow", b"GET, POST, DELETE"))
        await send_json(send, wire.status, encode_error(echo, wire.body), headers)
