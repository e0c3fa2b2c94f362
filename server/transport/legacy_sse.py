"""The 2024-11-05 HTTP+SSE transport, beside Streamable HTTP, for clients that speak only it.

``GET /sse`` opens a stream whose first event is ``endpoint`` (``<prefix>/messages?session_id=``);
each client message is a POST there, answered 202, and every answer, notification and
question goes out on the stream as ``event: message`` (docs/sse-transport.md). Nothing is
implemented twice: the GET makes a legacy session and follows its GET stream; ``initialize``
fills it in; requests run as legacy calls (:func:`~server.transport.legacy_calls.start_in_task`)
whose messages go to the stream here or, on another replica, over the bus (``sse``). Bounds:
the MCP path's checks, a stream and a session slot per GET, ``MCP_SSE_TRANSPORT_MAX_PENDING``
running requests, bounded sends, keep-alives. The session lives as long as its stream; at
shutdown a stream closes once its calls here have answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qs, quote

from server.asgi import Headers, Receive, Scope, Send, header_text, read_headers
from server.call_note import CALL_NOTE
from server.catalog.tools import Tool
from server.errors import InvalidRequest, McpError, ServiceUnavailable, wire_error
from server.jsonrpc import Message, Request, decode, encode_error, encode_result
from server.legacy.calls import LegacyCall
from server.legacy.eventstream import EventStream
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session, is_session_id
from server.logs import bind_request
from server.records.draft import Draft
from server.security.auth import Principal
from server.security.limits import TooManyPending
from server.security.networks import client_address, in_networks
from server.transport.endpoint import McpEndpoint, read_body
from server.transport.guards import check_content_type, negotiate
from server.transport.legacy import LegacyHttp
from server.transport.legacy_calls import Outcome, start_in_task
from server.transport.send import send_body, send_empty
from server.transport.sse import SSE_HEADERS, pump

log = logging.getLogger(__name__)

# The version a session has from its GET until its initialize names one.
OPENED_AS = "2024-11-05"
TRANSPORT = "sse"


@dataclass(frozen=True, slots=True)
class SseOptions:
    stream_path: str
    messages_path: str
    max_pending: int
    keepalive_s: float
    send_timeout_s: float


def endpoint_frame(url: str) -> bytes:
    """The stream's first event: where the client posts its messages."""
    return b"event: endpoint\r\ndata: " + url.encode() + b"\r\n\r\n"


def forward(stream: EventStream, deliver: Callable[[bytes], object]) -> None:
    """Hand every message ``stream`` publishes to ``deliver`` as it is published (after
    whoever observed the stream already: the mirror)."""
    previous = stream.observer

    def observer(seq: int, payload: bytes | None) -> None:
        if previous is not None:
            previous(seq, payload)
        if payload is not None:
            deliver(payload)

    stream.observer = observer


