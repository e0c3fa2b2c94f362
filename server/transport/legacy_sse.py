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
import logging
from functools import partial
from typing import Any
from urllib.parse import quote

from server.asgi import (
    Headers,
    Receive,
    Scope,
    Send,
    header_text,
    path_of,
    read_headers,
)
from server.call_note import CALL_NOTE
from server.catalog.tools import Tool
from server.catalog.visibility import View
from server.errors import InvalidRequest, McpError, ServiceUnavailable, wire_error
from server.jsonrpc import Message, Request, decode, encode_error, encode_result
from server.legacy.calls import LegacyCall
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.logs import bind_request
from server.records.draft import Draft
from server.security.auth import Principal
from server.security.limits import TooManyPending
from server.state.messages import publish_sse
from server.transport.endpoint import McpEndpoint
from server.transport.guards import check_content_type, negotiate
from server.transport.legacy import LegacyHttp
from server.transport.legacy_calls import DuplicateId, Outcome, start_in_task
from server.transport.legacy_sse_parts import (
    TRANSPORT,
    SseOptions,
    endpoint_frame,
    forward,
    open_draft,
    session_param,
)
from server.transport.request_body import read_body
from server.transport.send import send_body, send_empty
from server.transport.sse import SSE_HEADERS, pump
from server.transport.sse_records import StreamRecords
from server.transport.sse_sessions import SseSessions

log = logging.getLogger(__name__)

