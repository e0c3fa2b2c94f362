"""server.serving.uvicorn_protocol: the same bytes on the wire as uvicorn's own protocol, in one
write per response where uvicorn takes two, header lines checked once, keep-alive without a timer
per response, and a tripwire for uvicorn's changes.

The protocol copies some of uvicorn's code, so it is used only on the uvicorn releases it was
verified against (``VERIFIED_UVICORN``); on any other this module is skipped, as the server
then runs on uvicorn's own protocol (tests/serving/test_serving.py checks that choice).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import inspect
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any

import pytest
import uvicorn

from server.serving import VERIFIED_UVICORN

if uvicorn.__version__ not in VERIFIED_UVICORN:
    pytest.skip(
        f"uvicorn {uvicorn.__version__}: the server runs on uvicorn's own protocol "
        f"(its own was verified on {', '.join(sorted(VERIFIED_UVICORN))})",
        allow_module_level=True,
    )

# Only now: these follow uvicorn internals that another release may have moved.
from uvicorn.protocols.http import httptools_impl
from uvicorn.server import ServerState

from server.app import create_app
from server.asgi import HEAD_BYTES
from server.serving import server_for, uvicorn_options
from server.serving.idle_sweep import IdleSweep, idle_sweep, reading_first
from server.serving.uvicorn_protocol import HEAD_TOO_LARGE, HttpProtocol
from server.settings import Settings
from tests.support.core_helpers import FakeTransport

# Real uvicorn servers on sockets, one per protocol: end to end, outside the inner loop.
pytestmark = pytest.mark.slow

App = Callable[[dict[str, Any], Any, Any], Any]


@contextmanager
def serving(app: App, protocol: Any, **options: Any) -> Iterator[int]:
    """``app`` under a real uvicorn on 127.0.0.1 with ``protocol``; yields the port."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=protocol,
        ws="none",
        lifespan="off",
        log_level="warning",
        log_config=None,
        interface="asgi3",
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn exited"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.005)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


def exchange(port: int, raw: bytes, *, until_closed: bool = False, wait: float = 0.2) -> bytes:
    """Send raw bytes, read what comes back (until the peer closes, or ``wait`` of silence)."""
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(raw)
        connection.settimeout(5 if until_closed else wait)
        received = b""
        try:
            while chunk := connection.recv(65536):
                received += chunk
        except TimeoutError:
            assert not until_closed, "the server did not close the connection"
        return received


