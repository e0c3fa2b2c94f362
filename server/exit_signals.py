"""Hearing of SIGTERM or SIGINT before the server running the app acts on it.

A server that exits gracefully on these signals (uvicorn, gunicorn's uvicorn worker,
hypercorn) stops accepting connections and then waits for the open ones to close before it
runs the lifespan shutdown. A ``subscriptions/listen`` stream or a legacy ``GET`` stream
never closes by itself, so an app that hears of the exit only from its lifespan shutdown
waits for ever, and the server with it, until the SIGKILL that follows; the request records
are never flushed. :class:`ExitSignals` lets the app hear first: it wraps the handler the
server installed, schedules the app's callback on the app's loop, then calls the server's
own handler, whose shutdown runs unchanged.

Why a wrapped handler rather than patching uvicorn's ``Server.handle_exit`` (sse-starlette's
way):

- only the ``signal`` module's public API: nothing breaks when a server reshapes its internals,
  and every server that handles the signals in Python is covered (uvicorn and gunicorn's
  worker install ``signal.signal`` handlers; asyncio's ``add_signal_handler``, which hypercorn
  uses, leaves a Python handler that a wrapper keeps, and wakes its loop through the wakeup
  fd, which a wrapper does not touch);
- it acts only in the process that runs this app's lifespan, and only while it runs, where a
  class-wide patch changes every uvicorn server in the process and outlives the app;
- nothing is wrapped where the server does not handle the signal (the default action, or
  ignored): a graceful exit the server does not do is not invented here, and a SIGTERM that
  would end the process still does.

Limits: signal handlers exist only in the main thread, so a server run in another thread has
to tell the app itself (:class:`server.serving.Server` does, and the app then installs
nothing); a server that installed its handlers after the lifespan startup would replace the
wrapper (none of the above does).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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

    def install(self) -> list[signal.Signals]:
        """Wrap the Python handler of each exit signal; from the running loop, in the main
        thread (elsewhere nothing happens). Returns the signals wrapped."""
        if threading.current_thread() is not threading.main_thread():
            return []
        self._loop = asyncio.get_running_loop()
        for sig in EXIT_SIGNALS:
            previous = signal.getsignal(sig)
            if callable(previous) and sig not in self._previous:
                self._previous[sig] = previous
                signal.signal(sig, self._handler)
        return [signal.Signals(sig) for sig in self._previous]

    def uninstall(self) -> None:
        """Put the previous handlers back, where the wrapper is still the one installed."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, previous)
        self._previous.clear()
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
