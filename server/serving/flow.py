"""A connection's waiting, without ``asyncio.Event``: :class:`Signal`, and uvicorn's flow
control built on it.

uvicorn gives every connection two ``asyncio.Event`` (its flow control's, its request
cycle's), and an Event allocates a deque of 760 bytes when it is made, waited on or not. A
server holding thousands of idle ``subscriptions/listen`` streams holds as many connections, so
:mod:`server.serving.uvicorn_protocol` uses these instead (docs/decisions.md#idle-connections).
"""

from __future__ import annotations

import asyncio

from server.aio import running_loop


class Signal:
    """``asyncio.Event``'s ``set``, ``clear``, ``is_set`` and ``wait`` for one connection, without
    the deque an Event allocates up front (760 bytes): a wait is a future, not a coroutine, and
    the one waiter there usually is (the connection's task, or its disconnect watch) is held as
    it is, several in a list. A waiter given up on (cancelled) is dropped by the next wait or
    set."""

    __slots__ = ("_waiters", "flag")

    def __init__(self, flag: bool = False) -> None:
        # Whether it is set: is_set() and clear() are for callers that need no speed.
        self.flag = flag
        self._waiters: asyncio.Future[bool] | list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        if not self.flag:
            self.flag = True
            waiters = self._waiters
            if waiters is None:  # the usual: a request's body and end arrive before a wait
                return
            self._waiters = None
            for waiter in waiters if isinstance(waiters, list) else (waiters,):
                if not waiter.done():
                    waiter.set_result(True)

    def clear(self) -> None:
        self.flag = False

    def wait(self) -> asyncio.Future[bool]:
        waiter = running_loop().create_future()
        if self.flag:
            waiter.set_result(True)
            return waiter
        waiters = self._waiters
        if isinstance(waiters, list):
            waiters[:] = [other for other in waiters if not other.done()]
            waiters.append(waiter)
        elif waiters is None or waiters.done():
            self._waiters = waiter
        else:
            self._waiters = [waiters, waiter]
        return waiter


class FlowControl:
    """uvicorn's flow control (``uvicorn.protocols.http.flow_control``), its writable event a
    :class:`Signal`."""

    __slots__ = ("_is_writable", "_transport", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._is_writable = Signal(True)

    def drain(self) -> asyncio.Future[bool]:
        return self._is_writable.wait()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._is_writable.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            self._is_writable.set()
