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

Some servers keep the signal away from the process that runs the app. hypercorn, run as
``hypercorn module:app`` (one worker process by default, or more with ``--workers``), hears
SIGTERM in its supervisor process, which sets a shutdown event it handed each worker; the
worker polls that event and no signal ever reaches it, so a wrapper there would wait for
nothing, and the lifespan shutdown comes only after the open connections have closed (or
hypercorn's graceful timeout has cut them). In such a worker (a ``multiprocessing`` child
whose SIGTERM has no Python handler, started with a ``shutdown_event`` keyword argument: how
hypercorn starts its workers) :class:`ExitSignals` polls that event instead, every
``EVENT_POLL_S``, and calls the app's callback once it is set. It is found through the
worker's own ``multiprocessing.Process`` object (its ``_kwargs``: CPython keeps them for the
child's ``run``); tests/e2e/test_any_server.py runs hypercorn both ways, and would fail on a
release that starts its workers otherwise.

Limits: signal handlers exist only in the main thread, so a server run in another thread has
to tell the app itself (:class:`server.serving.Server` does, and the app then installs
nothing); a server that installed its handlers after the lifespan startup would replace the
wrapper (none of the above does).
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
