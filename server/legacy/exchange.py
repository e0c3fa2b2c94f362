"""Server-to-client messages of one legacy call: :class:`LegacyExchange`.

Asking the client (sampling, elicitation, roots) is a real server-to-client JSON-RPC request on
the call's own stream (its :class:`Outbox`), answered by a later POST that
:meth:`server.legacy.era.LegacyEra.accept_response` matches by id to the waiting handler. A
timeout, an error answer and the session ending all release the waiter. Notifications
(progress, log messages) go out on the same stream.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from server.aio import Deadline, running_loop
from server.context import InputRequest
from server.errors import ToolError
from server.jsonrpc import encode_notification, encode_request
from server.legacy.runtime import SessionRuntime


class ClientRequestFailed(ToolError):
    """The client answered a question with an error, or not in time; the tool fails with it."""


class Outbox(Protocol):
    """Where one call's messages go: its :class:`~server.legacy.eventstream.EventStream`, or the
    HTTP answer that opens one on first use
    (:class:`~server.transport.legacy_answer.Answer`)."""

    @property
    def finished(self) -> bool: ...

    def publish(self, payload: bytes) -> object: ...

    def end_connections(self, reason: str = "server_closed") -> None: ...


class LegacyExchange:
    """Server-to-client requests and notifications on one call's stream."""

    def __init__(
        self, runtime: SessionRuntime, stream: Outbox, timeout_s: float, *, resumable: bool
    ) -> None:
        self._runtime = runtime
        self._stream = stream
        self._timeout_s = timeout_s
        self._resumable = resumable

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        if not self._stream.finished:
            self._stream.publish(encode_notification(method, params))

    def close_stream(self) -> None:
        """End the HTTP connection carrying this call; the client resumes with Last-Event-ID.

        Only where the client got a priming event id to resume from (2025-11-25 and later);
        for older clients closing the connection would lose the result, so it stays open."""
        if self._resumable:
            self._stream.end_connections()

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        loop = running_loop()
        waiting: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        try:
            for key, request in requests.items():
                request_id = self._runtime.next_request_id()
                future: asyncio.Future[dict[str, Any]] = loop.create_future()
                self._runtime.pending[request_id] = future
                waiting[key] = (request_id, future)
                self._stream.publish(encode_request(request_id, request.method, request.params()))
            try:
                async with Deadline(self._timeout_s):
                    await asyncio.gather(*(future for _, future in waiting.values()))
            except TimeoutError:
                raise ClientRequestFailed(
                    f"The client did not answer within {self._timeout_s:g} s"
                ) from None
            answers: dict[str, Any] = {}
            for key, (_, future) in waiting.items():
                response = future.result()
                if "error" in response:
                    error = response["error"]
                    raise ClientRequestFailed(
                        f"The client refused {requests[key].method}: {error.get('message', error)}"
                    )
                try:
                    answers[key] = requests[key].parse(response.get("result"))
                except ValueError as malformed:
                    raise ClientRequestFailed(
                        f"The client's answer to {requests[key].method} is malformed: {malformed}"
                    ) from None
            return answers
        finally:
            for request_id, future in waiting.values():
                self._runtime.pending.pop(request_id, None)
                if not future.done():
                    future.cancel()
