"""The HTTP/1.1 protocol this server runs on: uvicorn's httptools protocol, leaner per response.

Parsing, keep-alive, pipelining, flow control, upgrades and shutdown are uvicorn's own,
inherited. What differs is uvicorn's per-response work (docs/decisions.md#own-http-protocol),
and for safety a request head past a cap is refused with 431 while it arrives.

- **Writes are coalesced** (:mod:`server.serving.coalescing`): a connection's writes wait for
  the end of the loop's turn and go out as one, so a response costs one system call instead of
  two and the responses of one turn wake their clients together.
- **Header lines are checked once** per distinct (name, value), not on every response
  (:mod:`server.serving.header_lines`); the framing rules are uvicorn's.
- **Keep-alive costs no timer per response**: one sweep per loop closes idle connections
  (:mod:`server.serving.idle_sweep`), never one whose next request waits unread (nor shutdown).
- **An idle connection holds no containers it does not use**
  (docs/decisions.md#idle-connections): a :class:`~server.serving.flow.Signal` and
  :class:`~server.serving.flow.FlowControl` instead of uvicorn's two ``asyncio.Event`` (each
  with a deque up front), and a list instead of its pipeline deque.

One thing differs in what it does: a response the app leaves unfinished while the client is
not reading (a stream that gave up on its send timeout) is **reset**: its unsent bytes are
dropped, those in the kernel's socket buffer too (``SO_LINGER`` 0). uvicorn's own protocol
closes it, and a close waits until the buffered bytes are written (megabytes, for a client that
never reads again: tests/transport/test_send_timeouts.py); there the kernel drops it at the
same bound (:mod:`server.serving.stalled_clients`).

:class:`HttpProtocol` and :class:`Cycle` copy a few of uvicorn's methods with these changes;
they follow uvicorn 0.54 (unchanged in 0.55), and :func:`server.serving.http_protocol` uses them
only on the releases in ``VERIFIED_UVICORN`` (uvicorn's own protocol on any other, so a newer
uvicorn installs and serves, with a warning). tests/serving/test_uvicorn_protocol.py fails when
the uvicorn code they copy changes, and checks the wire bytes against uvicorn's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import urllib.parse
from itertools import chain
from typing import Any

import httptools
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import (
    get_client_addr,
    get_local_addr,
    get_path_with_query_string,
    get_remote_addr,
    is_ssl,
)

from server.asgi import HEAD_BYTES
from server.serving.coalescing import CoalescingTransport, write_batch
from server.serving.flow import FlowControl, Signal
from server.serving.header_lines import CHUNKED, CLOSE, LENGTH, HeaderLines
from server.serving.idle_sweep import ShutdownReadsFirst, holds_request, idle_sweep

# SO_LINGER on, zero seconds: closing the socket resets the connection, dropping unsent bytes.
_RESET = struct.pack("ii", 1, 0)
# A request head (request line and headers) larger than this is refused with 431 before it is
# all read, unless the server's configuration says otherwise (server.serving.uvicorn_options).
MAX_HEAD_BYTES = 80 * 1024
HEAD_TOO_LARGE = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Request header fields too large"}}'
)

_LINES = HeaderLines()


class Cycle(RequestResponseCycle):
    """One request and its response: uvicorn's ``send``, with the head built from
    :class:`~server.serving.header_lines.HeaderLines`, and its ``run_asgi``, aborting a stalled
    unfinished response."""

    def __init__(self, protocol: HttpProtocol, scope: Any, keep_alive: bool) -> None:
        # uvicorn's __init__, its arguments read from the protocol here instead of passed by
        # keyword (eleven of them, on every request).
        self.scope = scope
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        self.message_event = Signal()  # type: ignore[assignment]
        self.on_response = protocol.on_response_complete
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
            self.flow.resume_reading()
            if not self.message_event.is_set():
                await self.message_event.wait()
            self.message_event.clear()
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
            self.on_response = lambda: None

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
        for pair in chain(self.default_headers, headers):
            line, meaning, length = _LINES.line(pair)
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


class HttpProtocol(ShutdownReadsFirst, HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through the loop's :class:`WriteBatch`, with a
    :class:`Cycle` for every request."""

    # What this class adds lives in a slot, not in the instance dict: uvicorn's protocol sets
    # 28 attributes, and an instance dict of 30 keys no longer shares its keys with the
    # class's other instances, which costs every open connection (CPython 3.11;
    # docs/decisions.md#own-http-protocol).
    __slots__ = ("_chunk_bytes", "_head_bytes", "_max_head_bytes", "_sweep")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The loop's sweep; this connection is in its ``idle`` only between a response and
        # the next request.
        self._sweep = idle_sweep(self.loop)
        # Bytes received while a request head is being read (-1 between heads): httptools
        # would hold a header of any size until it ends, so past the cap (uvicorn's option
        # for the same limit under h11, set from MCP_MAX_HEADER_BYTES) the connection is
        # answered 431 and closed. The app checks what arrives under it (count, each value).
        self._head_bytes = -1
        self._max_head_bytes: int = self.config.h11_max_incomplete_event_size or MAX_HEAD_BYTES
        # The chunk being parsed: a head that ends in it took at most the bytes counted
        # before it and this chunk (told to the app as the scope's HEAD_BYTES).
        self._chunk_bytes = 0
        # uvicorn's deque for pipelined requests, as a list (appendleft: insert at 0; pop: the
        # last): an empty list holds no items array, a deque a 760-byte block.
        self.pipeline = _Pipeline()  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._chunk_bytes = len(data)
        super().data_received(data)
        if self._head_bytes >= 0:  # still in a head after this chunk: count all of it
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._refuse_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0

    def _refuse_head(self) -> None:
        self._head_bytes = -1
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # not in another's response
            content = [STATUS_LINE[431]]
            for name, value in self.server_state.default_headers:
                content.extend([name, b": ", value, b"\r\n"])
            content.extend(
                [
                    b"content-type: application/json\r\n",
                    b"content-length: %d\r\n" % len(HEAD_TOO_LARGE),
                    b"connection: close\r\n\r\n",
                    HEAD_TOO_LARGE,
                ]
            )
            self.transport.write(b"".join(content))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # uvicorn's own, but for the transport (writes coalesced) and the flow control (a
        # Signal instead of an asyncio.Event): keep in step.
        transport = CoalescingTransport(transport, write_batch(self.loop))
        self.connections.add(self)
        self.transport = transport
        self.flow = FlowControl(transport)  # type: ignore[assignment]
        self.server = get_local_addr(transport)
        self.client = get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        if self.logger.level <= TRACE_LOG_LEVEL:
            prefix = f"{self.client[0]}:{self.client[1]} - " if self.client else ""
            self.logger.log(TRACE_LOG_LEVEL, "%sHTTP connection made", prefix)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._sweep.idle.pop(self, None)  # uvicorn forgets its timer only on a clean close

    def _unset_keepalive_if_required(self) -> None:
        self._sweep.idle.pop(self, None)

    def timeout_keep_alive_handler(self) -> None:
        if holds_request(self.transport):  # read next, not reset (server.serving.idle_sweep)
            self._sweep.idle[self] = self.loop.time()
            self._sweep.arm()
        else:
            super().timeout_keep_alive_handler()

    def on_response_complete(self) -> None:
        # uvicorn's own, but for the keep-alive timeout: the connection notes when it went
        # idle, and the loop's IdleSweep closes it once that is too long ago, instead of a
        # loop timer armed and cancelled on every response.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._sweep.idle[self] = self.loop.time()
            self._sweep.arm()

    def on_headers_complete(self) -> None:
        # uvicorn's own, but for the cycle class it builds (and the head count): keep in step.
        self.scope[HEAD_BYTES] = max(self._head_bytes, 0) + self._chunk_bytes  # type: ignore[literal-required]
        self._head_bytes = -1
        http_version = self.parser.get_http_version()
        method = self.parser.get_method()
        self.scope["method"] = method.decode("ascii")
        if http_version != "1.1":
            self.scope["http_version"] = http_version
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        self.scope["path"] = self.root_path + path
        self.scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        self.scope["query_string"] = parsed_url.query or b""
        app = self.app
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency
            or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        existing_cycle = self.cycle
        self.cycle = Cycle(
            self,
            self.scope,
            http_version != "1.0" and self.parser.should_keep_alive(),
        )
        if existing_cycle is None or existing_cycle.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:
            # Pipelined requests wait their turn.
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))


class _Pipeline(list[tuple[Cycle, Any]]):
    """Pipelined requests waiting their turn, with the two deque methods uvicorn uses."""

    __slots__ = ()

    def appendleft(self, item: tuple[Cycle, Any]) -> None:
        self.insert(0, item)
