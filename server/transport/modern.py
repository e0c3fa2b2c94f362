"""The 2026-07-28 era over HTTP: a request answered as JSON or SSE, and listen streams.

:meth:`ModernHttp.post` is the whole way of a modern message once the endpoint has read it: a
notification is accepted (202); a request is validated (what it names looked up once), its
per-item scopes checked while a 403 can still be sent, then answered or turned into a listen
stream. Cached list pages and ``server/discover`` are written as bytes at once
(docs/decisions.md#cached-answers). Other calls run inline as a
:class:`~server.dispatch.Handling`; one that waits gets its timer and disconnect watch then,
and becomes SSE when it sends something first or is silent for ``keepalive_s``. A closed
response stream cancels the handler. Listen streams live in the request's own task
(docs/decisions.md#listen-streams-in-request-task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from server.aio import coarse_timers, current_task
from server.asgi import Headers, Receive, Send
from server.catalog.tools import Tool
from server.context import Caller
from server.dispatch import target_name, target_scopes
from server.errors import InvalidRequest, wire_error
from server.hub import Closed, Hub, Stream
from server.jsonrpc import Message, Notification, Request, encode_error, encode_result
from server.modern.era import CACHED_METHODS, ModernCall, ModernEra
from server.modern.listen import WatchedFrames
from server.records.draft import Draft
from server.security.auth import ANONYMOUS, Principal
from server.security.gate import Gate
from server.security.limits import Slot
from server.security.quotas import Quotas
from server.transport.disconnect import DisconnectWatch, uncancel
from server.transport.response_writer import LazyWriter, ResponseWriter
from server.transport.send import END_OF_BODY, JSON_TYPE, send_empty, send_json, send_within
from server.transport.sse import KEEP_ALIVE, SSE_HEADERS, sse_frame


@dataclass(frozen=True, slots=True)
class OpenListen:
    """A listen stream attached to the hub, not yet answered."""

    stream: Stream
    ack_frame: bytes
    request_id: Any


@dataclass(frozen=True, slots=True)
class StreamOptions:
    keepalive_s: float
    send_timeout_s: float
    shutdown_grace_s: float


class ModernHttp:
    def __init__(self, modern: ModernEra, hub: Hub, gate: Gate, options: StreamOptions) -> None:
        self.modern = modern
        self.hub = hub
        self.gate = gate
        # MCP_QUOTAS, when set (server.security.quotas): no call pays for a check otherwise.
        self.quotas: Quotas | None = None
        self.options = options
        self.views = modern.dispatcher.views

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
        """One modern message, from validation to the last byte of its answer: a refusal
        raises from here, before anything is sent, and what it returns is the answer's own
        awaitable."""
        if isinstance(message, Notification):
            # 2026-07-28 defines no client notifications over HTTP: accepted, ignored.
            return send_empty(send, 202)
        if not isinstance(message, Request):  # the endpoint sends these to the legacy era
            raise InvalidRequest("Invalid request: batches and responses are legacy messages")
        views = self.views
        call = self.modern.validate(
            message, headers, views.view(principal) if views.hiding else None
        )
        # Who calls: tasks are bound to the subject, capped per client (a plain tool's call
        # runs as no task: its key is never asked).
        call.subject = draft.subject
        if not call.plain:
            call.key_of = partial(self.gate.key, draft)
        if call.target is not None and self.gate.authenticates:
            # Per-item scopes, before the call runs, while a 403 can still be sent (its
            # record names what it refused).
            draft.target = target_name(call.target)
            self.gate.require_item(principal, target_scopes(call.target))
        if message.method == "subscriptions/listen":
            # What the stream gets is all it needs: nothing of the request itself is kept.
            opened = self.open_listen(call, draft, sse_ok=sse_ok, caller=principal)
            return self.listen(draft.observe_receive(receive), send, *opened, draft)
        if message.method == "server/discover":
            draft.advertised = self.modern.advertised()
        caller = None if principal is ANONYMOUS else principal
        if self.quotas is not None and isinstance(call.target, Tool):
            # Counted (in Redis with replicas) before the call starts, while a 429 can be sent.
            draft.target = call.target.name
            charge = self.quotas.charge(principal.tenant, call.target.name, draft)
            answer = partial(self.answer, receive, send, call, draft, json_ok, sse_ok)
            return _after(charge, answer, caller, headers)
        return self.answer(receive, send, call, draft, json_ok, sse_ok, caller, headers)

    async def answer(
        self,
        receive: Receive,
        send: Send,
        call: ModernCall,
        draft: Draft,
        json_ok: bool,
        sse_ok: bool,
        caller: Caller | None = None,
        headers: Headers | None = None,
    ) -> None:
        if call.request.method in CACHED_METHODS:
            await self._answer_cached(send, call, draft, json_ok, sse_ok)
            return
        request_id = call.request.id
        # The response writer, made by the first message sent before the result (progress,
        # logs) or for an SSE answer. A plain tool sends nothing: none is made for it unless
        # it goes silent or the answer is SSE.
        lazy = None if call.plain else self._lazy_writer(send, json_ok, sse_ok)
        extra: list[tuple[bytes, bytes]] | None = None  # a refusal's Retry-After
        disconnect: DisconnectWatch | None = None
        try:
            try:
                handling = self.modern.start(
                    call, _sends_nothing if lazy is None else lazy.emit, caller, headers, draft
                )
                if handling.done:
                    result = handling.result  # answered without waiting: nothing to watch
                else:
                    # A call that lasts: its answer becomes a stream if it stays silent for
                    # keepalive_s, so that idle timeouts on the way do not cut it.
                    if lazy is None:
                        lazy = self._lazy_writer(send, json_ok, sse_ok)
                    watching = lazy

                    def watch_silence(task: asyncio.Task[Any]) -> None:
                        watching.opened().watch_silence(task, DisconnectWatch.WATCH_AFTER_S)

                    watched = draft.observe_receive(receive)  # tells the record the client left
                    with DisconnectWatch(watched, None, watch_silence) as disconnect:
                        result = await handling
                payload, status = encode_result(request_id, result), 200
            except Exception as error:
                writer = None if lazy is None else lazy.writer
                committed = writer is not None and writer.committed
                payload, status, extra = self._failed(call, error, committed, draft)
        except asyncio.CancelledError:
            if self._client_cancelled(None if lazy is None else lazy.writer, disconnect, draft):
                return
            raise
        draft.task = call.task  # what it did with a task, for its record
        if (lazy is None or lazy.writer is None) and (json_ok or status != 200):
            # Nothing streamed: plain JSON (send_json written out, a coroutine fewer).
            response_headers = [JSON_TYPE, (b"content-length", b"%d" % len(payload))]
            if extra:
                response_headers.extend(extra)
            await send(
                {"type": "http.response.start", "status": status, "headers": response_headers}
            )
            await send({"type": "http.response.body", "body": payload})
            return
        await self._streamed(send, lazy, payload, status, json_ok, sse_ok, draft, extra)

    def _lazy_writer(self, send: Send, json_ok: bool, sse_ok: bool) -> LazyWriter:
        options = self.options
        return LazyWriter(send, json_ok, sse_ok, options.keepalive_s, options.send_timeout_s)

    async def _answer_cached(
        self, send: Send, call: ModernCall, draft: Draft, json_ok: bool, sse_ok: bool
    ) -> None:
        """A list page or ``server/discover``: kept as bytes, answered at once (nothing to
        wait for, so no response writer and no handler coroutine), as one SSE event for a
        client that takes only SSE."""
        request_id = call.request.id
        try:
            cached = self.modern.cached_result(call)
        except Exception as error:  # a cursor this list never issued
            payload, status, extra = self._failed(call, error, False, draft)
        else:
            assert cached is not None  # a method of CACHED_METHODS
            payload, status, extra = encode_result(request_id, cached), 200, []
        if json_ok or status != 200:
            await send_json(send, status, payload, extra)
            return
        await self._streamed(send, None, payload, status, json_ok, sse_ok, draft)

    async def _streamed(
        self,
        send: Send,
        lazy: LazyWriter | None,
        payload: bytes,
        status: int,
        json_ok: bool,
        sse_ok: bool,
        draft: Draft,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """The answer's last part on its response writer (SSE, or padded JSON; plain JSON with
        ``extra`` headers for an error while nothing was sent yet)."""
        if lazy is None:
            lazy = self._lazy_writer(send, json_ok, sse_ok)
        final = lazy.opened()
        try:
            await final.finish(payload, status, extra)
        except TimeoutError:
            draft.stream_end = "send_timeout"  # the answer is lost with the connection
        finally:
            final.close()

    @staticmethod
    def _client_cancelled(
        writer: ResponseWriter | None, disconnect: DisconnectWatch | None, draft: Draft
    ) -> bool:
        """Whether a cancellation of the call is the client's doing: it closed the stream, or
        stopped reading (its connection is then reset). Nothing more is sent for it, and the
        request ends quietly; any other cancellation goes on up."""
        if writer is not None:
            writer.close()
        if disconnect is not None and disconnect.happened:
            uncancel()
            return True
        if writer is not None and writer.stalled:
            draft.stream_end = "send_timeout"
            if (task := current_task()) is not None and task.cancelling():
                uncancel()
            return True
        return False

    @staticmethod
    def _failed(
        call: ModernCall, error: Exception, committed: bool, draft: Draft
    ) -> tuple[bytes, int, list[tuple[bytes, bytes]]]:
        """A call's failure as its answer: the body, and the status and headers (Retry-After)
        unless the response is already a stream or padded JSON (then the error is its last
        event, or its body, on the 200 already sent)."""
        wire = wire_error(error, "modern", call.request.method)
        draft.error(wire.code, wire.message)
        payload = encode_error(call.request.id, wire.body)
        return (payload, 200, []) if committed else (payload, wire.status, wire.headers)

    def open_listen(
        self, call: ModernCall, draft: Draft, *, sse_ok: bool, caller: Principal | None = None
    ) -> tuple[OpenListen, Slot]:
        """Take the client's stream slot (429 past its cap), check a ``subscriptions/listen``
        request and attach the stream to the hub; raises McpError (answered by the endpoint)
        when it cannot be served. What it returns is all the stream needs, so the caller can
        let go of the request itself."""
        slot = self.gate.stream_slot(draft)
        try:
            if not sse_ok:
                raise InvalidRequest(
                    "subscriptions/listen needs Accept: text/event-stream", http_status=406
                )
            granted, ack = self.modern.listen(call)
            if caller is not None and self.gate.authenticates:
                # Updates of a resource the caller may not read: the step-up 403, as a read
                # gets (one it may not see is an unknown URI, as for resources/subscribe).
                resolve = self.modern.dispatcher.resolve
                for uri in granted.resource_uris:
                    found = resolve("resources/subscribe", {"uri": uri}, call.view)
                    self.gate.require_item(caller, target_scopes(found))
            request_id = call.request.id
            frames = self.modern.listen_frame(granted, request_id)
            if caller is not None and self.views.hiding:  # told only what changes its view
                frames = WatchedFrames(frames, self.views.watch(caller))
            stream = self.hub.attach(frames)
        except BaseException:
            slot.release()
            raise
        # orjson's output keeps a 4 KiB buffer: only the exact-size frame is kept.
        return OpenListen(stream, sse_frame(ack), request_id), slot

    async def listen(
        self, receive: Receive, send: Send, opened: OpenListen, slot: Slot, draft: Draft
    ) -> None:
        """The listen stream itself, in the request's own task: an idle stream waits on one
        future (its queue's), which a frame, the keep-alive timer or the disconnect watch's
        cancellation ends. No other task, coroutine or deadline stays with it."""
        stream, request_id, queue = opened.stream, opened.request_id, opened.stream.queue
        ack_frame = opened.ack_frame
        del opened  # the ack is sent once (below): not kept for the stream's life
        keepalive_s = self.options.keepalive_s
        timers = coarse_timers()
        try:
            await self.gate.settle(draft, slot)  # with Redis: the rate and the slot there too
            with DisconnectWatch(receive) as disconnect:
                try:
                    await send(
                        {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS}
                    )
                    await self._send_frame(send, ack_frame)
                    del ack_frame
                    while True:
                        if queue.empty():
                            keepalive = timers.call_later(keepalive_s, queue.wake)
                            try:
                                await queue.wait()
                            finally:
                                timers.cancel(keepalive)
                            if queue.empty():  # woken by the keep-alive timer
                                await self._send_frame(send, KEEP_ALIVE)
                                continue
                        item = queue.get_nowait()
                        if isinstance(item, Closed):
                            draft.stream_end = item.reason
                            if item.reason == "shutdown":
                                closing = self.modern.listen_closing(request_id)
                                await self._send_frame(send, sse_frame(closing))
                            break
                        await self._send_frame(send, sse_frame(item))
                    # The end is a send too: a client that stopped reading (a stream ended by
                    # overflow, say) must not hold it.
                    await send_within(send, END_OF_BODY, self.options.send_timeout_s)
                except asyncio.CancelledError:
                    if not disconnect.happened:
                        raise
                    uncancel()
                except TimeoutError:
                    # The client stopped reading: the stream ends unfinished, and the server's
                    # HTTP protocol aborts the connection (server/serving/uvicorn_protocol.py).
                    draft.stream_end = "send_timeout"
        finally:
            self.hub.detach(stream)
            slot.release()

    def _send_frame(self, send: Send, frame: bytes) -> Awaitable[None]:
        body = {"type": "http.response.body", "body": frame, "more_body": True}
        return send_within(send, body, self.options.send_timeout_s)


async def _after(
    charge: Awaitable[None],
    answer: Callable[..., Awaitable[None]],
    caller: Principal | None,
    headers: Headers,
) -> None:
    """A tool call's answer once its quotas are charged (a refusal raises before it starts)."""
    await charge
    await answer(caller, headers)


async def _sends_nothing(payload: bytes) -> None:
    """What a plain tool's call is given to send with: such a tool takes no Context, so it
    never sends (:attr:`~server.modern.era.ModernCall.plain`)."""
    raise AssertionError("a plain tool sent a message before its result")
