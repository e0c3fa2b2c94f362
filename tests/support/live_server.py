"""A real uvicorn on 127.0.0.1 in a daemon thread, for the tests that must see a stream.

``ServerThread(app, **uvicorn_options)`` runs ``app`` under :func:`server.serving.server_for`
(the uvicorn that tells the app it is shutting down) on an ephemeral port; ``start`` waits
until it listens (and, with ``check_health``, until ``/healthz`` answers 200), ``stop`` asks it
to exit and waits for the thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from server.app import Application
from server.serving import Server, server_for


class ServerThread:
    def __init__(
        self,
        app: Application,
        *,
        graceful_timeout: int | None = None,
        check_health: bool = False,
        **overrides: Any,
    ) -> None:
        self.app = app
        self.check_health = check_health
        options: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 0,
            "log_config": None,
            "log_level": "warning",
        }
        if graceful_timeout is not None:
            options["timeout_graceful_shutdown"] = graceful_timeout
        options.update(overrides)
        self.server: Server = server_for(app, **options)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn exited during startup"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.005)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        if self.check_health:
            assert httpx.get(f"{self.url}/healthz").status_code == 200
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        assert not self.thread.is_alive(), "uvicorn did not stop"
