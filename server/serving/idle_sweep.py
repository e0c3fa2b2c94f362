"""Keep-alive without a timer per response: one sweep per loop closes idle connections; and no
keep-alive close of a connection whose next request has already arrived.

A connection notes when it went idle, and :class:`IdleSweep` (one per event loop, a timer every
``SWEEP_S`` while any connection is idle) closes those idle past their ``timeout_keep_alive``,
instead of uvicorn's timer armed and cancelled per response (docs/decisions.md#own-http-protocol).
A process stalled past the timeout (a GC pause, SIGSTOP) wakes with its timers due and a
client's request still unread in the socket; closing that socket would reset the connection
and a proxy does not retry a POST (502). So neither this sweep nor uvicorn's own keep-alive
timer (:func:`reading_first`) closes a connection with bytes waiting: the loop reads them next.
Nor does a shutdown close an idle connection at once (:class:`ShutdownReadsFirst`).
"""

from __future__ import annotations

import asyncio
import functools
import math
import struct
from typing import Any, Protocol

from server.aio import PerLoop


def holds_request(transport: asyncio.BaseTransport) -> bool:
    """Whether bytes the connection has not read yet wait in its socket (a request written
    while the process was stalled). One system call, made only on a keep-alive expiry."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        from fcntl import ioctl
        from termios import FIONREAD
    except ImportError:  # Windows: no such query; a close there may still reset such a connection
        return False
    try:
        waiting = ioctl(sock.fileno(), FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):  # closed meanwhile: nothing to keep
        return False
    return bool(struct.unpack("i", waiting)[0])


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
        self.timer: asyncio.TimerHandle | None = None  # the next sweep; None: not armed

    def arm(self) -> None:
        if self.timer is None:
            self.timer = self._loop.call_later(self.SWEEP_S, self.sweep)

    def sweep(self) -> None:
        self.timer = None
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


class ShutdownReadsFirst:
    """A protocol's ``shutdown`` (the server stopping) that closes no idle kept-alive
    connection at once. Closing it would race with a request a proxy writes on it meanwhile
    (reset: nginx answers a POST so cut with 502, never retrying it). So an idle connection
    stays open as long as its keep-alive would keep it (the proxy's shorter
    ``keepalive_timeout`` closes it first), a request that comes on it is served and answered
    with ``Connection: close``, and then it closes; one whose request waits unread is read
    first (docs/decisions.md#serving-process-choices). Mixed in before uvicorn's class."""

    __slots__ = ("stopping",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stopping = False  # its requests are answered with Connection: close

    def shutdown(self) -> None:
        protocol: Any = self
        self.stopping = True
        cycle = protocol.cycle
        if cycle is not None and not cycle.response_complete:
            super().shutdown()  # type: ignore[misc]  # in a request: closes after its answer
            return
        config = protocol.config
        grace = min(protocol.timeout_keep_alive, config.timeout_graceful_shutdown or math.inf)
        protocol.loop.call_later(grace, self._close_if_idle)

    def _close_if_idle(self) -> None:
        protocol: Any = self
        cycle = protocol.cycle
        if protocol.transport.is_closing() or (cycle is not None and not cycle.response_complete):
            return  # closed, or in a request: it ends with its answer (Connection: close)
        if not protocol.flow.read_paused and holds_request(protocol.transport):
            protocol.loop.call_soon(self._close_if_idle)  # read it first
            return
        super().shutdown()  # type: ignore[misc]


@functools.cache
def reading_first() -> type[Any]:
    """uvicorn's own HTTP protocol (the one its ``http="auto"`` picks: httptools, else h11),
    except that its keep-alive timer leaves a connection with a request waiting unread to be
    read (and re-arms, should it never be), instead of closing (resetting) it, and so does its
    shutdown (:class:`ShutdownReadsFirst`)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # no httptools: uvicorn's auto is h11
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]

    class ReadingFirst(ShutdownReadsFirst, base):
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.stopping and self.cycle is not None:
                self.cycle.keep_alive = False

        def timeout_keep_alive_handler(self) -> None:
            if holds_request(self.transport):
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )
                return
            super().timeout_keep_alive_handler()

    ReadingFirst.__qualname__ = ReadingFirst.__name__ = f"ReadingFirst{base.__name__}"
    return ReadingFirst
