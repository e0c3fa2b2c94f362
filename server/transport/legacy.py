"""The legacy era over HTTP: session headers, JSON or resumable SSE, the GET stream, DELETE.

Each call in a session runs in its own task and writes to its own
:class:`~server.legacy.eventstream.EventStream`; the HTTP response follows that stream. A call that
sends nothing before its result is answered with plain JSON; otherwise the response becomes SSE
with a priming event (id, empty data, ``retry``) for clients of 2025-11-25 and later, and every
message carries an id so a dropped connection can be resumed with ``GET`` + ``Last-Event-ID``.
A disconnect is not a cancellation in this era: the call goes on, its messages are kept for
the resume, and only ``notifications/cancelled`` (or the session ending) stops it.

Behind a load balancer the session's other requests may reach other replicas: answers to the
server's questions and cancellations that find nothing here go on the :mod:`~server.state.bus` to
the replica that waits, and a resume of a stream another replica holds is served from its
:mod:`~server.state.mirror` copy.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from server.aio import create_task
from server.asgi import Headers, Receive, Send, header_text
from server.errors import InvalidRequest
from server.hub import Hub
from server.jsonrpc import (
    Message,
    Notification,
    Request,
    Response,
    encode_error,
    encode_result,
)
from server.legacy.calls import Call, finished, start_call
from server.legacy.era import LegacyEra
from server.legacy.resume import elsewhere, locate
from server.legacy.runtime import Runtimes, SessionRuntime
from server.legacy.sessions import Session, checked_session_id
from server.protocol import LEGACY_VERSIONS, PRIMING_SINCE
from server.records.draft import Draft
from server.security.gate import Gate
from server.state.bus import Bus, LocalBus
from server.state.mirror import LocalMirror, StreamMirror
from server.transport.sse import (
    SSE_HEADERS,
    DisconnectWatch,
    event_frame,
    priming_frame,
    pump,
    send_body,
    send_empty,
    send_json,
    uncancel,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LegacyOptions:
    keepalive_s: float
    retry_ms: int


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
        self.runtimes = runtimes
        self.hub = hub
        self.options = options
        self.bus: Bus = bus or LocalBus()
        self.mirror: StreamMirror = mirror or LocalMirror()

    # -- sessions and headers --------------------------------------------------------------

    @staticmethod
    def check_version_header(headers: Headers) -> None:
        version = header_text(headers, b"mcp-protocol-version")
        if version is not None and version.strip() not in LEGACY_VERSIONS:
            raise InvalidRequest(
                f"Unsupported MCP-Protocol-Version {version.strip()!r}; supported: "
                + ", ".join(LEGACY_VERSIONS)
            )

    async def session(self, headers: Headers, draft: Draft) -> tuple[Session, SessionRuntime]:
        session_id = header_text(headers, b"mcp-session-id")
        if session_id is None or not session_id.strip():
            raise InvalidRequest(
                "Bad Request: the Mcp-Session-Id header is required; send initialize first"
            )
        session_id = checked_session_id(session_id)  # a 400 before any store sees it
        session = await self.era.store.get(session_id)
        if session is not None and session.owner != draft.subject:
            # Another subject's session is, for this caller, a session that does not exist.
            session = None
        elif session is None:
            self.session_ended(session_id)  # found expired just now: release it too
        if session is None:
            raise InvalidRequest(
                "Session not found: it ended or expired; send initialize again", http_status=404
            )
        runtime = self.runtimes.get(session.id)
        # What the client declared at initialize is carried on every record of its session.
        draft.session_id = session.id
        draft.client(session.client_info, session.client_capabilities)
        if draft.body_version is None:
            draft.body_version = session.protocol_version
        return session, runtime

    # -- POST ------------------------------------------------------------------------------

    async def request(
        self,
        receive: Receive,
        send: Send,
        headers: Headers,
        request: Request,
        draft: Draft,
        *,
        json_ok: bool,
        sse_ok: bool,
    ) -> None:
        self.check_version_header(headers)
        if request.method == "initialize":
            slot = self.gate.session_slot(draft)  # 429 past this client's session cap
            try:
                session, result = await self.era.initialize(request)
            except BaseException:
                slot.release()
                raise
            self.gate.session_started(session.id, slot)
            session.owner = draft.subject
            await self.era.store.save(session)
            draft.session_id = session.id
            draft.advertised = self.era.advertised(session.protocol_version)
            session_header = [(b"mcp-session-id", session.id.encode())]
            await send_json(send, 200, encode_result(request.id, result), session_header)
            return
        if request.method == "ping" and b"mcp-session-id" not in headers:
            await send_json(
                send, 200, encode_result(request.id, {})
            )  # ping works before initialize
            return
        session, runtime = await self.session(headers, draft)
        call = self.start(session, runtime, request)
        await self.respond(
            receive, send, session, runtime, call, draft=draft, json_ok=json_ok, sse_ok=sse_ok
        )

    def start(self, session: Session, runtime: SessionRuntime, request: Request) -> Call:
        return start_call(self.era, session, runtime, request)

    async def respond(
        self,
        receive: Receive,
        send: Send,
        session: Session,
        runtime: SessionRuntime,
        call: Call,
        *,
        draft: Draft,
        json_ok: bool,
        sse_ok: bool,
    ) -> None:
        try:
            ended = await self._respond(
                receive, send, session, runtime, call, json_ok=json_ok, sse_ok=sse_ok
            )
            if ended is not None:
                draft.stream_end = ended
        finally:
            if call.error is not None:
                draft.error(*call.error)
            draft.task = call.task

    async def _respond(
        self,
        receive: Receive,
        send: Send,
        session: Session,
        runtime: SessionRuntime,
        call: Call,
        *,
        json_ok: bool,
        sse_ok: bool,
    ) -> str | None:
        """Answer one call; for a stream, why its connection ended."""
        stream = call.stream
        generation = stream.generation
        with DisconnectWatch(receive) as disconnect:
            try:
                # JSON or SSE: decided by whether anything comes before the result.
                wait_for = stream.wait_beyond(0, generation) if sse_ok else finished(stream)
                await wait_for
            except asyncio.CancelledError:
                if not disconnect.happened:
                    raise
                uncancel()
                return "client_closed"  # the call goes on; its messages stay resumable
        events = stream.events_after(0)
        if stream.finished and (not events or (call.final is None and not sse_ok)):
            # Cancelled: the spec wants no response, so none is sent.
            runtime.drop_stream(stream)
            if sse_ok:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                await send({"type": "http.response.body", "body": b""})
            else:
                await send_empty(send, 204)
            return None
        if stream.finished and (len(events) == 1 or not sse_ok) and (json_ok or not sse_ok):
            runtime.drop_stream(stream)
            assert call.final is not None
            await send_json(send, call.status, call.final)
            return None
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        if session.protocol_version >= PRIMING_SINCE:
            await send_body(send, priming_frame(stream.priming_id, self.options.retry_ms))
        # If the call already ended this connection (SSE polling), pump sends what there is
        # and closes; the client resumes from the priming id.
        return await pump(
            receive, send, stream, 0, keepalive_s=self.options.keepalive_s, generation=generation
        )

    async def notification(
        self, send: Send, headers: Headers, message: Notification, draft: Draft
    ) -> None:
        self.check_version_header(headers)
        session, runtime = await self.session(headers, draft)
        if message.method == "notifications/initialized":
            await self.era.initialized(session)
        elif message.method == "notifications/cancelled":
            self.cancel(session, runtime, message)
        await send_empty(send, 202)

    def cancel(self, session: Session, runtime: SessionRuntime, message: Notification) -> None:
        if not self.era.cancel(runtime, message.params):
            # The call may run on another replica.
            self.bus.publish("cancel", {"sid": session.id, "params": dict(message.params)})

    def answer(self, session: Session, runtime: SessionRuntime, message: Response) -> None:
        if not self.era.accept_response(runtime, message):
            # The question may wait on another replica; a stray answer is dropped there.
            answer = {"id": message.id, "result": message.result, "error": message.error}
            self.bus.publish("answer", {"sid": session.id, **answer})

    async def response(self, send: Send, headers: Headers, message: Response, draft: Draft) -> None:
        self.check_version_header(headers)
        session, runtime = await self.session(headers, draft)
        self.answer(session, runtime, message)
        await send_empty(send, 202)

    async def batch(
        self, send: Send, headers: Headers, messages: list[Message], draft: Draft
    ) -> None:
        """JSON-RPC batches (2025-03-26 only): capped, and charged to the rate per message."""
        self.gate.charge_more(draft, len(messages) - 1)
        self.check_version_header(headers)
        session, runtime = await self.session(headers, draft)
        if session.protocol_version != "2025-03-26":
            raise InvalidRequest(
                "Invalid request: batches exist only in protocol version 2025-03-26"
            )
        calls: list[Call] = []
        for message in messages:
            if isinstance(message, Response):
                self.answer(session, runtime, message)
            elif isinstance(message, Notification):
                if message.method == "notifications/initialized":
                    await self.era.initialized(session)
                elif message.method == "notifications/cancelled":
                    self.cancel(session, runtime, message)
            elif message.method == "initialize":
                refused = Call(runtime.open_stream())
                error = InvalidRequest("initialize must not be part of a batch")
                refused.final = encode_error(message.id, error.to_wire("legacy"))
                refused.stream.finish(refused.final)
                calls.append(refused)
            else:
                calls.append(self.start(session, runtime, message))
        answers = []
        for call in calls:
            await finished(call.stream)
            runtime.drop_stream(call.stream)
            if call.final is not None:  # a cancelled call has no answer
                answers.append(call.final)
        if not answers:
            await send_empty(send, 202)
            return
        await send_json(send, 200, b"[" + b",".join(answers) + b"]")

    # -- GET and DELETE --------------------------------------------------------------------

    async def get(
        self, receive: Receive, send: Send, headers: Headers, draft: Draft, *, sse_ok: bool
    ) -> None:
        """The standalone stream (unsolicited notifications), or the resumption of a stream."""
        if not sse_ok:
            raise InvalidRequest(
                "GET opens an SSE stream: accept text/event-stream", http_status=406
            )
        self.check_version_header(headers)
        session, runtime = await self.session(headers, draft)
        last_event_id = header_text(headers, b"last-event-id")
        wanted = elsewhere(runtime, last_event_id)
        copy = await self.mirror.open(session.id, *wanted) if wanted else None
        found = locate(runtime, last_event_id, copy, self.runtimes.events_per_stream)
        stream, after, follow = found.stream, found.after, found.follow
        if stream is None:
            # The standalone stream offers resource updates: it needs the subscriptions.
            await runtime.subscriptions.load(partial(self.era.store.subscriptions, session.id))
            stream = runtime.standalone_stream(
                self.hub, lambda: self.era.capabilities(session.protocol_version)
            )
            after = stream.last_seq
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
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if session.protocol_version >= PRIMING_SINCE:
                await send_body(send, priming_frame(f"{stream.id}_{after}", self.options.retry_ms))
            for event_id, data in found.missed:
                await send_body(send, event_frame(event_id, data))
            draft.stream_end = await pump(
                receive, send, stream, after, keepalive_s=self.options.keepalive_s
            )
        finally:
            if standalone:
                runtime.standalone_followers -= 1
            if feeder is not None:
                runtime.remote_followers -= 1
                feeder.cancel()

    async def delete(self, send: Send, headers: Headers, draft: Draft) -> None:
        session, _ = await self.session(headers, draft)
        await self.era.store.delete(session.id)
        self.session_ended(session.id)
        self.bus.publish("ended", {"sid": session.id})
        await send_empty(send, 200)

    def session_ended(self, session_id: str) -> None:
        """Release what a session held here: its runtime and its client's session slot."""
        self.runtimes.end(session_id)
        self.gate.session_ended(session_id)

    # -- what other replicas tell (state.relay.SessionEvents) ---------------------------------

    def remote_answer(self, session_id: str, response: Response) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            self.era.accept_response(runtime, response)

    def remote_cancel(self, session_id: str, params: dict[str, Any]) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            self.era.cancel(runtime, params)

    def remote_subscription(self, session_id: str, uri: str, subscribed: bool) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            runtime.subscriptions.apply(uri, subscribed)

    def subscriptions_missed(self) -> None:
        for session_id in self.runtimes.ids():
            if (runtime := self.runtimes.peek(session_id)) is not None:
                # Read again now where a GET stream follows them, else when one opens.
                read = partial(self.era.store.subscriptions, session_id)
                runtime.subscriptions.stale(read if runtime.standalone is not None else None)

    def end_connections(self) -> None:
        """Shutdown: end the GET streams (clients reconnect elsewhere); calls finish."""
        self.runtimes.end_standalone_connections("shutdown")