def without_date(answer: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*\r\n", b"", answer)


async def json_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b'{"ok":true}'
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"Content-Type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"X-Custom", b"a value, with commas"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def listed_headers_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    headers = [[b"content-type", b"text/plain"], [b"content-length", b"2"]]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


async def streaming_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for part in (b"one", b"", b"two"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def closing_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    headers = [(b"content-length", b"2"), (b"connection", b"Keep-Alive, Close")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


async def empty_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def bad_header_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    headers = [(b"x-bad", b"one\ntwo"), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


HEADS_SEEN: list[int | None] = []


async def head_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    HEADS_SEEN.append(scope.get(HEAD_BYTES))
    await json_app(scope, receive, send)


VERSIONS_SEEN: list[str] = []


async def version_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    VERSIONS_SEEN.append(scope["http_version"])
    await echo_app(scope, receive, send)


async def holding_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An idle stream: a response begun, then nothing but waiting for the client to leave."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"open", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


APPS: dict[str, App] = {
    "/head": head_app,
    "/version": version_app,
    "/json": json_app,
    "/hold": holding_app,
    "/stream": streaming_app,
    "/close": closing_app,
    "/empty": empty_app,
    "/lists": listed_headers_app,
    "/echo": echo_app,
    "/bad": bad_header_app,
}


async def by_path(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await APPS[scope["path"]](scope, receive, send)


def request(
    method: str = "GET", path: str = "/json", *, version: str = "1.1", extra: str = ""
) -> bytes:
    return f"{method} {path} HTTP/{version}\r\nhost: t\r\n{extra}\r\n".encode()


def posting(body: bytes, extra: str = "") -> bytes:
    return request("POST", "/echo", extra=f"content-length: {len(body)}\r\n{extra}") + body


CHUNKED_BODY = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"


CASES = [
    ("json", request()),
    ("json, HEAD", request("HEAD")),
    ("json, HTTP/1.0", request(version="1.0")),
    ("json, pipelined", request() + request() + request()),
    ("json, client asks to close", request(extra="connection: close\r\n")),
    ("streamed (chunked)", request(path="/stream")),
    ("app closes", request(path="/close")),
    ("204", request(path="/empty")),
    ("headers as lists", request(path="/lists")),
    ("body", posting(b"hello")),
    ("body, 100-continue", posting(b"hello", "expect: 100-continue\r\n")),
    (
        "body, chunked",
        request("POST", "/echo", extra="transfer-encoding: chunked\r\n") + CHUNKED_BODY,
    ),
    ("body, pipelined", posting(b"one") + posting(b"two")),
    # uvicorn closes the connection without a word; so must this (nothing half-sent)
    ("invalid header from the app", request(path="/bad")),
]


@pytest.fixture(scope="module")
def ports() -> Iterator[dict[str, int]]:
    """uvicorn's own protocol and this one, each serving every app above."""
    with serving(by_path, "httptools") as uvicorns, serving(by_path, HttpProtocol) as ours:
        yield {"uvicorn": uvicorns, "this": ours}


@pytest.mark.parametrize(("name", "raw"), CASES, ids=[case[0] for case in CASES])
def test_the_wire_bytes_are_uvicorns_own(ports: dict[str, int], name: str, raw: bytes) -> None:
    uvicorns = without_date(exchange(ports["uvicorn"], raw))
    ours = without_date(exchange(ports["this"], raw))
    assert ours == uvicorns
    if name.startswith("invalid"):
        assert ours == b""
    else:
        assert ours.startswith(b"HTTP/1.1 ")


def test_a_body_arriving_in_pieces_is_read_whole() -> None:
    with (
        serving(echo_app, HttpProtocol) as port,
        socket.create_connection(("127.0.0.1", port)) as connection,
    ):
        raw = posting(b"x" * 100_000)
        for start in range(0, len(raw), 30_000):
            connection.sendall(raw[start : start + 30_000])
            time.sleep(0.02)  # the app is already waiting for the rest
        connection.settimeout(5)
        answer = b""
        while not answer.endswith(b"x" * 100):
            answer += connection.recv(200_000)
        assert answer.startswith(b"HTTP/1.1 200 OK")
        assert answer.count(b"x") == 100_000


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout() -> None:
    with (
        serving(json_app, HttpProtocol, timeout_keep_alive=1) as port,
        socket.create_connection(("127.0.0.1", port)) as connection,
    ):
        connection.sendall(request())
        assert connection.recv(65536).endswith(b'{"ok":true}')
        started = time.monotonic()
        connection.settimeout(5)
        assert connection.recv(10) == b""  # closed by the server
        waited = time.monotonic() - started
        # The timeout, and at most one sweep (0.5 s) later.
        assert 0.9 <= waited <= 1.0 + IdleSweep.SWEEP_S + 0.3


def test_a_connection_that_keeps_asking_is_not_closed() -> None:
    with (
        serving(json_app, HttpProtocol, timeout_keep_alive=1) as port,
        socket.create_connection(("127.0.0.1", port)) as connection,
    ):
        for _ in range(6):  # 1.8 s in all, never 1 s idle
            connection.sendall(request())
            assert connection.recv(65536).endswith(b'{"ok":true}')
            time.sleep(0.3)


def test_a_request_running_past_the_timeout_is_not_cut_off() -> None:
    async def slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await asyncio.sleep(1.6)
        await json_app(scope, receive, send)

    with serving(slow_app, HttpProtocol, timeout_keep_alive=1) as port:
        answer = exchange(port, request(), wait=3)
    assert answer.endswith(b'{"ok":true}')


def connection(protocol_class: Any) -> tuple[Any, FakeTransport]:
    """A protocol of ``protocol_class`` serving the test apps on a fake connection, in the
    running loop."""
    config = uvicorn.Config(by_path, http=protocol_class, lifespan="off", log_config=None)
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = FakeTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def loop_turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_a_response_goes_out_in_one_write_where_uvicorns_takes_two() -> None:
    async def writes_per_response(protocol_class: Any) -> list[int]:
        protocol, transport = connection(protocol_class)
        counts = []
        for _ in range(3):
            before = len(transport.writes)
            protocol.data_received(request())
            await loop_turns()
            counts.append(len(transport.writes) - before)
            assert transport.writes[-1].endswith(b'{"ok":true}')
        return counts

    assert asyncio.run(writes_per_response(HttpProtocol)) == [1, 1, 1]
    assert asyncio.run(writes_per_response(httptools_impl.HttpToolsProtocol)) == [2, 2, 2]


def test_a_requests_task_leaves_the_servers_set_as_it_ends() -> None:
    """The set uvicorn's shutdown and concurrency limit count: a request's task is in it while
    it runs and leaves it as it ends, answered, failed or cancelled."""

    async def main() -> None:
        for path in ("/json", "/bad", "/hold"):
            protocol, _ = connection(HttpProtocol)
            protocol.data_received(request(path=path))
            assert len(protocol.tasks) == 1
            (task,) = protocol.tasks
            await loop_turns(2)
            if path == "/hold":
                assert protocol.tasks == {task}  # still running
                task.cancel()
                await loop_turns(2)
            assert protocol.tasks == set()
            assert task.done()
            protocol.connection_lost(None)

    asyncio.run(main())


def version(version: str, body: bytes = b"", extra: str = "") -> bytes:
    length = f"content-length: {len(body)}\r\n{extra}"
    return request("POST", "/version", version=version, extra=length) + body


async def fed(protocol_class: Any, chunks: list[bytes], seen: list[Any]) -> list[Any]:
    """What the app saw (``seen``, emptied first) of ``chunks`` fed to a new connection."""
    seen.clear()
    protocol, _ = connection(protocol_class)
    for chunk in chunks:
        protocol.data_received(chunk)
        await loop_turns()
    return list(seen)


@pytest.mark.parametrize(
    "chunks",
    [
        [version("1.1"), version("1.0")],
        [version("1.0")],
        [version("1.1", b"abc") + version("1.0") + version("1.1")],  # pipelined, one chunk
        [version("1.1", b"abc")[:-2], version("1.1", b"abc")[-2:] + version("1.0")],
        [b"POST /version HT", version("1.0")[16:], version("1.1")],  # a line in pieces
        # a chunk fed mid-request: a line in the body is not the next request's
        [version("1.1", b"x HTTP/1.1\r\n")[:-12], b"x HTTP/1.1\r\n" + version("1.0")],
        [version("1.1")[:22], version("1.1")[22:] + version("1.0")],  # CRLF in the next
        [version("1.0")[:23], version("1.0")[23:]],  # CR and LF apart
        [b"\r\n" + version("1.0"), b"\n" + version("1.1")],  # line breaks llhttp skips
        [version("1.1"), b"\r\n", version("1.0")],
        [version("1.1", extra="connection: upgrade\r\nupgrade: other\r\n"), version("1.0")],
        [b"POST /version\r\n\r\n"],  # HTTP/0.9
    ],
)
def test_the_http_version_is_llhttps(chunks: list[bytes]) -> None:
    """The scope's HTTP version, read from the request line where that is sure (the request
    began a chunk fed between requests), is what llhttp says, as uvicorn's own protocol
    has it: pipelined, in pieces, after line breaks, after an upgrade."""

    ours = asyncio.run(fed(HttpProtocol, chunks, VERSIONS_SEEN))
    assert ours == asyncio.run(fed(httptools_impl.HttpToolsProtocol, chunks, VERSIONS_SEEN))
    assert ours


def test_the_app_is_told_a_bound_on_the_heads_size() -> None:
    # The endpoint skips counting the headers when the head was small: the bound must never
    # be below the head's real size, whether it came in one piece, in several, or pipelined.
    async def heads(chunks: list[bytes]) -> list[int | None]:
        return await fed(HttpProtocol, chunks, HEADS_SEEN)

    one = request(path="/head")
    assert asyncio.run(heads([one])) == [len(one)]
    big = request(path="/head", extra="x-big: " + "v" * 20_000 + "\r\n")
    pieces = [big[i : i + 1000] for i in range(0, len(big), 1000)]
    [seen] = asyncio.run(heads(pieces))
    assert seen is not None
    assert seen >= len(big)
    both = asyncio.run(heads([one + big]))
    assert len(both) == 2
    assert all(seen is not None and seen >= len(big) for seen in both[1:])
    assert both[0] is not None
    assert both[0] >= len(one)
    assert asyncio.run(heads([request(path="/head")])) != [None]


def test_a_connection_costs_what_uvicorns_costs() -> None:
    """What this protocol adds stays out of the instance dict: one key more than uvicorn's 28
    and CPython stops sharing the keys, 1.3 KiB more per open connection (listen streams)."""

    async def served(protocol_class: Any) -> Any:
        protocol, transport = connection(protocol_class)
        protocol.data_received(request())
        await loop_turns()
        assert transport.writes[-1].endswith(b'{"ok":true}')
        return protocol

    ours = asyncio.run(served(HttpProtocol))
    uvicorns = asyncio.run(served(httptools_impl.HttpToolsProtocol))
    assert set(vars(ours)) == set(vars(uvicorns))
    # Shared keys keep both small (their exact sizes depend on the class's history); an
    # unshared dict of these 28 keys is 1,584 bytes on CPython 3.11, over 5 times uvicorn's.
    assert sys.getsizeof(vars(ours)) < 2 * sys.getsizeof(vars(uvicorns))


def test_an_idle_stream_holds_no_deque() -> None:
    """uvicorn's two asyncio.Events (flow control, request cycle) and its pipeline deque each
    allocate a 760-byte block up front, 2.2 KiB of every open connection; an idle stream here
    holds none of them."""

    def deques(protocol: Any) -> list[deque[Any]]:
        held = {id(item): item for item in (protocol.pipeline, protocol.flow)}
        held[id(protocol.cycle.message_event)] = protocol.cycle.message_event
        for _ in range(2):  # their attributes, and what those hold
            held |= {
                id(inner): inner
                for outer in list(held.values())
                for inner in gc.get_referents(outer)
            }
        return [item for item in held.values() if isinstance(item, deque)]

    async def main() -> None:
        protocol, transport = connection(HttpProtocol)
        protocol.data_received(request(path="/hold"))
        await loop_turns()
        assert transport.writes[-1].endswith(b"open\r\n")  # the stream is open, and idle
        assert deques(protocol) == []
        uvicorns, _ = connection(httptools_impl.HttpToolsProtocol)
        uvicorns.data_received(request(path="/hold"))
        await loop_turns()
        assert len(deques(uvicorns)) >= 3  # the check finds them where they are
        for each in (protocol, uvicorns):
            each.connection_lost(None)
        await loop_turns()

    asyncio.run(main())


def test_only_idle_connections_are_swept_and_a_lost_one_is_forgotten() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        protocol, transport = connection(HttpProtocol)
        sweep = idle_sweep(loop)
        assert protocol not in sweep.idle  # open, never served: uvicorn arms no timer either
        protocol.data_received(request())
        await loop_turns()
        assert transport.writes[-1].endswith(b'{"ok":true}')
        assert protocol in sweep.idle  # between a response and the next request
        protocol.data_received(request())
        assert protocol not in sweep.idle  # busy again
        await loop_turns()
        assert protocol in sweep.idle
        protocol.connection_lost(ConnectionResetError())
        assert protocol not in sweep.idle  # gone without a clean close: forgotten all the same

    asyncio.run(main())


def test_the_server_runs_on_it_unless_turned_off() -> None:
    on = Settings(_env_file=None, records=["none"], coalesce_writes=True)
    default = server_for(create_app(on))
    assert default.config.http is HttpProtocol
    plain = create_app(Settings(_env_file=None, records=["none"], coalesce_writes=False))
    assert server_for(plain).config.http is reading_first()  # uvicorn's own, reading first


# What server/serving/uvicorn_protocol.py was checked against (uvicorn 0.54.0; the same in
# 0.55.0). A change here means uvicorn changed code this module copies or relies on: compare,
# adapt, then update.
UVICORN_CODE: dict[str, str | tuple[str, ...]] = {
    "HttpToolsProtocol.data_received": "010a7ae59a5d3b1a",
    "HttpToolsProtocol.on_body": "dba9c32aeba35b6a",
    "HttpToolsProtocol.on_message_complete": "1fbad42dc31fc01f",
    # 0.54.0 (a branch for Python 3.10 too), 0.55.0: the same on 3.11
    "HttpToolsProtocol._start_asgi_task": ("9c08c2571ae9b038", "8d0189e65525db42"),
    "HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "RequestResponseCycle.run_asgi": "0f33f2449a444bc2",
    "HttpToolsProtocol.on_headers_complete": "1ea8589acfad92d8",
    "HttpToolsProtocol.on_response_complete": "64e254f28e389e76",
    "HttpToolsProtocol._unset_keepalive_if_required": "00a6a4e47214e68e",
    "HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "HttpToolsProtocol.on_message_begin": "96d377fdc7c2baef",
    "RequestResponseCycle.receive": "8124ae006be71184",
    "RequestResponseCycle.__init__": "4d2f220910c33c12",
    "RequestResponseCycle.send": "abdd8601b326a8da",
}


def uvicorn_code_digest(qualified: str) -> str:
    owner, name = qualified.split(".")
    source = inspect.getsource(getattr(getattr(httptools_impl, owner), name))
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@pytest.mark.parametrize("qualified", sorted(UVICORN_CODE))
def test_uvicorn_code_this_module_follows_is_unchanged(qualified: str) -> None:
    known = UVICORN_CODE[qualified]
    assert uvicorn_code_digest(qualified) in (known if isinstance(known, tuple) else (known,)), (
        f"uvicorn {uvicorn.__version__} changed {qualified}: "
        "check server/serving/uvicorn_protocol.py"
    )


def _send_head(port: int, head_parts: Iterator[bytes]) -> tuple[bytes, int]:
    """Sends a request head piece by piece until the server stops reading; its answer and
    how many bytes went out."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            for part in head_parts:
                sock.sendall(part)
                sent += len(part)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer, sent


def test_a_request_head_past_the_cap_is_431_before_it_is_all_read() -> None:
    def big_header() -> Iterator[bytes]:
        yield b"GET /json HTTP/1.1\r\nHost: x\r\nX-Big: "
        for _ in range(8 * 1024):  # 8 MiB of one header, 1 KiB at a time
            yield b"v" * 1024
        yield b"\r\n\r\n"

    with serving(json_app, HttpProtocol, h11_max_incomplete_event_size=32 * 1024) as port:
        answer, sent = _send_head(port, big_header())
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert answer.endswith(HEAD_TOO_LARGE)
        assert b"connection: close" in answer
        assert sent < 8 * 1024 * 1024  # the server closed long before the end
        many_lines = (b"X-H: v\r\n" for _ in range(1_600_000))
        answer, _ = _send_head(port, chain([b"GET /json HTTP/1.1\r\nHost: x\r\n"], many_lines))
        assert answer.startswith(b"HTTP/1.1 431 ")
        # A head within the cap, on a keep-alive connection, twice: served.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            request = b"GET /json HTTP/1.1\r\nHost: x\r\nX-Fine: " + b"v" * 20000 + b"\r\n\r\n"
            sock.sendall(request + request)
            answer = b""
            while answer.count(b"HTTP/1.1 200 OK") < 2:
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk


def test_the_head_cap_follows_the_header_setting() -> None:
    options = uvicorn_options(Settings(_env_file=None, records=["none"], max_header_bytes=100_000))
    assert options["h11_max_incomplete_event_size"] == 100_000 + 16 * 1024
