"""Keep-alive without a timer per response: one sweep per loop closes idle connections.

uvicorn arms a loop timer when a response ends and cancels it when the next request arrives.
Here a connection notes when it went idle, and :class:`IdleSweep` (one per event loop, a timer
every ``SWEEP_S`` while any connection is idle) closes those idle past their
``timeout_keep_alive``: one closes between that and half a second later
(docs/decisions.md#own-http-protocol).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from server.aio import PerLoop


class KeptAlive(Protocol):
    """A connection as the sweep sees it (the server's
    :class:`~server.serving.uvicorn_protocol.HttpProtocol`)."""

    @property
    def timeout_keep_alive(self) -> float: ...

    def timeout_keep_alive_handler(self) -> None: ...


class IdleSweep:
    """Closes one loop's keep-alive connections once idle past their timeout: a loop timer
    every ``SWEEP_S`` while any connection is idle, so a request costs no timer, and the
    sweep looks only at idle connections (not at every open one: a server holding 10,000
    listen streams would pay for them all twice a second)."""

    SWEEP_S = 0.5

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.idle: dict[KeptAlive, float] = {}  # connection -> when it went idle
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = self._loop.call_later(self.SWEEP_S, self.sweep)

    def sweep(self) -> None:
        self._timer = None
        now = self._loop.time()
        expired = [
            connection
            for connection, since in self.idle.items()
            if now - since >= connection.timeout_keep_alive
        ]
        for connection in expired:
            del self.idle[connection]
            connection.timeout_keep_alive_handler()
        if self.idle:
            self.arm()


idle_sweep: PerLoop[IdleSweep] = PerLoop(IdleSweep)
