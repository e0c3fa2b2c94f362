"""server.serving.stalled_clients: the listening sockets carry the send timeout to the kernel.

What it is for (a stalled stream's connection dropped, with default socket buffers, on either
HTTP protocol) is shown end to end in tests/transport/test_send_timeouts.py.
"""

from __future__ import annotations

import logging
import socket

import pytest

from server.app import create_app
from server.serving import stalled_clients
from server.serving.stalled_clients import drop_stalled_clients
from server.settings import Settings
from tests.support.live_server import ServerThread

needs_option = pytest.mark.skipif(
    not hasattr(socket, "TCP_USER_TIMEOUT"), reason="no TCP_USER_TIMEOUT on this platform"
)


@needs_option
@pytest.mark.parametrize("coalesce", [True, False], ids=["this-servers", "uvicorns"])
def test_the_server_sets_the_send_timeout_on_its_listener_and_connections_inherit_it(
    coalesce: bool,
) -> None:
    settings = Settings(
        _env_file=None, records=["none"], send_timeout_s=2.5, coalesce_writes=coalesce
    )
    running = ServerThread(create_app(settings)).start()
    try:
        [listener] = running.server.servers[0].sockets
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
    finally:
        running.stop()


@needs_option
def test_only_tcp_sockets_are_set() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as local,
    ):
        assert drop_stalled_clients([tcp, local], 0.0001) == 1
        assert tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 1  # at least 1 ms


def test_a_platform_without_the_option_is_told_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(stalled_clients, "_OPTION", None)
    with socket.socket() as tcp:
        assert drop_stalled_clients([tcp], 30.0) == 0
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    assert "TCP_USER_TIMEOUT" in warning.getMessage()
