"""The request record: one per HTTP request on the MCP endpoint, one per SSE stream that ends.

A :class:`Draft` is opened when a request reaches the endpoint and filled in as the request is
understood (era, versions, method, client, session, error code); the observed ``send`` adds
the status, bytes out and stream events. Rejected requests get a record like any other: the
draft exists before anything can fail. The schema is versioned (``v: 1``) and documented in
``docs/records.md``; fields are added, never renamed, within a version.

Privacy is applied here, once: parameters are redacted at any depth (keys matching the
redaction list), capped in size, or dropped; the ``Authorization`` header and tokens are never
read into a record at all. The record writer turns a finished request's draft into its line
with :mod:`server.records.lines`, the same bytes as :meth:`Draft.build` with
:meth:`Privacy.apply`, encoded, for less work.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.asgi import ASGIMessage, Receive, Send
from server.records import lines as record_lines
from server.records.lines import LineMemo, iso_time, request_id_of, request_line

# Defined where request lines are encoded (that module cannot import this one).
SCHEMA_VERSION = record_lines.SCHEMA_VERSION
CALL_METHODS = record_lines.CALL_METHODS
INTERNAL_ERROR = -32603
REDACTED = "[redacted]"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Privacy:
    """What parameters may say: a redaction list (substrings of keys), a size cap, or nothing."""

    redact: tuple[str, ...]
    max_params_bytes: int
    keep_params: bool = True
    # Verdicts per key already seen (params repeat the same few keys); bounded.
    _verdicts: dict[Any, bool] = field(default_factory=dict, init=False, repr=False, compare=False)
    # What the record writer's line encoder remembers between records; bounded.
    _memo: LineMemo = field(default_factory=LineMemo, init=False, repr=False, compare=False)

    def apply(self, record: dict[str, Any]) -> None:
        """Make a record's params fit to keep (the record writer calls this, off the request
        path)."""
        # Params and capabilities are parts of the body: a body within the cap needs no
        # measuring, and values with no sensitive key anywhere need no redacted copy.
        small = record.get("bytes_in", self.max_params_bytes + 1) <= self.max_params_bytes
        client = record.get("client")
        capabilities = client.get("capabilities") if isinstance(client, dict) else None
        harmless = (
            small
            and not self.has_sensitive_key(record.get("params"))
            # Legacy records carry the capabilities of the session's initialize, not of this
            # body: they are checked on their own.
            and not self.has_sensitive_key(capabilities)
        )
        if "params" in record:
            if harmless and self.keep_params:
                params = record["params"]
                if isinstance(params, dict) and "_meta" in params:
                    params = {key: value for key, value in params.items() if key != "_meta"}
                record["params"] = params
            else:
                record["params"] = self.clean(record["params"], measured=small)
        # Declared capabilities are client-sent too: same redaction and size cap (keeping them
        # even when params are dropped, since the report needs them).
        if not harmless and capabilities is not None:
            assert isinstance(client, dict)
            client["capabilities"] = self.clean_capabilities(capabilities)

    def line(self, draft: Any) -> bytes | None:
        """A finished request's record as its JSON line, these rules applied: the same bytes as
        :meth:`Draft.build`, :meth:`apply` and encoding, for less work (the record writer asks
        this first). None for a record that needs the general way, or that is not a Draft."""
        if not isinstance(draft, Draft):
            return None
        return request_line(draft, self, self._memo)

    def clean_capabilities(self, capabilities: Any) -> Any:
        """Declared capabilities, redacted and capped like params, but never dropped."""
        keeping = self if self.keep_params else Privacy(self.redact, self.max_params_bytes)
        return keeping.clean(capabilities)

    def has_sensitive_key(self, value: Any, depth: int = 0) -> bool:
        """Whether a key matching the redaction list appears at any depth (past 32 levels:
        assumed so, and the careful path takes over)."""
        if depth > 32:
            return True
        kind = type(value)
        if kind is dict:
            verdicts = self._verdicts
            for key, item in value.items():
                verdict = verdicts.get(key)
                if verdict is None:
                    verdict = _sensitive(str(key), self.redact)
                    if len(verdicts) < 4096:
                        verdicts[key] = verdict
                if verdict:
                    return True
                if (type(item) is dict or type(item) is list) and self.has_sensitive_key(
                    item, depth + 1
                ):
                    return True
        elif kind is list:
            for item in value:
                if (type(item) is dict or type(item) is list) and self.has_sensitive_key(
                    item, depth + 1
                ):
                    return True
        return False

    def clean(self, params: Any, *, measured: bool = False) -> Any:
        """``measured``: the caller knows the params fit the cap, so they are not encoded.

        ``_meta`` is left out: what it says (version, client, capabilities) has its own fields
        in the record, and the rest of it (progress tokens) is noise."""
        if not self.keep_params:
            return None
        if isinstance(params, dict) and "_meta" in params:
            params = {key: value for key, value in params.items() if key != "_meta"}
        cleaned = self._redact(params, depth=0)
        if measured:
            return cleaned
        encoded = orjson.dumps(cleaned)
        if len(encoded) <= self.max_params_bytes:
            return cleaned
        return {"_truncated": True, "bytes": len(encoded)}

    def _redact(self, value: Any, depth: int) -> Any:
        if depth > 32:
            return "[too deep]"
        if isinstance(value, dict):
            return {
                key: REDACTED if self.sensitive(key) else self._redact(item, depth + 1)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self._redact(item, depth + 1) for item in value]
        return value

    def sensitive(self, key: Any) -> bool:
        return _sensitive(str(key), self.redact)


@functools.lru_cache(maxsize=4096)
def _sensitive(key: str, redact: tuple[str, ...]) -> bool:
    # Params repeat the same few keys, so the verdict per key is computed once.
    normal = key.lower().replace("-", "").replace("_", "")
    return any(word in normal for word in redact)


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    return tuple(
        ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip()
    )


def client_address(
    peer: str | None, forwarded: str | None, trusted: tuple[Network, ...]
) -> str | None:
    """The client's address: the peer, or the forwarded one when the peer is a trusted proxy.

    X-Forwarded-For is read right to left, skipping trusted proxies, so a client cannot forge
    its address by sending the header itself.
    """
    if peer is None or not trusted or not _in(peer, trusted):
        return peer
    if not forwarded:
        return peer
    for hop in reversed([part.strip() for part in forwarded.split(",") if part.strip()]):
        if not _in(hop, trusted):
            return hop
    return peer


def _in(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


# The request path only takes a number; the record writer formats it (see Draft.request_id).
_next_serial = itertools.count(1).__next__


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
    # What was sent back.
    status: int | None = None
    bytes_out: int = 0
    streaming: bool = False
    events: int = 0
    stream_end: str | None = None
    request_written: bool = False
    completed: bool = False
    client_left: bool = False
    ended_clock: float | None = None
    first_event_clock: float | None = None

    @property
    def request_id(self) -> str:
        return request_id_of(self.serial)

    def client(self, info: Any, capabilities: Any) -> None:
        if isinstance(info, dict):
            name, version = info.get("name"), info.get("version")
            self.client_name = name if isinstance(name, str) else None
            self.client_version = version if isinstance(version, str) else None
        if isinstance(capabilities, dict):
            self.client_capabilities = capabilities

    def error(self, code: int, message: str) -> None:
        self.error_code = code
        self.error_message = message[:300]

    def call_outcome(self) -> str | None:
        """What the call came to: as noted, else from its JSON-RPC error (-32603 is what a
        handler that raised gets), else None (not known yet: a streamed answer)."""
        if self.outcome is not None:
            return self.outcome
        if self.error_code is None:
            return None
        return "crash" if self.error_code == INTERNAL_ERROR else "error"

    def request_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "kind": "request",
            "time": iso_time(self.started),
            "request_id": self.request_id,
            "verb": self.verb,
            "path": self.path,
            "status": self.status,
            "era": self.era,
            "protocol_version": {"header": self.header_version, "body": self.body_version},
            "method": self.method,
            "jsonrpc_id": self.jsonrpc_id,
            "notification": self.notification,
            "client": {
                "name": self.client_name,
                "version": self.client_version,
                "capabilities": self.client_capabilities,
            },
            "session_id": self.session_id,
            "subject": self.subject,
            "user_agent": self.user_agent,
            "client_address": self.client_address,
            "error": None
            if self.error_code is None
            else {"code": self.error_code, "message": self.error_message},
            "duration_ms": round(
                ((self.ended_clock or time.perf_counter()) - self.clock) * 1000, 3
            ),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "streaming": self.streaming,
            "params": self.params,
        }
        if self.batch_size is not None:
            record["batch_size"] = self.batch_size
        if self.advertised is not None:
            record["advertised"] = self.advertised
        if self.method in CALL_METHODS:
            record["target"] = self.target
            record["outcome"] = self.call_outcome()
        return record

    def stream_record(self) -> dict[str, Any]:
        first = self.first_event_clock
        return {
            "v": SCHEMA_VERSION,
            "kind": "stream",
            "time": iso_time(time.time()),
            "request_id": self.request_id,
            "verb": self.verb,
            "era": self.era,
            "method": self.method,
            "session_id": self.session_id,
            "client": {"name": self.client_name, "version": self.client_version},
            "user_agent": self.user_agent,
            "opened": iso_time(self.started),
            "open_ms": round((time.perf_counter() - self.clock) * 1000, 3),
            "events": self.events,
            "bytes_out": self.bytes_out,
            "end": self.stream_end or "complete",
            "error": None
            if self.error_code is None
            else {"code": self.error_code, "message": self.error_message},
            "target": self.target,
            "outcome": self.call_outcome() if self.method in CALL_METHODS else None,
            "ttfb_ms": None if first is None else round((first - self.clock) * 1000, 3),
        }

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

    def observe(self, send: Send, emit: Callable[[Any], None]) -> Send:
        """Wrap ``send`` to learn status, bytes and events; a stream's request record is
        emitted as soon as the stream opens, so a long stream does not hide its request."""

        # Not a coroutine function: it returns the wrapped send's own awaitable, so observing
        # costs no extra coroutine per message.
        def observed(message: ASGIMessage) -> Awaitable[None]:
            kind = message["type"]
            if kind == "http.response.start":
                self.status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == b"content-type" and value.startswith(b"text/event-stream"):
                        self.streaming = True
            elif kind == "http.response.body":
                body = message.get("body", b"")
                self.bytes_out += len(body)
                if not message.get("more_body", False):
                    self.completed = True
                # Every frame this server writes is one send: count message events only.
                if self.streaming and b"data: {" in body:
                    if not self.events:
                        self.first_event_clock = time.perf_counter()
                    self.events += 1
                if self.streaming and not self.request_written:
                    self.request_written = True
                    emit(self.request_record())
            return send(message)

        return observed
