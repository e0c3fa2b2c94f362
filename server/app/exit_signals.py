"""Hearing of SIGTERM or SIGINT before the server running the app acts on it.

A graceful server (uvicorn, gunicorn's uvicorn worker, hypercorn) waits for the open
connections to close before it runs the lifespan shutdown, and a listen or legacy ``GET``
stream never closes by itself: an app that heard of the exit only then would wait until the
SIGKILL, its records unflushed. :class:`ExitSignals` wraps the handler the server installed,
schedules the app's callback on the app's loop, then calls the server's own handler; in a
hypercorn worker, which no signal reaches, it polls the shutdown event hypercorn handed it.
Only the ``signal`` module's public API, only in the process and while the lifespan runs; a
server run in another thread tells the app itself (:class:`server.serving.Server`).
Why this shape, and its limits: docs/decisions.md#exit-signals.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How often a worker polls its supervisor's shutdown event (hypercorn's own poll: 0.1 s).
EVENT_POLL_S = 0.1


def supervisor_shutdown_event() -> Any:
    """The shutdown event (a ``multiprocessing`` Event) this process's supervisor handed it,
    if it is a worker started with one (``shutdown_event=``: hypercorn's workers); None
    elsewhere."""
    if multiprocessing.parent_process() is None:
        return None
    try:
        # Imported here: where the platform has no working sem_open (AWS Lambda) the import
        # fails, and there no supervisor can have handed over an Event either.
        from multiprocessing.synchronize import Event
    except ImportError:
        return None
    kwargs = getattr(multiprocessing.current_process(), "_kwargs", None)
    event = kwargs.get("shutdown_event") if isinstance(kwargs, dict) else None
    return event if isinstance(event, Event) else None


class ExitSignals:
    """Calls ``on_exit`` on the installing loop when SIGTERM or SIGINT arrives, before the
    handler that was there (the server's)."""

    def __init__(self, on_exit: Callable[[], object]) -> None:
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any]] = {}
        # One bound method, kept: each attribute access makes a new one, and uninstall must
        # recognise what it installed.
        self._handler = self._handle
        # A worker whose supervisor hears the signal: its shutdown event, and the next poll.
        self._event: Any = None  # a multiprocessing Event
        self._poll_timer: asyncio.TimerHandle | None = None

    def install(self) -> list[signal.Signals]:
        """Wrap the Python handler of each exit signal; from the running loop, in the main
        thread (elsewhere nothing happens). Returns the signals wrapped. In a worker whose
        supervisor hears SIGTERM instead (hypercorn's), poll the event it shares."""
        if threading.current_thread() is not threading.main_thread():
            return []
        self._loop = asyncio.get_running_loop()
        for sig in EXIT_SIGNALS:
            previous = signal.getsignal(sig)
            if callable(previous) and sig not in self._previous:
                self._previous[sig] = previous
                signal.signal(sig, self._handler)
        if signal.SIGTERM not in self._previous and self._event is None:
            self._event = supervisor_shutdown_event()
            if self._event is not None:
                log.debug("the supervisor's shutdown event is watched")
                self._poll()
        return [signal.Signals(sig) for sig in self._previous]

    @property
    def watching_supervisor(self) -> bool:
        """Whether a supervisor's shutdown event is polled (a hypercorn worker)."""
        return self._event is not None

    def _poll(self) -> None:
        self._poll_timer = None
        event, loop = self._event, self._loop
        if event is None or loop is None or loop.is_closed():
            return
        if event.is_set():
            self._event = None  # once
            self._on_exit()
            return
        self._poll_timer = loop.call_later(EVENT_POLL_S, self._poll)

    def uninstall(self) -> None:
        """Put the previous handlers back, where the wrapper is still the one installed."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, previous)
        self._previous.clear()
        if self._poll_timer is not None:
            self._poll_timer.cancel()
            self._poll_timer = None
        self._event = None
        self._loop = None

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of whatever the main thread was doing,
        # the loop's own code included: the callback is only scheduled, never run here.
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_exit)
        previous = self._previous.get(sig)
        if previous is not None:
            previous(sig, frame)