class SseTransport:
    """The two routes of the HTTP+SSE transport, and the streams it holds in this process."""

    def __init__(self, endpoint: McpEndpoint, legacy: LegacyHttp, options: SseOptions) -> None:
        self.endpoint = endpoint
        self.legacy = legacy
        self.era = legacy.era
        self.gate = endpoint.gate
        self.recorder = endpoint.recorder
        self.options = options
        self.paths = frozenset({options.stream_path, options.messages_path})
        # The sessions whose stream this process holds open, by id.
        self.held: dict[str, SessionRuntime] = {}
        self.draining = False
        self._closers: set[asyncio.Task[None]] = set()
        # The calls this process runs for the transport, whichever replica holds their stream.
        self.calls: set[asyncio.Task[Any]] = set()

    # -- one request ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = read_headers(scope)
        draft = _draft(scope, headers, self.endpoint)
        bound = bind_request(draft)
        observed_send = draft.observe(send, self.recorder.record)
        later = False  # the request's record is left to its call, which ends later
        retiring = self.endpoint.retiring
        if retiring is not None:
            observed_send = retiring.headers_on(observed_send, draft)
        try:
            try:
                if retiring is not None:  # before authentication, like the MCP path's
                    draft.era, draft.transport = "legacy", TRANSPORT
                    self.endpoint.admit(scope, headers)
                    retiring.check(draft, sse=True, era="legacy")
                principal = await self.endpoint.admitted(scope, headers, draft)
                path = _path(scope)
                verb = scope["method"]
                if path == self.options.stream_path and verb == "GET":
                    await self.stream(
                        scope, draft.observe_receive(receive), observed_send, draft, principal
                    )
                elif path == self.options.messages_path and verb == "POST":
                    later = await self.message(
                        scope, receive, observed_send, headers, draft, principal
                    )
                else:
                    raise InvalidRequest(f"Method {verb} not allowed", http_status=405)
            except Exception as error:
                if draft.status is not None:
                    raise  # the answer has begun: too late to refuse
                await self.endpoint.refuse(observed_send, error, "legacy", None, draft, scope)
        finally:
            CALL_NOTE.reset(bound)
            if not later:
                draft.finish(self.recorder.record)

    # -- GET: the stream --------------------------------------------------------------------

    async def stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        draft: Draft,
        principal: Principal | None = None,
    ) -> None:
        """Open a session and its stream: the ``endpoint`` event, then every message of the
        session until the client leaves, stops reading, or the server ends it."""
        draft.era, draft.transport = "legacy", TRANSPORT
        if self.draining:
            raise ServiceUnavailable("Server shutting down; connect again")
        headers = read_headers(scope)
        _, sse_ok = negotiate(header_text(headers, b"accept"))
        if not sse_ok:
            raise InvalidRequest(
                "GET opens an SSE stream: accept text/event-stream", http_status=406
            )
        stream_slot = self.gate.stream_slot(draft)  # 429 past this client's stream cap
        try:
            session_slot = self.gate.session_slot(draft)  # and past its session cap
            try:
                session = await self.era.store.create(OPENED_AS, {}, {}, owner=draft.subject)
            except BaseException:
                session_slot.release()
                raise
            self.gate.session_started(session.id, session_slot)
            draft.session_id = session.id
            try:
                await self._follow(scope, receive, send, session, draft, principal)
            finally:
                self._close_session(session.id)
        finally:
            stream_slot.release()

    async def _follow(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: Session,
        draft: Draft,
        principal: Principal | None = None,
    ) -> None:
        runtime = self.legacy.runtimes.get(session.id)
        await runtime.subscriptions.load(partial(self.era.store.subscriptions, session.id))
        stream = runtime.standalone_stream(
            self.legacy.hub,
            lambda: self.era.capabilities(session.protocol_version),
            self.legacy.concerns(principal),
        )
        runtime.standalone_followers += 1
        self.held[session.id] = runtime
        root = (scope.get("root_path") or "").rstrip("/")
        url = f"{quote(root + self.options.messages_path)}?session_id={session.id}"
        timeout_s = self.options.send_timeout_s
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send_body(send, endpoint_frame(url), timeout_s)
            draft.stream_end = await pump(
                receive,
                send,
                stream,
                stream.last_seq,
                keepalive_s=self.options.keepalive_s,
                send_timeout_s=timeout_s,
            )
        except TimeoutError:
            draft.stream_end = "send_timeout"
        finally:
            runtime.standalone_followers -= 1
            self.held.pop(session.id, None)

    def _close_session(self, session_id: str) -> None:
        """The stream ended: so does its session, here and on every replica."""
        self.legacy.sessions.session_ended(session_id)
        self.legacy.bus.publish("ended", {"sid": session_id})
        closer = asyncio.ensure_future(self._delete(session_id))
        self._closers.add(closer)
        closer.add_done_callback(self._closers.discard)

    async def _delete(self, session_id: str) -> None:
        with contextlib.suppress(ServiceUnavailable):  # Redis away: it expires by itself
            await self.era.store.delete(session_id)

    # -- POST: one message (or batch) -------------------------------------------------------

    async def message(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        draft: Draft,
        principal: Principal,
    ) -> bool:
        """Take a message of a session: 202, and its answer on the session's stream. True when
        the request's record is left to the call it started."""
        draft.era, draft.transport = "legacy", TRANSPORT
        session_id = _session_param(scope.get("query_string", b""))
        if self.draining:
            raise ServiceUnavailable("Server shutting down; connect again")
        content_type = headers.get(b"content-type")
        check_content_type(None if content_type is None else content_type.decode("latin-1"))
        body = await read_body(receive, headers, self.endpoint.options.max_body_bytes, draft)
        message = decode(body, max_batch=self.endpoint.options.max_batch)
        draft.describe(message)
        del body
        messages = message if isinstance(message, list) else [message]
        self.gate.charge_more(draft, len(messages) - 1)  # a batch: charged per message
        found = {**headers, b"mcp-session-id": session_id.encode()}
        session, runtime = await self.legacy.sessions.find(found, draft)
        # The tool scopes of every request are checked before any starts (403 for the whole).
        targets = [self._resolve(each, principal) for each in messages]
        starting = sum(1 for each in messages if isinstance(each, Request))
        if len(runtime.inflight) + starting > self.options.max_pending:
            raise TooManyPending(
                f"At most {self.options.max_pending} requests of a session may run at once; "
                "wait for an answer first"
            )
        started: tuple[LegacyCall, asyncio.Task[Outcome]] | None = None
        for each, target in zip(messages, targets, strict=True):
            if not isinstance(each, Request):
                await self.legacy.take(session, runtime, each)
            elif each.method == "initialize":
                await self._initialize(session, each, draft)
            else:
                call = self.legacy.call(each, target, session, runtime, headers, draft, principal)
                task = self._start(call, target, draft)
                if task is not None and not isinstance(message, list):
                    started = (call, task)
        await send_empty(send, 202)
        if started is None:
            return False
        call, task = started
        # The request's record waits for its call: its outcome, and the task it made.
        task.add_done_callback(lambda done: self._recorded(draft, call, done))
        return True

    def _resolve(self, message: Message, principal: Principal) -> Any:
        """What a request names, or the error to answer it with on the stream; a tool's
        scopes are checked here (a 403 for the POST itself, as on the MCP path)."""
        if not isinstance(message, Request):
            return None
        try:
            target = self.era.resolve(message, self.legacy.view(principal))
        except McpError as error:
            return error
        if isinstance(target, Tool) and self.gate.authenticates:
            self.gate.require_tool(principal, target.scopes)
        return target

    async def _initialize(self, session: Session, request: Request, draft: Draft) -> None:
        try:
            result = await self.era.initialize_opened(session, request)
        except McpError as error:
            wire = wire_error(error, "legacy", request.method)
            draft.error(wire.code, wire.message)
            self._deliver(session.id, encode_error(request.id, wire.body))
            return
        draft.advertised = self.era.advertised(session.protocol_version)
        draft.body_version = session.protocol_version
        draft.set_client(session.client_info, session.client_capabilities)
        self._deliver(session.id, encode_result(request.id, result))

    def _start(self, call: LegacyCall, target: Any, draft: Draft) -> asyncio.Task[Outcome] | None:
        """Run one request as a legacy call; what it sends goes to the session's stream.
        ``target`` is what it names, or the error to answer it with at once."""
        request, session = call.request, call.session
        if isinstance(target, McpError):
            wire = wire_error(target, "legacy", request.method)
            draft.error(wire.code, wire.message)
            self._deliver(session.id, encode_error(request.id, wire.body))
            return None
        task, stream = start_in_task(self.era, call)
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)
        forward(stream, partial(self._deliver, session.id))
        # Nothing resumes this transport's calls: the stream is let go once it has finished.
        stream.on_finish = call.runtime.drop_stream
        return task

    def _deliver(self, session_id: str, payload: bytes) -> None:
        """A message for the session's stream: here if held here, else to the replica that
        holds it."""
        if not self.legacy.sessions.to_stream(session_id, payload):
            self.legacy.bus.publish("sse", {"sid": session_id, "m": payload.decode()})

    def _recorded(self, draft: Draft, call: LegacyCall, task: asyncio.Task[Outcome]) -> None:
        if not task.cancelled() and (error := task.result()[2]) is not None:
            draft.error(*error)
        draft.task = call.task
        draft.finish(self.recorder.record)

    # -- shutdown ---------------------------------------------------------------------------

    async def drain(self) -> None:
        """Refuse new streams and messages; close each stream once the calls of its session
        running here have answered, and return once every call this process runs has (the
        drain deadline ends the rest): their answers go out, here or to another replica."""
        self.draining = True
        closing = [self._close_when_idle(runtime) for runtime in self.held.values()]
        await asyncio.gather(*closing)
        if self.calls:
            await asyncio.wait(set(self.calls))

    @staticmethod
    async def _close_when_idle(runtime: SessionRuntime) -> None:
        # No new call starts while draining: wait for the running ones (each in its task).
        calls = [task for task in runtime.inflight.values() if isinstance(task, asyncio.Task)]
        if calls:
            await asyncio.wait(calls)
        if runtime.standalone is not None:
            runtime.standalone.end_connections("shutdown")


