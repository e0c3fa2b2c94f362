"""Helpers for the deployment tests: a real ``python -m server`` process, MCP messages, SSE.

The server runs as its own process (as in a container: configuration only through ``MCP_*``
variables) on a free 127.0.0.1 port; it is stopped by its PID, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support import mcp_client as mcp

ROOT = Path(__file__).resolve().parents[2]
MODERN = mcp.MODERN_VERSION
LEGACY = mcp.LEGACY_VERSION
META = mcp.modern_meta()
SUB_ID = mcp.SUB_ID
BOTH = mcp.BOTH


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def stop_process(
    process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace_s: float = 10
) -> None:
    """Ask a process this test started to stop (``sig``, to its PID only); SIGKILL after
    ``grace_s`` if it has not."""
    if process.poll() is not None:
        return
    os.kill(process.pid, sig)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class ServerProcess:
    """``python -m server`` with the given ``MCP_*`` variables (and no others from outside)."""

    def __init__(self, workdir: Path, **settings: str) -> None:
        self.workdir = workdir
        self.port = int(settings.get("MCP_PORT") or free_port())
        env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
        env.update(
            {
                "MCP_HOST": "127.0.0.1",
                "MCP_PORT": str(self.port),
                "MCP_CATALOG": "probe",
                "MCP_LOG_LEVEL": "warning",
                "PYTHONPATH": str(ROOT),
                **settings,
            }
        )
        self.env = env
        self.log_path = workdir / "server.log"
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10) -> ServerProcess:
        log = self.log_path.open("wb")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "server"],
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        # One client for every poll: httpx.get makes a client (and its TLS context, ~35 ms of
        # CPU) each time, which in a load test's process stalls the load (tests/chaos).
        try:
            with httpx.Client(timeout=1) as http:
                while True:
                    assert self.process.poll() is None, f"server exited: {self.log()}"
                    with contextlib.suppress(httpx.HTTPError):
                        if http.get(f"{self.url}/healthz").status_code == 200:
                            return self
                    assert time.monotonic() < deadline, f"server did not start: {self.log()}"
                    time.sleep(0.05)
        except BaseException:
            self.stop()  # a server that did not come up is not left running
            raise

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; only this process, by its PID."""
        if self.process is not None:
            stop_process(self.process)


@contextlib.contextmanager
def running(workdir: Path, **settings: str) -> Iterator[ServerProcess]:
    server = ServerProcess(workdir, **settings)
    try:
        yield server.start()
    finally:
        server.stop()


# -- messages ---------------------------------------------------------------------------------


def modern(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return mcp.modern(method, params, id)


def modern_call(name: str, arguments: dict[str, Any], id: Any, **meta: Any) -> dict[str, Any]:
    return mcp.modern("tools/call", {"name": name, "arguments": arguments}, id, **meta)


def listen(id: Any) -> dict[str, Any]:
    return modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, id)


def modern_headers(message: dict[str, Any], accept: str = BOTH) -> dict[str, str]:
    return mcp.modern_headers(message, accept)


def legacy_headers(session_id: str | None = None) -> dict[str, str]:
    """Before initialize: no version; after it, the session and the negotiated version."""
    return mcp.legacy_headers(session_id, LEGACY if session_id is not None else None)


def sse_get_headers(session_id: str) -> dict[str, str]:
    """A session's GET (its standalone stream, or a resume with Last-Event-ID added)."""
    return {**legacy_headers(session_id), "Accept": "text/event-stream"}


INITIALIZE = mcp.legacy(
    "initialize",
    {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "deploy-tests", "version": "1.0"},
    },
    id="init",
)
INITIALIZED = mcp.notification("notifications/initialized")


async def open_session(client: httpx.AsyncClient, path: str) -> str:
    """initialize + notifications/initialized; the session id."""
    answer = await client.post(path, json=INITIALIZE, headers=legacy_headers())
    assert answer.status_code == 200, answer.text
    session_id = answer.headers["mcp-session-id"]
    done = await client.post(path, json=INITIALIZED, headers=legacy_headers(session_id))
    assert done.status_code == 202, done.text
    return session_id


sse_messages = mcp.sse_messages


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
