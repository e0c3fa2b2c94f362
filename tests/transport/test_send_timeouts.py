"""A client that stops reading a stream loses it after the send timeout, and holds nothing.

Each test runs a real uvicorn on 127.0.0.1, once on the server's own HTTP protocol and once
on uvicorn's own (what a uvicorn release the protocol was not verified against runs), and a
raw socket that stops reading once the stream is open. Two shapes:

- a small receive buffer and megabytes to send (resource updates with long URIs): the kernel
  buffers and uvicorn's write buffer fill and the stream's sends block;
- default socket buffers and 2.7 MiB to send: the kernel takes all of it, so no send
  ever blocks, and only the kernel knows the client has stopped reading
  (server/serving/stalled_clients.py).

Either way, within ``MCP_SEND_TIMEOUT_S`` and a margin the stream must end, the connection
must be gone from the server (not kept to flush what is unsent: its socket is no longer in
``/proc/net/tcp``), and every slot the stream held (the client's stream slot, the hub stream,
the session's GET follower) must be free; a legacy session whose GET stream is stuck still
expires.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from server import Catalog, Context
from server.app import Application, create_app
from server.serving import http_protocol
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import (
    initialize,
    legacy,
    legacy_headers,
    modern,
    modern_headers,
    notification,
    tool_call,
)
from tests.support.polling import wait_until_blocking

# A real uvicorn and stalled sockets: outside the inner loop (pytest -m 'not slow').
pytestmark = pytest.mark.slow

LEGACY = "2025-11-25"
SEND_TIMEOUT_S = 0.5
# Past the send timeout: the first blocked send waits at most this long after the buffers
# fill (about a second of flooding at most), plus the test's own polling and a loaded machine.
MARGIN_S = 5.0
LONG = "x" * 2000  # a 2 KiB URI: a notification frame of about 2.1 KiB
UPDATES = 2500  # about 5 MiB of frames: more than a small receive window and the buffers hold
# About 2.7 MiB of frames (what the report found held): default socket buffers on loopback take
# all of it, so no send blocks.
HELD_UPDATES = 1300


chatty_cancelled = threading.Event()


def flood_catalog() -> Catalog:
    catalog = Catalog("send-timeout-test", "1.0.0")

    @catalog.tool
    async def flood(count: int) -> str:
        """Announces ``count`` updates of resources below test://docs/, a hundred at a time:
        a legacy stream keeps only its last events, so its writer must keep up."""
        for n in range(count):
            catalog.notify_resource_updated(f"test://docs/{n}/{LONG}")
            if n % 100 == 99:
                await asyncio.sleep(0.005)
        return "flooded"

    @catalog.tool
    async def chatty(ctx: Context, count: int, pause: float = 0.0) -> str:
        """Reports ``count`` steps of progress, each with a 2 KiB message, one per loop turn
        (writes are coalesced per turn: flow control acts between turns) or ``pause``
        seconds apart (a legacy stream keeps only its last events: its writer keeps up)."""
        try:
            for step in range(1, count + 1):
                await ctx.report_progress(step, count, LONG)
                await asyncio.sleep(pause)
        except asyncio.CancelledError:
            chatty_cancelled.set()
            raise
        return "done"

    @catalog.resource("test://docs")
    def docs() -> str:
        """Docs."""
        return "docs"

    return catalog


@pytest.fixture(params=[True, False], ids=["this-servers-protocol", "uvicorns-protocol"])
def live(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    settings = Settings(
        _env_file=None,
        send_timeout_s=SEND_TIMEOUT_S,
        keepalive_s=0.2,
        listen_queue_size=UPDATES + 10,  # the queue never overflows: the sends must time out
        session_idle_timeout_s=1.0,
        coalesce_writes=request.param,  # whatever the environment says
    )
    if request.param and http_protocol(settings) == "auto":
        pytest.skip(f"uvicorn {uvicorn.__version__}: this server's protocol does not run on it")
    running = ServerThread(create_app(settings, flood_catalog()), check_health=True)
    running.start()
    yield running
    running.stop()


def app_of(live: ServerThread) -> Application:
    app = live.app
    assert isinstance(app, Application)
    return app


def open_connections(live: ServerThread) -> int:
    return len(live.server.server_state.connections)


def port_of(live: ServerThread) -> int:
    return int(live.url.rsplit(":", 1)[1])


def stalled_socket(live: ServerThread, receive_buffer: int | None = 4096) -> socket.socket:
    """A connection to the server that will read little: a 4 KiB receive buffer (None: the
    system's default, which grows to megabytes)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port_of(live)))
    sock.settimeout(5)
    return sock


def server_end(live: ServerThread, sock: socket.socket) -> tuple[str, int] | None:
    """The server's end of ``sock``'s connection in ``/proc/net/tcp``: (its state, the bytes
    it holds unsent or unacknowledged), or None once the server's socket is gone."""
    local = f"0100007F:{port_of(live):04X}"
    remote = f"0100007F:{sock.getsockname()[1]:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2] == remote:
            return fields[3], int(fields[4].split(":")[0], 16)
    return None


def raw_request(method: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} /mcp HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """Read until ``marker`` has arrived (the stream is open and has sent its first event)."""
    seen = b""
    while marker not in seen:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed before {marker!r}: {seen[:300]!r}"
        seen += chunk
    return seen


def modern_call(name: str, arguments: dict[str, Any], **meta: Any) -> tuple[dict[str, str], bytes]:
    message = modern("tools/call", {"name": name, "arguments": arguments}, **meta)
    headers = modern_headers(message)
    return headers, json.dumps(message).encode()


def flood(live: ServerThread, count: int = UPDATES) -> None:
    headers, body = modern_call("flood", {"count": count})
    response = httpx.post(f"{live.url}/mcp", headers=headers, content=body, timeout=10)
    assert response.status_code == 200, response.text


def assert_dropped(live: ServerThread, sock: socket.socket, released: Callable[[], bool]) -> None:
    """The server lets the stalled connection go within the send timeout and a margin, while
    the client still reads nothing; the client then finds the connection ended, long before
    the megabytes the server had to send."""
    started = time.monotonic()
    wait_until_blocking(lambda: open_connections(live) == 0, SEND_TIMEOUT_S + MARGIN_S)
    wait_until_blocking(lambda: server_end(live, sock) is None, 1.0)
    wait_until_blocking(released, 1.0)
    assert time.monotonic() - started < SEND_TIMEOUT_S + MARGIN_S
    received = 0
    sock.settimeout(1)
    try:
        while chunk := sock.recv(65536):
            received += len(chunk)
    except ConnectionResetError:
        pass  # an aborted connection: what the server had not sent is gone
    except TimeoutError:
        pass  # dropped by the server's kernel (TCP_USER_TIMEOUT), which tells the peer nothing
    assert received < UPDATES * len(LONG) // 2, received


def test_a_modern_listen_stream_whose_client_stops_reading_is_dropped(
    live: ServerThread,
) -> None:
    app = app_of(live)
    message = modern(
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": ["test://docs/"]}},
        "listen",
    )
    headers = modern_headers(message, accept="text/event-stream")
    with stalled_socket(live) as sock:
        sock.sendall(raw_request("POST", headers, json.dumps(message).encode()))
        read_until(sock, b"\r\n\r\n")  # the head and the acknowledgement
        assert len(app.hub) >= 1
        assert len(app.gate.streams) == 1
        flood(live)  # from here on the client reads nothing
        assert_dropped(live, sock, lambda: len(app.gate.streams) == 0 and not app.hub._streams)


def test_a_modern_call_stream_whose_client_stops_reading_is_dropped_and_cancelled(
    live: ServerThread,
) -> None:
    app = app_of(live)
    chatty_cancelled.clear()
    headers, body = modern_call("chatty", {"count": UPDATES}, progressToken="p")
    with stalled_socket(live) as sock:
        sock.sendall(raw_request("POST", headers, body))
        read_until(sock, b"\r\n\r\n")  # the head: from here on the client reads nothing
        assert_dropped(live, sock, chatty_cancelled.is_set)
        assert len(app.gate.streams) == 0


def test_a_legacy_call_stream_whose_client_stops_reading_is_dropped_and_the_call_goes_on(
    live: ServerThread,
) -> None:
    app = app_of(live)
    session_id = open_legacy_session(live)
    runtime = app.runtimes.peek(session_id)
    assert runtime is not None
    message = tool_call("chatty", {"count": UPDATES, "pause": 0.0005}, token="p", id=7)
    headers = legacy_headers(session_id, LEGACY)
    chatty_cancelled.clear()
    with stalled_socket(live) as sock:
        sock.sendall(raw_request("POST", headers, json.dumps(message).encode()))
        read_until(sock, b"retry:")  # the priming event: from here on the client reads nothing
        # A disconnect is no cancellation in this era: the call finishes, resumable.
        assert_dropped(live, sock, lambda: not runtime.inflight)
    assert not chatty_cancelled.is_set()


def open_legacy_session(live: ServerThread) -> str:
    """A 2025-11-25 session subscribed to test://docs/..., through httpx."""
    opening = initialize(LEGACY, client_info={"name": "stalled", "version": "1"}, id=1)
    with httpx.Client(base_url=live.url, timeout=5) as http:
        response = http.post("/mcp", headers=legacy_headers(version=None), json=opening)
        assert response.status_code == 200, response.text
        session_id = response.headers["mcp-session-id"]
        headers = legacy_headers(session_id, LEGACY)
        initialized = notification("notifications/initialized")
        assert http.post("/mcp", headers=headers, json=initialized).status_code == 202
        # Every URI the flood announces is below it.
        subscribe = legacy("resources/subscribe", {"uri": "test://docs/"}, 2)
        answer = http.post("/mcp", headers=headers, json=subscribe)
        assert answer.status_code == 200, answer.text
    return session_id


def test_a_legacy_get_stream_whose_client_stops_reading_is_dropped_and_its_session_expires(
    live: ServerThread,
) -> None:
    app = app_of(live)
    session_id = open_legacy_session(live)
    headers = legacy_headers(session_id, LEGACY, "text/event-stream", Content_Type=None)
    with stalled_socket(live) as sock:
        sock.sendall(raw_request("GET", headers))
        read_until(sock, b"retry:")  # the priming event: the stream is followed
        runtime = app.runtimes.peek(session_id)
        assert runtime is not None
        assert runtime.standalone_followers == 1
        assert runtime.busy()
        flood(live)
        assert_dropped(
            live,
            sock,
            lambda: runtime.standalone_followers == 0 and len(app.gate.streams) == 0,
        )
        # Nothing keeps the session busy now: it expires after its idle timeout.
        wait_until_blocking(lambda: app.runtimes.peek(session_id) is None, 5.0)


def test_a_listen_stream_whose_client_stops_reading_is_dropped_with_default_buffers(
    live: ServerThread,
) -> None:
    """The kernel takes everything the stream sends, so no send ever waits: the connection is
    dropped all the same, and the megabytes it held unsent with it."""
    app = app_of(live)
    message = modern(
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": ["test://docs/"]}},
        "listen",
    )
    headers = modern_headers(message, accept="text/event-stream")
    with stalled_socket(live, receive_buffer=None) as sock:
        sock.sendall(raw_request("POST", headers, json.dumps(message).encode()))
        read_until(sock, b"\r\n\r\n")  # the head and the acknowledgement
        flood(live, HELD_UPDATES)  # from here on the client reads nothing
        held = server_end(live, sock)
        assert held is not None  # established, holding what it sent
        assert held[0] == "01"
        assert_dropped(live, sock, lambda: len(app.gate.streams) == 0 and not app.hub._streams)


def test_a_legacy_get_stream_whose_client_stops_reading_is_dropped_with_default_buffers(
    live: ServerThread,
) -> None:
    app = app_of(live)
    session_id = open_legacy_session(live)
    headers = legacy_headers(session_id, LEGACY, "text/event-stream", Content_Type=None)
    with stalled_socket(live, receive_buffer=None) as sock:
        sock.sendall(raw_request("GET", headers))
        read_until(sock, b"retry:")  # the priming event: the stream is followed
        runtime = app.runtimes.peek(session_id)
        assert runtime is not None
        flood(live, HELD_UPDATES)
        held = server_end(live, sock)
        assert held is not None
        assert held[0] == "01"
        assert_dropped(
            live,
            sock,
            lambda: runtime.standalone_followers == 0 and len(app.gate.streams) == 0,
        )