def _session_param(query_string: bytes) -> str:
    values = parse_qs(query_string.decode("latin-1")).get("session_id")
    if not values:
        raise InvalidRequest("session_id is required: POST to the URL the endpoint event named")
    session_id = values[0].strip()
    if not is_session_id(session_id):
        raise InvalidRequest("session_id is not a session id of this server")
    return session_id


def _path(scope: Scope) -> str:
    path: str = scope.get("path", "")
    root = scope.get("root_path") or ""
    if root and path.startswith(root):
        path = path[len(root) :]
    return path


def _draft(scope: Scope, headers: Headers, endpoint: McpEndpoint) -> Draft:
    """The request's record, opened as the MCP path opens its own."""
    peer = scope.get("client")
    address = peer[0] if peer else None
    trusted = endpoint.options.trusted_proxies
    from_proxy = bool(trusted) and address is not None and in_networks(address, trusted)
    if from_proxy:
        address = client_address(address, header_text(headers, b"x-forwarded-for"), trusted)
    draft = Draft(
        scope["method"],
        scope["path"],
        header_text(headers, b"user-agent"),
        address,
        header_text(headers, b"mcp-protocol-version"),
    )
    draft.era, draft.transport = "legacy", TRANSPORT
    if from_proxy or b"traceparent" in headers:
        draft.carry(headers, from_proxy)
    return draft
