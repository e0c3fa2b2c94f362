"""The request record: one per HTTP request on the MCP endpoint, one per SSE stream that ends.

A :class:`Draft` is opened when a request reaches the endpoint, before anything can fail, so
rejected requests get a record like any other; it is filled in as the request is understood
(era, versions, method, client, session, error code) and the observed ``send`` adds status,
bytes and stream events. The schema is versioned (:mod:`server.records.schema`,
``docs/records.md``): fields are added, never renamed, within a version. Client-chosen strings
are clipped; a stream's draft lets go of params and capabilities once its request record is
out. What a record may keep is for the writer to decide off the request path
(:mod:`server.records.privacy`, :mod:`server.records.lines`).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from server.asgi import ASGIMessage, Headers, Receive, Send
from server.jsonrpc import Message, Notification, Request
from server.protocol import (
    CALL_METHODS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
)
from server.records.schema import (
    HEX_PAIRS_BYTES,
    ID_HEAD,
    MAX_CLIENT_STRING,
    MAX_ERROR_MESSAGE,
    MAX_KEPT_BODY,
    SCHEMA_VERSION,
    clip,
    id_head,
    iso_time,
    request_id_of,
)

# What a handler that raised unexpectedly is answered with (server.errors.INTERNAL_ERROR).
INTERNAL_ERROR = -32603

# The request path only takes a number; the record writer formats it (see Draft.request_id).
_next_serial = itertools.count(1).__next__
# An X-Request-Id a trusted proxy sent is kept when it is this (else the server makes one):
# the usual forms (UUIDs, hex, a load balancer's Root=1-...), nothing a log line could break on.
INBOUND_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
# W3C Trace Context: version-traceid-parentid-flags (version ff is invalid, all-zero ids too).
TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
)


_JSON_TYPE = (b"content-type", b"application/json")


@dataclass(slots=True)
class Draft:
    """A record being filled in while its request is served."""

    verb: str
    path: str
    user_agent: str | None
    client_address: str | None
    header_version: str | None
    started: float = field(default_factory=time.time)
    clock: float = field(default_factory=time.perf_counter)
    serial: int = field(default_factory=_next_serial)
    bytes_in: int = 0
    # What the request turned out to be.
    era: str | None = None
    body_version: str | None = None
    method: str | None = None
    jsonrpc_id: Any = None
    notification: bool | None = None
    batch_size: int | None = None
    client_name: str | None = None
    client_version: str | None = None
    client_capabilities: Any = None
    session_id: str | None = None
    subject: str | None = None
    params: Any = None
    error_code: int | None = None
    error_message: str | None = None
    advertised: list[str] | None = None
    # What a tool call, prompt get or resource read named and came to (server.call_note).
    target: str | None = None
    outcome: str | None = None
    # The task this request created or looked at, as the answer left it: {"id", "status"}.
    task: dict[str, str] | None = None
    # The id a trusted proxy gave the request (X-Request-Id), and the caller's trace context.
    inbound_id: str | None = None
    traceparent: str | None = None
    # "sse" for the 2024-11-05 HTTP+SSE transport; None for Streamable HTTP (the usual).
    transport: str | None = None
    # The retirement (server.retirement) this request is affected by, by its item's name.
    retiring: str | None = None
    # The authenticated caller's tenant (a named token's, a JWT's tenant claim), if any.
    tenant: str | None = None
    # A charge against the client's rate still to be counted in Redis with the request's
    # other counts (server.security.shared_limits); never set without MCP_REDIS_URL.
    rate_due: bool = False
    # What was sent back.
    status: int | None = None
    bytes_out: int = 0
    streaming: bool = False
    events: int = 0
    stream_end: str | None = None
    request_written: bool = False
    # The request record waits for write_request (or finish) rather than the stream's first
    # frame: an HTTP+SSE GET, whose client is named only by a later initialize.
    hold_request: bool = False
    completed: bool = False
    client_left: bool = False
    ended_clock: float | None = None
    first_event_clock: float | None = None

    def __post_init__(self) -> None:
        # The headers (and X-Forwarded-For behind a trusted proxy) may be megabytes long.
        agent, address, version = self.user_agent, self.client_address, self.header_version
        if agent is not None and len(agent) > MAX_CLIENT_STRING:
            self.user_agent = clip(agent)
        if address is not None and len(address) > MAX_CLIENT_STRING:
            self.client_address = clip(address)
        if version is not None and len(version) > MAX_CLIENT_STRING:
            self.header_version = clip(version)

    @property
    def request_id(self) -> str:
        return self.inbound_id or request_id_of(self.serial)

    def carry(self, headers: Headers, from_trusted_proxy: bool) -> None:
        """Keep the request's X-Request-Id (only a trusted proxy's: anyone else could pick
        another request's id) and its W3C ``traceparent`` header."""
        traceparent = headers.get(b"traceparent")
        if traceparent is not None:
            self.set_traceparent(traceparent.decode("latin-1"))
        inbound = headers.get(b"x-request-id") if from_trusted_proxy else None
        if inbound is not None:
            text = inbound.decode("latin-1")
            if INBOUND_REQUEST_ID.fullmatch(text):
                self.inbound_id = text

    def set_traceparent(self, value: Any) -> None:
        if self.traceparent is None and type(value) is str and TRACEPARENT.fullmatch(value):
            self.traceparent = value

    def describe(self, message: Message | list[Message]) -> None:
        """What the request is, as far as its body says, before anything can reject it."""
        kind = type(message)
        if kind is Request:  # by far the most: one test, not three isinstance
            self.jsonrpc_id = message.id  # type: ignore[union-attr]
            self.notification = False
        elif kind is Notification:
            self.notification = True
        elif kind is list:
            self.batch_size = len(message)  # type: ignore[arg-type]
            self.method = "(batch)"
            return
        else:
            self.method = "(response)"
            self.jsonrpc_id = message.id  # type: ignore[union-attr]
            return
        method = self.method = message.method  # type: ignore[union-attr]
        # Raw here; the record writer applies the privacy rules off the request path.
        params = self.params = message.params  # type: ignore[union-attr]
        # A huge body is kept by its size only (MAX_KEPT_BODY): never queued, never walked.
        oversized = self.bytes_in > MAX_KEPT_BODY
        if oversized:
            self.params = {"_truncated": True, "bytes": self.bytes_in}
        meta = params.get("_meta")
        if method == "initialize":
            version = params.get("protocolVersion")
            self.body_version = version if type(version) is str else None
            capabilities = self.params if oversized else params.get("capabilities")
            self.set_client(params.get("clientInfo"), capabilities)
        elif isinstance(meta, dict):
            version = meta.get(META_PROTOCOL_VERSION)
            self.body_version = version if type(version) is str else None
            capabilities = self.params if oversized else meta.get(META_CLIENT_CAPABILITIES)
            self.set_client(meta.get(META_CLIENT_INFO), capabilities)
        if isinstance(meta, dict) and "traceparent" in meta:
            # Where MCP puts trace context in a message (the header's wins when both are sent).
            self.set_traceparent(meta["traceparent"])

    def set_client(self, info: Any, capabilities: Any) -> None:
        """The client's name, version and capabilities as it declared them."""
        if isinstance(info, dict):
            name, version = info.get("name"), info.get("version")
            self.client_name = name if isinstance(name, str) else None
            self.client_version = version if isinstance(version, str) else None
        if isinstance(capabilities, dict):
            self.client_capabilities = capabilities

    def error(self, code: int, message: str) -> None:
        self.error_code = code
        self.error_message = clip(message, MAX_ERROR_MESSAGE)

    def call_outcome(self) -> str | None:
        """What the call came to: as noted, else from its JSON-RPC error (-32603 is what a
        handler that raised gets), else None (not known yet: a streamed answer)."""
        if self.outcome is not None:
            return self.outcome
        if self.error_code is None:
            return None
        return "crash" if self.error_code == INTERNAL_ERROR else "error"

    def request_record(self) -> dict[str, Any]:
        # Client-chosen strings clipped (server.records.lines clips the same fields alike).
        record: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "kind": "request",
            "time": iso_time(self.started),
            "request_id": self.request_id,
            "verb": clip(self.verb),
            "path": clip(self.path),
            "status": self.status,
            "era": self.era,
            "protocol_version": {
                "header": clip(self.header_version),
                "body": clip(self.body_version),
            },
            "method": clip(self.method),
            "jsonrpc_id": clip(self.jsonrpc_id),
            "notification": self.notification,
            "client": {
                "name": clip(self.client_name),
                "version": clip(self.client_version),
                "capabilities": self.client_capabilities,
            },
            "session_id": clip(self.session_id),
            "subject": clip(self.subject),
            "user_agent": clip(self.user_agent),
            "client_address": clip(self.client_address),
            "error": None
            if self.error_code is None
            else {"code": self.error_code, "message": clip(self.error_message, MAX_ERROR_MESSAGE)},
            "duration_ms": round(
                ((self.ended_clock or time.perf_counter()) - self.clock) * 1000, 3
            ),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "streaming": self.streaming,
            "params": self.params,
        }
        self.optional_fields(record)
        return record

    def optional_fields(self, record: dict[str, Any]) -> None:
        """The fields a request record has only for some requests, in their order (the line
        writer, :mod:`server.records.lines`, adds them the same way)."""
        if self.batch_size is not None:
            record["batch_size"] = self.batch_size
        if self.advertised is not None:
            record["advertised"] = self.advertised
        if self.method in CALL_METHODS:
            record["target"] = self.target
            record["outcome"] = self.call_outcome()
        if self.task is not None:
            record["task"] = self.task
        if self.traceparent is not None:
            record["traceparent"] = self.traceparent
        if self.transport is not None:
            record["transport"] = self.transport
        if self.retiring is not None:
            record["retiring"] = self.retiring
            if self.outcome == "retired":
                record["outcome"] = "retired"
        if self.tenant is not None:
            record["tenant"] = self.tenant

    def stream_record(self) -> dict[str, Any]:
        first = self.first_event_clock
        record: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "kind": "stream",
            "time": iso_time(time.time()),
            "request_id": self.request_id,
            "verb": clip(self.verb),
            "era": self.era,
            "method": clip(self.method),
            "session_id": clip(self.session_id),
            "client": {"name": clip(self.client_name), "version": clip(self.client_version)},
            "user_agent": clip(self.user_agent),
            "opened": iso_time(self.started),
            "open_ms": round((time.perf_counter() - self.clock) * 1000, 3),
            "events": self.events,
            "bytes_out": self.bytes_out,
            "end": self.stream_end or "complete",
            "target": self.target,
            "outcome": self.call_outcome() if self.method in CALL_METHODS else None,
            "ttfb_ms": None if first is None else round((first - self.clock) * 1000, 3),
            # The request record went out when the stream opened: an error its last event
            # carried (a failure mid-stream, a call the drain deadline ended) is told here.
            "error": None
            if self.error_code is None
            else {"code": self.error_code, "message": self.error_message},
        }
        if self.transport is not None:
            record["transport"] = self.transport
        return record

    def observe_receive(self, receive: Receive) -> Receive:
        """Wrap ``receive`` to count bytes in and notice the client leaving mid-response."""

        async def observed() -> ASGIMessage:
            message = await receive()
            if message["type"] == "http.request":
                self.bytes_in += len(message.get("body", b""))
            elif message["type"] == "http.disconnect" and not self.completed:
                self.client_left = True
            return message

        return observed

    def build(self) -> dict[str, Any]:
        """The request record; the writer thread calls this (see :meth:`finish`)."""
        return self.request_record()

    def finish(self, emit: Callable[[Any], None]) -> None:
        """Emit what is still owed: the request record, and the stream record if it streamed.

        A finished request's draft no longer changes, so the draft itself is handed over and
        the writer thread builds its record: the request path pays for nothing but a queue
        append."""
        if not self.request_written:
            self.request_written = True
            self.ended_clock = time.perf_counter()
            emit(self if not self.streaming else self.request_record())
        if self.streaming:
            if self.stream_end is None:
                self.stream_end = (
                    "client_closed"
                    if self.client_left
                    else "complete"
                    if self.completed
                    else "error"
                )
            emit(self.stream_record())

    def write_request(self, emit: Callable[[Any], None]) -> None:
        """A stream's request record, now (once): the stream goes on."""
        if not self.request_written:
            self.request_written = True
            emit(self.request_record())
            # The record has them; the stream record does not need them.
            self.params = self.client_capabilities = None

    def observe(self, send: Send, emit: Callable[[Any], None]) -> Send:
        """Wrap ``send`` to learn status, bytes and events; a stream's request record is
        emitted as soon as the stream opens, so a long stream does not hide its request."""

        # It returns the wrapped send's own awaitable (docs/decisions.md#awaitable-not-coroutine).
        def observed(message: ASGIMessage) -> Awaitable[None]:
            kind = message["type"]
            if kind == "http.response.body":  # the most frequent: every frame of a stream
                body = message.get("body", b"")
                self.bytes_out += len(body)
                if not message.get("more_body", False):
                    self.completed = True
                if self.streaming:
                    # Every frame this server writes is one send: count message events only.
                    # (find: bytes' ``in`` first tries the needle as an int, a TypeError raised)
                    if body.find(b"data: {") >= 0:
                        if not self.events:
                            self.first_event_clock = time.perf_counter()
                        self.events += 1
                    if not self.request_written and not self.hold_request:
                        self.write_request(emit)
            elif kind == "http.response.start":
                self.status = message["status"]
                headers = message.get("headers", ())
                # A JSON answer names its type first (server.transport.sse): no loop for it.
                if not headers or headers[0] != _JSON_TYPE:
                    for name, value in headers:
                        if name == b"content-type" and value.startswith(b"text/event-stream"):
                            self.streaming = True
                # The id of this request's record and log lines, for the client to quote
                # (the id's bytes written out, its head remembered: schema.id_head).
                inbound = self.inbound_id
                if inbound is None:
                    serial = self.serial
                    high, _, head = ID_HEAD[0]
                    if serial >> 8 != high:
                        _, _, head = id_head(serial)
                    value = head + HEX_PAIRS_BYTES[serial & 0xFF]
                else:
                    value = inbound.encode()
                message["headers"] = [*headers, (b"x-request-id", value)]
            return send(message)

        return observed
