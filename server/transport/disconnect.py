"""Hearing that a client went away: a request's task cancelled (or told) when it does.

:class:`DisconnectWatch` watches a request's ``receive`` for ``http.disconnect``, without a
task of its own, and only once the request has lasted long enough to need it; :func:`uncancel`
swallows the cancellation it caused, where leaving is how a request simply ends (a stream).
Both eras use it: the modern era cancels the handler, as the 2026-07-28 spec requires; the
legacy era, where a disconnect is not a cancellation, is told instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from server.aio import TimerKey, coarse_timers, current_task, running_loop
from server.asgi import ASGIMessage, Receive

log = logging.getLogger(__name__)

# What a disconnect watch steps through: receive()'s coroutine, or another awaitable's iterator.
_Reading = Coroutine[Any, None, ASGIMessage] | Generator[Any, None, ASGIMessage]


class DisconnectWatch:
    """Cancel the current task if the client goes away (or, given ``on_disconnect``, call that
    instead: the legacy era, where a disconnect is not a cancellation); ``with`` gives the
    watch itself, whose ``happened`` says whether it did.

    The request's own task runs the handler, so a closed connection cancels the handler itself,
    as the 2026-07-28 spec requires. Watching starts only once the request has run for
    ``WATCH_AFTER_S``: a call that answers sooner (most do) never pays for it, and one that
    takes longer is watched for the rest of its life; ``on_watching`` (given the request's
    task) is called then, for whatever else only a request that lasts needs (the silence
    watch of :class:`~server.transport.response_writer.ResponseWriter`). A plain (not async)
    context manager: arming and disarming never wait, and this runs on every request that
    waits.

    The watch is no task of its own. It drives ``receive()`` the way a task would, one step
    each time the future it waits on is done: an idle listen stream (open for hours, thousands
    of them) would otherwise hold a task for nothing but this, about 600 bytes more each
    (``tests/bench/streams_bench.py``). What ``receive`` awaits must then be an asyncio future
    (a bare ``yield`` also works): an ASGI server's ``receive`` always is; past anything else,
    or an error, the watch stops watching, as a task's failure would have.
    """

    WATCH_AFTER_S = 0.02
    __slots__ = (
        "_ended",
        "_on_disconnect",
        "_on_watching",
        "_pending",
        "_reading",
        "_receive",
        "_task",
        "_timer",
        "_timers",
        "happened",
    )

    def __init__(
        self,
        receive: Receive,
        on_disconnect: Callable[[], object] | None = None,
        on_watching: Callable[[asyncio.Task[Any]], object] | None = None,
    ) -> None:
        self._receive = receive
        self._on_disconnect = on_disconnect
        self._on_watching = on_watching
        self.happened = False
        self._reading: _Reading | None = None
        self._pending: asyncio.Future[Any] | None = None
        self._timer: TimerKey | None = None
        self._ended = False

    def __enter__(self) -> DisconnectWatch:
        task = current_task()
        assert task is not None
        self._task = task
        self._timers = coarse_timers()
        self._timer = self._timers.call_later(self.WATCH_AFTER_S, self._start)
        return self

    def _start(self) -> None:
        self._timer = None
        if self._on_watching is not None:
            self._on_watching(self._task)
        self._read()

    def _read(self) -> None:
        reading = self._receive()
        # A coroutine (any server's receive) is stepped as it is; any other awaitable through
        # its iterator (one object more).
        self._reading = reading if isinstance(reading, Coroutine) else reading.__await__()
        self._step(None)

    def _read_next(self) -> None:
        if not self._ended:
            self._read()

    def _step(self, _done: object) -> None:
        """One step of ``receive()`` (what a task's step does), until it returns a message."""
        reading = self._reading
        if reading is None:  # ended while this step was on its way
            return
        self._pending = None
        try:
            waiting_on = reading.send(None)
        except StopIteration as finished:
            message = finished.value
            if message["type"] == "http.disconnect":
                self._reading = None
                self.happened = True
                (self._on_disconnect or self._task.cancel)()
            else:
                # More of the body: not what is watched for. Read on from the next loop turn
                # (a receive that answers at once must not recurse, nor hold the loop).
                self._reading = None
                running_loop().call_soon(self._read_next)
            return
        except asyncio.CancelledError:
            self._reading = None  # what it waited on was cancelled: nothing more to read
            return
        except Exception:
            log.exception("the disconnect watch stopped: receive() failed")
            self._reading = None
            return
        if getattr(waiting_on, "_asyncio_future_blocking", None):
            waiting_on._asyncio_future_blocking = False
            self._pending = waiting_on
            waiting_on.add_done_callback(self._step)
        elif waiting_on is None:  # a bare yield: the next loop turn
            running_loop().call_soon(self._step, None)
        else:
            log.error("the disconnect watch stopped: receive() awaits %r", waiting_on)
            self._stop()

    def _stop(self) -> None:
        reading, self._reading = self._reading, None
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.remove_done_callback(self._step)
            pending.cancel()  # as a task's cancellation would: nobody waits for it now
        if reading is not None:
            reading.close()

    def __exit__(self, *exc_info: object) -> None:
        self._ended = True
        if self._timer is not None:
            self._timers.cancel(self._timer)
        self._stop()


def uncancel() -> None:
    """Swallow the cancellation the disconnect watch caused (the request simply ends)."""
    task = asyncio.current_task(running_loop())
    if task is not None:
        task.uncancel()
