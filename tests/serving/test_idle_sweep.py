"""A stalled server (SIGSTOP: a GC pause, a CPU-starved pod) never resets a kept-alive
connection whose next request arrived during the stall, nor does a stopping one (SIGTERM), on
either HTTP protocol (issue 35).

The process wakes with its keep-alive timer due and the request unread in the socket; closing
then resets the connection (a proxy answers a POST so cut with 502). Real server processes:
the stop and the poll it interrupts are the point.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.support.deploy_helpers import ServerProcess

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def _response(connection: socket.socket, limit_s: float) -> bytes:
    """One whole response (head and its content-length body); what came if the peer closed."""
    connection.settimeout(limit_s)
    data = b""
    while True:
        head, _, body = data.partition(b"\r\n\r\n")
        if _:
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            if len(body) >= length:
                return data
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk


def _assert_answered_then_closed(connection: socket.socket) -> None:
    """The request just written is answered 200 with Connection: close, then the connection
    closes cleanly (a reset is what nginx turns into a 502)."""
    try:
        answer = _response(connection, 5)
    except OSError as error:  # ConnectionResetError
        answer = type(error).__name__.encode()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b"connection: close" in answer.lower()
    assert connection.recv(1) == b""


def _wait_stopped(pid: int) -> None:
    """Until the stop has taken: a request written before would be seen by the poll the stop
    interrupts, and read first."""
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the server did not stop"
        time.sleep(0.005)


# Eight connections idle from about 1 s (the size that showed it) down to 0.1 s when the
# stall begins: which of the keep-alive timer and the read the waking loop runs first varies
# with where the stop caught it, and with the connection.
@pytest.mark.slow
@pytest.mark.parametrize("coalesce", ["true", "false"], ids=["own-protocol", "uvicorns"])
def test_requests_written_during_a_stall_are_answered_not_reset(
    tmp_path: Path, coalesce: str
) -> None:
    # Keep-alive timeout 5 s (uvicorn's default, the server's), the stall 6 s.
    server = ServerProcess(tmp_path, MCP_COALESCE_WRITES=coalesce).start()
    connections: list[socket.socket] = []
    try:
        for _ in range(8):
            connection = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            connections.append(connection)
            connection.sendall(REQUEST)
            assert _response(connection, 5).startswith(b"HTTP/1.1 200")
            time.sleep(0.13)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            _wait_stopped(server.pid)
            for connection in connections:
                connection.sendall(REQUEST)
            time.sleep(6)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        outcomes = []
        for connection in connections:
            try:
                answer = _response(connection, 10)
                outcomes.append("ok" if answer.startswith(b"HTTP/1.1 200") else repr(answer))
            except OSError as error:  # ConnectionResetError: what a proxy turns into a 502
                outcomes.append(type(error).__name__)
        assert outcomes == ["ok"] * 8
    finally:
        os.kill(server.pid, signal.SIGCONT)
        for connection in connections:
            connection.close()
        server.stop()


@pytest.mark.slow
def test_an_idle_connection_is_still_closed_after_the_stall(tmp_path: Path) -> None:
    # Reading first keeps only connections that hold a request: an idle one is closed as ever.
    server = ServerProcess(tmp_path).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
            connection.sendall(REQUEST)
            assert _response(connection, 5).startswith(b"HTTP/1.1 200")
            os.kill(server.pid, signal.SIGSTOP)
            try:
                _wait_stopped(server.pid)
                time.sleep(6)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            connection.settimeout(5)
            assert connection.recv(1) == b""  # closed cleanly (a FIN), not reset
    finally:
        server.stop()


def _wait_not_listening(port: int) -> None:
    deadline = time.monotonic() + 5
    while True:
        assert time.monotonic() < deadline, "the server still listens"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return
        time.sleep(0.005)


# The rolling restart's 502 (about one stop in eight): nginx wrote a POST on an idle kept-alive
# upstream connection as the stopping replica closed it. Now an idle connection stays open
# through its keep-alive at a stop (nginx's shorter keepalive_timeout closes it first), and a
# request written on it is served, with Connection: close; one that stays idle is closed.
@pytest.mark.slow
@pytest.mark.parametrize("coalesce", ["true", "false"], ids=["own-protocol", "uvicorns"])
def test_a_request_on_an_idle_connection_just_after_sigterm_is_answered_then_closed(
    tmp_path: Path, coalesce: str
) -> None:
    server = ServerProcess(tmp_path, MCP_COALESCE_WRITES=coalesce).start()
    try:
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as used,
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as idle,
        ):
            for connection in (used, idle):
                connection.sendall(REQUEST)
                assert _response(connection, 5).startswith(b"HTTP/1.1 200")
            time.sleep(0.3)  # both idle, kept alive
            server.terminate()
            _wait_not_listening(server.port)  # the stop has begun: connections shut down
            time.sleep(0.05)
            used.sendall(REQUEST)
            _assert_answered_then_closed(used)
            idle.settimeout(10)
            assert idle.recv(1) == b""  # within its keep-alive (5 s), cleanly
        assert server.process is not None
        assert server.process.wait(10) == 0  # and the server exits, its drain complete
    finally:
        server.stop()


def test_holds_request_sees_unread_bytes() -> None:
    import asyncio

    from server.serving.idle_sweep import holds_request

    async def main() -> None:
        seen: list[bool] = []
        arrived = asyncio.Event()

        class Peek(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                assert isinstance(transport, asyncio.Transport)
                self.transport = transport
                transport.pause_reading()  # the bytes stay in the socket, unread
                seen.append(holds_request(transport))
                asyncio.get_running_loop().call_later(0.2, self.check)

            def check(self) -> None:
                seen.append(holds_request(self.transport))
                self.transport.close()
                arrived.set()

        server = await asyncio.get_running_loop().create_server(Peek, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)
        writer.write(REQUEST)
        await asyncio.wait_for(arrived.wait(), 5)
        writer.close()
        server.close()
        assert seen == [False, True]  # nothing yet, then the request

    asyncio.run(main())


# The moment the rolling restart met (a POST answered 502 by nginx): the server's loop, busy
# when the stop begins, shuts every connection down before it reads a request that arrived
# meanwhile on an idle kept-alive one. Here the loop is held in one callback that waits for the
# request to be in the socket, then shuts the connections down as uvicorn's Server.shutdown does.
@pytest.mark.parametrize("coalesce", [True, False], ids=["own-protocol", "uvicorns"])
def test_a_request_written_as_the_shutdown_begins_is_answered_not_reset(coalesce: bool) -> None:
    from server.app import create_app
    from server.settings import Settings
    from tests.support.live_server import ServerThread

    app = create_app(Settings(_env_file=None, records=["none"], coalesce_writes=coalesce))
    thread = ServerThread(app).start()
    port = int(thread.url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(REQUEST)
            assert _response(connection, 5).startswith(b"HTTP/1.1 200")  # now idle, kept alive
            (protocol,) = thread.server.server_state.connections
            blocked, written = threading.Event(), threading.Event()

            def stopping() -> None:  # on the server's loop, which reads nothing meanwhile
                blocked.set()
                assert written.wait(5)
                time.sleep(0.2)  # the request is in the server's socket
                for each in list(thread.server.server_state.connections):
                    each.shutdown()

            protocol.loop.call_soon_threadsafe(stopping)
            assert blocked.wait(5)
            connection.sendall(REQUEST)
            written.set()
            _assert_answered_then_closed(connection)
    finally:
        thread.stop()
