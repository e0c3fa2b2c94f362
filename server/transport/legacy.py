"""The legacy era over HTTP: session headers, JSON or resumable SSE, the GET stream, DELETE.

:meth:`LegacyHttp.post` takes a POST (batch, response, notification, request) the whole way
once the endpoint has read it; a refusal before anything is sent is raised for the endpoint.
A call runs inline in its request's task (a batch's calls each in a task of their own) and is
answered as JSON, or as resumable SSE once it sends something first or stays silent
(:mod:`server.transport.legacy_answer`, which says why). Every send, the GET stream's too, is
bounded by ``MCP_SEND_TIMEOUT_S``. A disconnect is not a cancellation in this era. Behind a
load balancer, answers and cancellations that find nothing here go on the bus to the replica
that waits, and a resume of another replica's stream is served from its mirror copy; finding
and ending sessions is :mod:`server.transport.legacy_sessions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Container
from functools import partial

from server.aio import create_task
from server.asgi import Headers, Receive, Send, header_text
from server.catalog.tools import Tool
from server.catalog.visibility import ListWatch, View
from server.dispatch import Target, target_name, target_scopes
from server.errors import InvalidRequest
from server.hub import Hub
from server.jsonrpc import Message, Notification, Request, Response, encode_result
from server.legacy.calls import LegacyCall
from server.legacy.era import LegacyEra
from server.legacy.eventstream import EventStream
from server.legacy.resume import elsewhere, locate
from server.legacy.runtime import Runtimes, SessionRuntime, is_standalone_id
from server.legacy.sessions import Session
from server.protocol import PRIMING_SINCE
from server.records.draft import Draft
from server.security.auth import Principal
from server.security.gate import Gate
from server.security.quotas import Quotas
from server.state.bus import Bus
from server.state.memory import MemoryBus, MemoryMirror
from server.state.messages import publish_ended, send_answer, send_cancel
from server.state.mirror import StreamMirror
from server.transport.legacy_answer import Answer, LegacyOptions
from server.transport.legacy_calls import DuplicateId, answer_batch, run_inline
from server.transport.legacy_sessions import LegacySessions, check_version_header
from server.transport.send import send_body, send_empty, send_json
from server.transport.sse import SSE_HEADERS, pump, sse_frame


class LegacyHttp:
    def __init__(
        self,
        era: LegacyEra,
        runtimes: Runtimes,
        hub: Hub,
        gate: Gate,
        options: LegacyOptions,
        *,
        bus: Bus | None = None,
        mirror: StreamMirror | None = None,
    ) -> None:
        self.era = era
        self.gate = gate
        # MCP_QUOTAS, when set (server.security.quotas): no call pays for a check otherwise.
        self.quotas: Quotas | None = None
        self.runtimes = runtimes
        self.hub = hub
        self.options = options
        self.bus: Bus = bus or MemoryBus()
        self.mirror: StreamMirror = mirror or MemoryMirror()
        self.sessions = LegacySessions(era, runtimes, gate)
        self.views = era.dispatcher.views
        self.stopping = False  # shutting down: no GET stream opens here (end_connections)

    # -- POST ------------------------------------------------------------------------------

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
    ) -> Awaitable[None]:
        """One legacy POST, from its session to the last byte of its answer: a request is
        :meth:`request`'s own coroutine."""
        if isinstance(message, Request):
            return self.request(
                receive, send, headers, message, draft, principal, json_ok=json_ok, sse_ok=sse_ok
            )
        return self.deliver(send, headers, message, draft, principal)

    async def deliver(
        self,
        send: Send,
        headers: Headers,
        message: Notification | Response | list[Message],
        draft: Draft,
        principal: Principal,
    ) -> None:
        """A batch, or a client's notification or response (202)."""
        targets: list[Target] = []
        if isinstance(message, list):
            # A batch is charged to the rate per message; the tool scopes of every request in
            # it are checked before any starts (403 for the whole, as for that request alone).
            self.gate.charge_more(draft, len(message) - 1)
            view = self.view(principal)
            targets = [
                self.resolve(each, view, principal) if isinstance(each, Request) else None
                for each in message
            ]
        elif isinstance(message, Response) and b"mcp-session-id" not in headers:
            raise InvalidRequest("Invalid request: this server sent no request to answer")
        check_version_header(headers)
        session, runtime = await self.sessions.find(headers, draft)
        if isinstance(message, list):
            calls = [
                self.call(each, target, session, runtime, headers, draft, principal, view)
                if isinstance(each, Request)
                else each
                for each, target in zip(message, targets, strict=True)
            ]
            await self.batch(send, session, runtime, calls, draft)
            return
        await self.take(session, runtime, message, alone=True)
        await send_empty(send, 202)

    def resolve(
        self,
        request: Request,
        view: View | None,
        principal: Principal,
        draft: Draft | None = None,
    ) -> Target:
        """What the request names, looked up once; its item's scopes are checked here, before
        its call starts, while a 403 can still be sent (the ``draft`` of a request alone then
        names what it refused). What is hidden from the caller (its :meth:`view`, asked once
        per request for this and its :meth:`call`) is not found."""
        target = self.era.resolve(request, view)
        self.require_scopes(target, principal, draft)
        return target

    def require_scopes(self, target: Target, principal: Principal, draft: Draft | None) -> None:
        """403 unless the caller holds the scopes of what it named (auth on)."""
        if target is not None and self.gate.authenticates:
            if draft is not None:
                draft.target = target_name(target)
            self.gate.require_item(principal, target_scopes(target))

    async def request(
        self,
        receive: Receive,
        send: Send,
        headers: Headers,
        request: Request,
        draft: Draft,
        principal: Principal,
        *,
        json_ok: bool,
        sse_ok: bool,
    ) -> None:
        view = self.view(principal)
        target = self.resolve(request, view, principal, draft)
        check_version_header(headers)
        if request.method == "initialize":
            slot = self.gate.session_slot(draft)  # 429 past this client's session cap
            try:
                await self.gate.settle(draft, slot)  # with Redis: its cap across replicas
                # The owner goes in with the session: one store write.
                session, result = await self.era.initialize(request, draft.subject)
            except BaseException:
                slot.release()
                raise
            self.gate.session_started(session.id, slot)
            draft.session_id = session.id
            draft.advertised = self.era.advertised(session.protocol_version)
            session_header = [(b"mcp-session-id", session.id.encode())]
            await send_json(send, 200, encode_result(request.id, result), session_header)
            return
        if request.method == "ping" and b"mcp-session-id" not in headers:
            # ping works before initialize
            await send_json(send, 200, encode_result(request.id, {}))
            return
        session, runtime = await self.sessions.find(headers, draft)
        if request.id in runtime.inflight:
            raise DuplicateId(request.id)
        if self.quotas is not None and isinstance(target, Tool):
            draft.target = target.name
            await self.quotas.charge(principal.tenant, target.name, draft)  # 429 before it
        call = self.call(request, target, session, runtime, headers, draft, principal, view)
        answer = Answer(
            draft.observe_receive(receive),  # tells the record the client left
            send,
            runtime,
            self.options,
            priming=session.protocol_version >= PRIMING_SINCE,
            sse_ok=sse_ok,
        )
        if not json_ok:
            answer.open()  # an SSE answer, whatever comes: streamed from the start
        try:
            payload, status, error = await run_inline(self.era, call, answer)
            if error is not None:
                draft.error(error.code, error.message)
            answer.end(payload, status, None if error is None else error.headers)
            draft.stream_end = await answer.finish(json_ok)
        except BaseException:
            if answer.writer is not None:
                answer.writer.cancel()  # the request ends: nothing may write after it
            raise
        finally:
            if answer.padding is not None:
                answer.padding.close()  # its keep-alive ends with the request
            draft.task = call.task

    def call(
        self,
        request: Request,
        target: Target,
        session: Session,
        runtime: SessionRuntime,
        headers: Headers,
        draft: Draft,
        principal: Principal,
        view: View | None,
    ) -> LegacyCall:
        """A request of ``session`` for the era, with what its Context says of the HTTP
        request that carried it, and what the caller may see (its :meth:`view`)."""
        caller = None if principal.anonymous else principal
        key = self.gate.key(draft)
        call = LegacyCall(request, target, session, runtime, caller, headers, draft, key)
        call.view = view
        return call

    def concerns(self, principal: Principal | None) -> ListWatch | None:
        """What tells a GET stream of ``principal`` which changes concern it, when items
        are hidden from some callers (None: every change)."""
        if principal is None or not self.views.hiding:
            return None
        return self.views.watch(principal)

    def view(self, principal: Principal) -> View | None:
        """What ``principal`` may see; None (everything) unless some item is hidden."""
        return self.views.view(principal) if self.views.hiding else None

    async def take(
        self,
        session: Session,
        runtime: SessionRuntime,
        message: Notification | Response,
        *,
        alone: bool = False,
    ) -> None:
        """A client's notification or answer; ``alone`` (no batch): its POST learns if heard."""
        if isinstance(message, Response):
            if not self.era.accept_response(runtime, message):  # it may wait on another replica
                await send_answer(self.bus, session.id, message, wait=alone)
        elif message.method == "notifications/initialized":
            await self.era.initialized(session)
        elif message.method == "notifications/cancelled" and not self.era.cancel(
            runtime, message.params
        ):
            # The call may run on another replica.
            await send_cancel(self.bus, session.id, message.params, wait=alone)

    async def batch(
        self,
        send: Send,
        session: Session,
        runtime: SessionRuntime,
        messages: list[LegacyCall | Notification | Response],
        draft: Draft,
    ) -> None:
        """JSON-RPC batches (2025-03-26 only; capped by the codec at MCP_MAX_BATCH): its
        requests come as calls (:meth:`call`); :func:`answer_batch` runs them."""
        take = partial(self.take, session, runtime)
        await answer_batch(send, self.era, self.options, session, runtime, messages, draft, take)

    # -- GET and DELETE --------------------------------------------------------------------

    async def get(
        self,
        receive: Receive,
        send: Send,
        headers: Headers,
        draft: Draft,
        *,
        sse_ok: bool,
        principal: Principal | None = None,
    ) -> None:
        """The standalone stream (unsolicited notifications), or the resumption of a stream."""
        if not sse_ok:
            raise InvalidRequest(
                "GET opens an SSE stream: accept text/event-stream", http_status=406
            )
        check_version_header(headers)
        session, runtime = await self.sessions.find(headers, draft)
        if self.stopping:  # as the streams open at the stop: ended, resumed on another replica
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            draft.stream_end = "shutdown"
            return
        last_event_id = header_text(headers, b"last-event-id")
        wanted = elsewhere(runtime, last_event_id)
        own = None  # another replica's GET stream: this one's opens first (nothing unheard)
        if wanted is not None and is_standalone_id(wanted[0]):
            own = await self.standalone(session, runtime, principal)
        copy = await self.mirror.open(session.id, *wanted) if wanted else None
        found = locate(runtime, last_event_id, copy, self.runtimes.events_per_stream)
        stream, after, follow = found.stream, found.after, found.follow
        if stream is None:
            stream, after = own or await self.standalone(session, runtime, principal)
            if own is not None:  # what changed since the other's copy, while nobody held it
                runtime.catch_up(await self.mirror.missed(copy), after)
        standalone = stream is runtime.standalone
        if standalone and runtime.standalone_followers:
            raise InvalidRequest(
                "Conflict: this session already has an open GET stream", http_status=409
            )
        if standalone:
            runtime.standalone_followers += 1
        if follow:
            runtime.remote_followers += 1
        feeder = create_task(self.mirror.tail(session.id, stream)) if follow else None
        timeout_s = self.options.send_timeout_s
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if session.protocol_version >= PRIMING_SINCE:
                priming_id = f"{stream.id}_{after}"
                priming = sse_frame(b"", event_id=priming_id, retry_ms=self.options.retry_ms)
                await send_body(send, priming, timeout_s)
            for event_id, data in found.missed:
                await send_body(send, sse_frame(data, event_id=event_id), timeout_s)
            draft.stream_end = await pump(
                receive,
                send,
                stream,
                after,
                keepalive_s=self.options.keepalive_s,
                send_timeout_s=timeout_s,
            )
        except TimeoutError:
            # The client stopped reading: the follower ends (so an idle session can expire)
            # and the server's HTTP protocol aborts the connection.
            draft.stream_end = "send_timeout"
        finally:
            if standalone:
                runtime.standalone_followers -= 1
            if feeder is not None:
                runtime.remote_followers -= 1
                feeder.cancel()

    async def standalone(
        self, session: Session, runtime: SessionRuntime, principal: Principal | None
    ) -> tuple[EventStream, int]:
        """The session's GET stream here (it offers resource updates: subscriptions loaded),
        and its newest event (a GET follows it from there)."""
        await runtime.subscriptions.load(partial(self.era.store.subscriptions, session.id))
        stream = runtime.standalone_stream(
            self.hub,
            lambda: self.era.capabilities(session.protocol_version),
            concerns=self.concerns(principal),
        )
        return stream, stream.last_seq

    async def delete(self, send: Send, headers: Headers, draft: Draft) -> None:
        session, _ = await self.sessions.find(headers, draft)
        await self.era.store.delete(session.id)
        if self.era.tasks is not None:
            await self.era.tasks.session_ended(session)
        self.sessions.session_ended(session.id)
        publish_ended(self.bus, session.id)
        await send_empty(send, 200)

    def end_connections(self, keep: Container[str] = ()) -> None:
        """Shutdown: end the GET streams (clients reconnect elsewhere) but those of the
        sessions in ``keep``; calls finish. A GET that comes later ends at once too."""
        self.stopping = True
        self.runtimes.end_standalone_connections("shutdown", keep)