# The version a session has from its GET until its initialize names one.
OPENED_AS = "2024-11-05"


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
        # The sessions whose stream this process holds open, by id, and their GETs' records.
        self.held: dict[str, SessionRuntime] = {}
        self.opened: dict[str, Draft] = {}
        self.draining = False
        # The calls this process runs for the transport, whichever replica holds their stream.
        self.calls: set[asyncio.Task[Any]] = set()
        self.records = StreamRecords(self.era.store, self.recorder.record)  # the GETs' records
        # Ending sessions, also when the bus or Redis fails.
        self.sessions = SseSessions(legacy, self.held, lambda: self.draining)

    # -- one request ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = read_headers(scope)
        draft = open_draft(scope, headers, self.endpoint)
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
                    self.endpoint.check_head(scope, headers, draft)
                    retiring.check(draft, sse=True, era="legacy")
                principal = await self.endpoint.admitted(
                    scope, headers, draft, head_checked=retiring is not None
                )
                path = path_of(scope)
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
            if draft.rate_due:  # refused before it was counted in Redis: counted now
                await self.gate.settle(draft, late=True)
            if not later:
                draft.finish(self.recorder.record)

    # -- GET: the stream --------------------------------------------------------------------

    async def stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        draft: Draft,
        principal: Principal | None,
    ) -> None:
        """Open a session and its stream: the ``endpoint`` event, then every message of the
        session until the client leaves, stops reading, or the server ends it."""
        draft.era, draft.transport = "legacy", TRANSPORT
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
                await self.gate.settle(draft, stream_slot, session_slot)  # with Redis
                session = await self.era.store.create(OPENED_AS, {}, {}, owner=draft.subject)
            except BaseException:
                session_slot.release()
                raise
            self.gate.session_started(session.id, session_slot)
            draft.session_id = session.id
            try:
                await self._follow(scope, receive, send, session, draft, principal)
            finally:
                try:
                    await self.records.name_client(session.id, draft)
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
        principal: Principal | None,
    ) -> None:
        runtime = self.legacy.runtimes.get(session.id)
        await runtime.subscriptions.load(partial(self.era.store.subscriptions, session.id))
        # Nothing replays this transport: its stream keeps an event only until it is sent.
        stream = runtime.standalone_stream(
            self.legacy.hub,
            lambda: self.era.capabilities(session.protocol_version),
            sent_once=self.options.max_queued_bytes,
            concerns=self.legacy.concerns(principal),
        )
        # Ended before the pump starts (an overflow while the endpoint event was sent, a
        # shutdown) is ended for the pump too.
        generation = stream.generation
        runtime.standalone_followers += 1
        self.held[session.id] = runtime
        # The GET's record waits for the client's name (its initialize), or the stream's end.
        draft.hold_request = True
        self.opened[session.id] = draft
        root = (scope.get("root_path") or "").rstrip("/")
        url = f"{quote(root + self.options.messages_path)}?session_id={session.id}"
        timeout_s = self.options.send_timeout_s
        try:
            # What calls on other replicas send this stream comes here from now on.
            await self.legacy.bus.hold(session.id)
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send_body(send, endpoint_frame(url), timeout_s)
            if self.draining:
                # Asked of a stopping replica (over a proxy's kept-alive connection): ended at
                # once, a clean close the client reconnects from, through the proxy, elsewhere.
                stream.end_connections("shutdown")
            draft.stream_end = await pump(
                receive,
                self.records.naming_send(send, session.id, draft),
                stream,
                stream.last_seq,
                keepalive_s=self.options.keepalive_s,
                send_timeout_s=timeout_s,
                generation=generation,
            )
        except TimeoutError:
            draft.stream_end = "send_timeout"
        finally:
            self.legacy.bus.release(session.id)
            runtime.standalone_followers -= 1
            self.held.pop(session.id, None)
            self.opened.pop(session.id, None)

    def _close_session(self, session_id: str) -> None:
        """The stream ended, whichever way: so does its session, here and on every replica
        (:meth:`SseSessions.close`)."""
        self.sessions.close(session_id)

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
        session_id = session_param(scope.get("query_string", b""))
        # Draining: a session whose stream is here is ending (its client connects again); any
        # other's message (one a proxy sent on a connection kept alive) is served as ever.
        if self.draining and session_id in self.held:
            raise ServiceUnavailable("Server shutting down; connect again")
        content_type = headers.get(b"content-type")
        check_content_type(None if content_type is None else content_type.decode("latin-1"))
        body = await read_body(receive, headers, self.endpoint.options.max_body_bytes, draft)
        message = decode(body, max_batch=self.endpoint.options.max_batch)
        draft.describe(message)
        del body
        messages = message if isinstance(message, list) else [message]
        self.gate.charge_more(draft, len(messages) - 1)  # a batch: charged per message
        if draft.rate_due and isinstance(message, list):  # with Redis: a batch's, there too
            await self.gate.settle(draft, message=message)
        found = {**headers, b"mcp-session-id": session_id.encode()}
        session, runtime = await self.legacy.sessions.find(found, draft)
        await self.sessions.check_held(session.id)
        # The tool scopes of every request are checked before any starts (403 for the whole).
        alone = None if isinstance(message, list) else draft  # names what a refusal refused
        view = self.legacy.view(principal)  # once, for the lookups and the calls
        targets = [self._resolve(each, view, principal, alone) for each in messages]
        starting = sum(1 for each in messages if isinstance(each, Request))
        if len(runtime.inflight) + starting > self.options.max_pending:
            raise TooManyPending(
                f"At most {self.options.max_pending} requests of a session may run at once; "
                "wait for an answer first"
            )
        if self.legacy.quotas is not None:  # MCP_QUOTAS: 429 for the POST, before any starts
            for target in targets:
                if isinstance(target, Tool):
                    draft.target = target.name if alone else None
                    await self.legacy.quotas.charge(principal.tenant, target.name, draft)
        if draft.rate_due:  # with Redis: counted there now, unless a quota charge did
            await self.gate.settle(draft)
        started: tuple[LegacyCall, asyncio.Task[Outcome]] | None = None
        for each, target in zip(messages, targets, strict=True):
            if not isinstance(each, Request):
                await self.legacy.take(session, runtime, each, alone=each is message)
            elif each.method == "initialize":
                await self._initialize(session, each, draft)
            else:
                if each.id in runtime.inflight and not isinstance(target, McpError):
                    named: Any = DuplicateId(each.id)
                else:
                    named = target
                call = self.legacy.call(
                    each, named, session, runtime, headers, draft, principal, view
                )
                task = self._start(call, named, draft)
                if task is not None and not isinstance(message, list):
                    started = (call, task)
        await send_empty(send, 202)
        if started is None:
            return False
        call, task = started
        # The request's record waits for its call: its outcome, and the task it made.
        task.add_done_callback(lambda done: self._recorded(draft, call, done))
        return True

    def _resolve(
        self, message: Message, view: View | None, principal: Principal, draft: Draft | None
    ) -> Any:
        """What a request names, or the error to answer it with on the stream; its item's
        scopes are checked here (a 403 for the POST itself, as on the MCP path)."""
        if not isinstance(message, Request):
            return None
        try:
            target = self.era.resolve(message, view)
        except McpError as error:
            return error
        self.legacy.require_scopes(target, principal, draft)
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
        if (opened := self.opened.get(session.id)) is not None:
            # The stream's GET (held here) is this client's: its record says so.
            opened.set_client(session.client_info, None)
            opened.write_request(self.recorder.record)
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
        task, stream = start_in_task(self.era, call, replayable=False)
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)
        if session.id not in self.held:
            self.sessions.watch(session.id, task)  # its stream is held elsewhere
        forward(stream, partial(self._deliver, session.id))
        # Nothing resumes this transport's calls: the stream is let go once it has finished.
        stream.on_finish = call.runtime.drop_stream
        return task

    def _deliver(self, session_id: str, payload: bytes) -> None:
        """A message for the session's stream: here if held here, else to the replica that
        holds it."""
        if not self.legacy.sessions.to_stream(session_id, payload):
            publish_sse(self.legacy.bus, session_id, payload)

    def _recorded(self, draft: Draft, call: LegacyCall, task: asyncio.Task[Outcome]) -> None:
        if not task.cancelled() and (error := task.result()[2]) is not None:
            draft.error(error.code, error.message)
        draft.task = call.task
        draft.finish(self.recorder.record)

    # -- shutdown ---------------------------------------------------------------------------

    async def drain(self) -> None:
        """Close each stream once the calls of its session running here have answered (a new
        one at once, after its endpoint event), and return once every call this process runs
        has (the drain deadline ends the rest): their answers go out, here or elsewhere."""
        self.draining = True
        closing = [self._close_when_idle(runtime) for runtime in self.held.values()]
        await asyncio.gather(*closing)
        while self.calls:  # those started meanwhile too (messages for other replicas' streams)
            await asyncio.wait(set(self.calls))

    @staticmethod
    async def _close_when_idle(runtime: SessionRuntime) -> None:
        # No new call starts while draining: wait for the running ones (each in its task).
        calls = [task for task in runtime.inflight.values() if isinstance(task, asyncio.Task)]
        if calls:
            await asyncio.wait(calls)
        if runtime.standalone is not None:
            runtime.standalone.end_connections("shutdown")
