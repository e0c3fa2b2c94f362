"""The HTTP/1.1 protocol this server runs on: uvicorn's httptools protocol, leaner per response.

Parsing, keep-alive, pipelining, flow control, upgrades and shutdown are uvicorn's own,
inherited. What differs is uvicorn's per-response work (docs/decisions.md#own-http-protocol),
and for safety a request head past a cap is refused with 431 while it arrives.

- **Writes are coalesced** (:mod:`server.serving.coalescing`): a connection's writes wait for
  the end of the loop's turn and go out as one, so a response costs one system call instead of
  two and the responses of one turn wake their clients together.
- **Header lines are checked once** per distinct (name, value), not on every response
  (:mod:`server.serving.header_lines`); the framing rules are uvicorn's. What repeats in a
  request is read once too: its URL (parsed once per distinct target) and the scope's keys
  that stay for the connection's life.
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

:class:`HttpProtocol` and its :class:`~server.serving.cycle.Cycle` copy a few of uvicorn's
methods with these changes; they follow uvicorn 0.54 (unchanged in 0.55), and
:func:`server.serving.http_protocol` uses them only on the releases in ``VERIFIED_UVICORN``
(uvicorn's own protocol on any other, so a newer uvicorn installs and serves, with a warning).
tests/serving/test_uvicorn_protocol.py fails when the uvicorn code they copy changes, and checks
the wire bytes against uvicorn's.
"""

from __future__ import annotations

import asyncio
import contextvars
import urllib.parse
from typing import Any

import httptools
from uvicorn.logging import TRACE_LOG_LEVEL
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
)
from uvicorn.protocols.utils import (
    get_local_addr,
    get_remote_addr,
    is_ssl,
)

from server.asgi import HEAD_BYTES
from server.memo import BoundedMemo
from server.serving.coalescing import CoalescingTransport, write_batch
from server.serving.cycle import Cycle
from server.serving.flow import FlowControl, Signal
from server.serving.idle_sweep import ShutdownReadsFirst, holds_request, idle_sweep

# A request head (request line and headers) larger than this is refused with 431 before it is
# all read, unless the server's configuration says otherwise (server.serving.uvicorn_options).
MAX_HEAD_BYTES = 80 * 1024
HEAD_TOO_LARGE = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Request header fields too large"}}'
)

_URLS: BoundedMemo[bytes, tuple[str, bytes, bytes]] = BoundedMemo(256)
# A request method as the scope has it, for the methods llhttp knows (bytes made per request).
_METHODS = {
    name: name.decode("ascii")
    for name in (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"TRACE")
}


class HttpProtocol(ShutdownReadsFirst, HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through the loop's :class:`WriteBatch`, with a
    :class:`Cycle` for every request."""

    # What this class adds lives in a slot, not in the instance dict: uvicorn's protocol sets
    # 28 attributes, and an instance dict of 30 keys no longer shares its keys with the
    # class's other instances, which costs every open connection (CPython 3.11;
    # docs/decisions.md#own-http-protocol).
    __slots__ = ("_chunk_bytes", "_head_bytes", "_max_head_bytes", "_scope_base", "_sweep")

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
        # uvicorn's own, written out (a call fewer per chunk), and the head count: keep in step.
        self._chunk_bytes = len(data)
        self._sweep.idle.pop(self, None)  # _unset_keepalive_if_required
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        if self._head_bytes >= 0:  # still in a head after this chunk: count all of it
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._refuse_head()
        if self.stopping and self.cycle is not None:  # the server stops: answer, then close
            self.cycle.keep_alive = False

    def on_message_begin(self) -> None:
        # uvicorn's own, but the scope's keys that stay for the connection's life copied from
        # one dict made when it opened (a display of nine keys per request otherwise).
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        scope = self._scope_base.copy()
        scope["asgi"] = {"version": self.asgi_version, "spec_version": "2.3"}
        scope["headers"] = self.headers
        scope["state"] = self.app_state.copy()
        self.scope = scope  # type: ignore[assignment]
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
        # uvicorn's scope but for what each request sets (on_message_begin), in its order.
        self._scope_base: dict[str, Any] = {
            "type": "http",
            "asgi": None,
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": None,
            "state": None,
        }
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

    def on_body(self, body: bytes) -> None:
        # uvicorn's own, but the cycle read once, and its signal set only when it is not set
        # already (a call fewer per request): keep in step.
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        event: Signal = cycle.message_event  # type: ignore[assignment]
        if not event.flag:
            event.set()

    def on_message_complete(self) -> None:
        # As on_body: keep in step with uvicorn's.
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.more_body = False
        event: Signal = cycle.message_event  # type: ignore[assignment]
        if not event.flag:
            event.set()

    def on_response_complete(self) -> None:
        # uvicorn's own, but for the keep-alive timeout: the connection notes when it went
        # idle, and the loop's IdleSweep closes it once that is too long ago, instead of a
        # loop timer armed and cancelled on every response.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.read_paused:  # FlowControl.resume_reading's check, in place
            flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            sweep = self._sweep
            sweep.idle[self] = self.loop.time()
            if sweep.timer is None:  # arm's check in place: the sweep is armed under load
                sweep.arm()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        # uvicorn's own, but the task leaves the server's set as its request ends
        # (Cycle.run_asgi), not through a done callback: a loop callback less per request
        # (docs/decisions.md#heads-and-tasks: why a task per request stays).
        if self.config.reset_contextvars:
            task = self.loop.create_task(cycle.run_asgi(app), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run_asgi(app))
        cycle.task = task
        self.tasks.add(task)

    def on_headers_complete(self) -> None:
        # uvicorn's own, but for the cycle class it builds (and the head count): keep in step.
        scope = self.scope
        counted = self._head_bytes
        scope[HEAD_BYTES] = (counted if counted > 0 else 0) + self._chunk_bytes  # type: ignore[literal-required]
        self._head_bytes = -1
        parser = self.parser
        http_version = parser.get_http_version()
        method = parser.get_method()
        scope["method"] = _METHODS.get(method) or method.decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        # A client asks for the same URL on every request: parsed once (_URLS, bounded).
        url = self.url
        known = _URLS.get(url)
        if known is None:
            known = _parse_url(url)
        path, raw_path, query = known
        if self.root_path:
            path = self.root_path + path
            raw_path = self.root_path.encode("ascii") + raw_path
        scope["path"] = path
        scope["raw_path"] = raw_path
        scope["query_string"] = query
        app = self.app
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency
            or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        existing_cycle = self.cycle
        self.cycle = Cycle(self, scope, http_version != "1.0" and parser.should_keep_alive())
        if existing_cycle is None or existing_cycle.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:
            # Pipelined requests wait their turn.
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))


def _parse_url(url: bytes) -> tuple[str, bytes, bytes]:
    """uvicorn's reading of a request target: (path, raw path, query string), remembered."""
    parsed_url = httptools.parse_url(url)
    raw_path = parsed_url.path
    path = raw_path.decode("ascii")
    if "%" in path:
        path = urllib.parse.unquote(path)
    return _URLS.remember(url, (path, raw_path, parsed_url.query or b""))


class _Pipeline(list[tuple[Cycle, Any]]):
    """Pipelined requests waiting their turn, with the two deque methods uvicorn uses."""

    __slots__ = ()

    def appendleft(self, item: tuple[Cycle, Any]) -> None:
        self.insert(0, item)
