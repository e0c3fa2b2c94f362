"""A real ``redis-server`` on a free loopback port, for the tests of shared state.

``RedisServer().start()`` runs Debian's ``redis-server`` (no persistence, its files in a
temporary directory) and waits for PONG; ``stop`` ends that process (by its PID, nothing
else) and ``start`` again brings it back on the same port, empty, which is how the fault tests
take Redis away mid-run; ``paused`` stalls it (SIGSTOP, then SIGCONT). Without
``redis-server`` on the machine the tests that need it are skipped, unless
``MCP_TESTS_REQUIRE_REDIS`` is set (CI sets it, so there they fail instead).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.support.deploy_helpers import free_port, stop_process


def fresh_prefix() -> str:
    """A key and channel prefix no other test uses (tests share one redis-server)."""
    return f"t{time.monotonic_ns()}"


def redis_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if found is None:
        if os.environ.get("MCP_TESTS_REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return found


class RedisServer:
    def __init__(self) -> None:
        self.binary = redis_binary()
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="mcp-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self.directory,
                "--logfile", os.path.join(self.directory, "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not self.ping():
            assert self.process.poll() is None, "redis-server exited at start"
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.01)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_process(process)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Redis stalled for the block (SIGSTOP of this process only: its sockets stay open
        and nothing answers), and going on afterwards (SIGCONT), whatever happens."""
        assert self.process is not None, "not running"
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Redis away for the block, and back (same port, empty) afterwards, whatever happens."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
