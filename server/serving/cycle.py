"""One request and its response on :class:`~server.serving.uvicorn_protocol.HttpProtocol`:
uvicorn's ``RequestResponseCycle`` with a leaner ``send`` and ``run_asgi``.

The response head is built from :class:`~server.serving.header_lines.HeaderLines` (each header
line checked once); a body that has arrived is taken without waiting; a response the app
leaves unfinished while its client is not reading is reset rather than closed
(docs/decisions.md#own-http-protocol). What it copies of uvicorn is checked by
tests/serving/test_uvicorn_protocol.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from itertools import chain
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from server.serving.flow import Signal
from server.serving.header_lines import CHUNKED, CLOSE, LENGTH, PLAIN, HeaderLines

# SO_LINGER on, zero seconds: closing the socket resets the connection, dropping unsent bytes.
_RESET = struct.pack("ii", 1, 0)

_LINES = HeaderLines()
_new_signal = object.__new__


def _nothing() -> None:
    """A finished cycle's ``on_response`` (uvicorn sets a new lambda per request)."""


class Cycle(RequestResponseCycle):
    """One request and its response: uvicorn's ``send``, with the head built from
    :class:`~server.serving.header_lines.HeaderLines`, and its ``run_asgi``, aborting a stalled
    unfinished response."""

    # The request's task (HttpProtocol._start_asgi_task), which leaves the server's set of
    # tasks as run_asgi ends.
    task: asyncio.Task[None]

    def __init__(self, protocol: Any, scope: Any, keep_alive: bool) -> None:
        # uvicorn's __init__, its arguments read from the protocol here instead of passed by
        # keyword (eleven of them, on every request).
        self.scope = scope
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        # Signal() without its __init__ (a Python call from a class costs a frame and more on
        # 3.11): an unset signal with no waiter.
        event = _new_signal(Signal)
        event.flag = False
        event._waiters = None
        self.message_event = event  # type: ignore[assignment]
        self.on_response = protocol.on_response_complete
        self.tasks: set[asyncio.Task[None]] = protocol.tasks
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = protocol.expect_100_continue
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0

    async def receive(self) -> Any:
        # uvicorn's, but a body that has arrived already (most: one packet) is taken without
        # the coroutine of waiting on the event.
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            # FlowControl.resume_reading's check and Signal's flag in place: calls only to
            # resume and to wait, which a request whose body has arrived needs neither.
            if self.flow.read_paused:
                self.flow.resume_reading()
            event: Signal = self.message_event  # type: ignore[assignment]
            if not event.flag:
                await event.wait()
            event.flag = False
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": bytes(self.body), "more_body": self.more_body}
        self.body = bytearray()
        return message

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self._start(message["status"], message.get("headers", ()))
            return
        if self.response_complete:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already "
                "completed."
            )
        if message["type"] != "http.response.body":
            raise RuntimeError(
                f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
            )
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        data = body
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
            data = b""
        elif self.chunked_encoding:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
        if data:
            self.transport.write(data)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    async def run_asgi(self, app: Any) -> None:
        # uvicorn's, but a response the app leaves unfinished while the client is not reading
        # (its writes paused: the app gave up on a send timeout) is aborted. uvicorn closes
        # it, and a close waits until the unsent bytes are written: for a client that never
        # reads again, forever, with its megabytes held.
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self._end_unfinished()
        else:
            if result is not None:
                msg = "ASGI callable should return None, but returned '%s'."
                self.logger.error(msg, result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                if not self.flow.write_paused:
                    self.logger.error("ASGI callable returned without completing response.")
                self._end_unfinished()
        finally:
            self.on_response = _nothing
            self.tasks.discard(self.task)

    def _end_unfinished(self) -> None:
        """A response cut short: closed once what was written has gone out, or aborted at
        once if the client has stopped reading (the bytes would never go out)."""
        if self.flow.write_paused:
            self.disconnected = True  # nothing more is sent on it
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                # A reset, not a close: a closed socket keeps its unsent bytes in the kernel
                # (megabytes on loopback) and goes on offering them to the client.
                with contextlib.suppress(OSError):  # gone already: nothing to drop
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            self.transport.abort()
        else:
            self.transport.close()

    def _start(self, status: int, headers: Any) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status,
            )
        content = [STATUS_LINE[status]]
        has_connection_close = False
        # The server's own headers (the date) first, under the same rules, as uvicorn does.
        known, learn = _LINES.known, _LINES.line
        for pair in chain(self.default_headers, headers):
            try:
                found = known.get(pair)
            except TypeError:  # a two-item list (ASGI allows any iterable pair)
                found = None
            if found is not None:
                line, meaning, length = found
            elif pair[0] == b"x-request-id" and pair[1].isalnum():
                # HeaderLines' own answer for the one line new in every response, without its
                # two calls: letters and digits need no check, and it is never kept.
                line, meaning = b"x-request-id: " + pair[1] + b"\r\n", PLAIN
            else:
                line, meaning, length = learn(pair)
            if meaning == LENGTH:
                if self.chunked_encoding is None:
                    self.expected_content_length = length
                    self.chunked_encoding = False
            elif meaning == CHUNKED:
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif meaning == CLOSE:
                self.keep_alive = False
                has_connection_close = True
            content.append(line)
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))
