"""Start and stop: the lifespan that makes the app whole, and the graceful shutdown.

The lifespan starts the records, change notifications, session expiry and the catalog's own
lifespan, so the app never serves without it (the router answers 503 until it runs). Any ASGI
server runs it; a host app that mounts this one passes :meth:`Lifecycle.lifespan` as its own
(``FastAPI(lifespan=mcp.lifespan)``). On SIGTERM it hears of the exit before the server's
graceful wait (:mod:`server.app.exit_signals`), unless the server tells the app itself.
:class:`Lifecycle` is owned by the :class:`~server.app.application.Application`, which
forwards ``lifespan``, ``begin_shutdown``, ``ready`` and ``started``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from server.app.exit_signals import ExitSignals
from server.catalog import Catalog, Change
from server.dispatch import Dispatcher
from server.errors import ServiceUnavailable
from server.hub import Hub
from server.legacy.runtime import Runtimes
from server.records.recorder import Recorder
from server.settings import Settings
from server.state import SharedState
from server.state.relay import BusRelay
from server.tasks.service import TaskService
from server.transport.legacy import LegacyHttp
from server.transport.legacy_sse import SseTransport

log = logging.getLogger(__name__)

# What the calls the drain deadline ends are told (-32000: the same request may succeed later,
# on another replica or once this one is back; not -32603, nothing went wrong with the call).
SHUTTING_DOWN = "Server shutting down"


class Lifecycle:
    """The lifespan, session expiry and the drain, over the parts the application built."""

    def __init__(
        self,
        settings: Settings,
        *,
        catalog: Catalog,
        hub: Hub,
        dispatcher: Dispatcher,
        shared: SharedState,
        runtimes: Runtimes,
        tasks: TaskService,
        legacy: LegacyHttp,
        sse: SseTransport | None,
        relay: BusRelay,
        recorder: Recorder,
        live_tail: Any,
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.hub = hub
        self.dispatcher = dispatcher
        self.shared = shared
        self.runtimes = runtimes
        self.tasks = tasks
        self.legacy = legacy
        self.sse = sse
        self.relay = relay
        self.recorder = recorder
        self.live_tail = live_tail
        self.ready = False
        self.started = False
        # The server running the app calls begin_shutdown itself before its graceful wait
        # (server.serving's Server sets this); otherwise the lifespan wraps the exit signals.
        self.server_tells_shutdown = False
        self.exit_signals = ExitSignals(self.begin_shutdown)
        # Armed by begin_shutdown: when it fires, the calls still running are ended.
        self._drain_deadline: asyncio.TimerHandle | None = None
        # Started by begin_shutdown: running tasks finish, or are failed, within the drain.
        self._tasks_drained: asyncio.Future[None] | None = None
        self._sse_drained: asyncio.Future[Any] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """Start and stop: what a host app that mounts this one passes as its own lifespan
        (``FastAPI(lifespan=mcp.lifespan)``); ``app`` (the host) is not used."""
        if self.started:
            raise RuntimeError("this MCP app's lifespan is already running")
        loop = asyncio.get_running_loop()

        def publish(change: Change) -> None:
            # Sync handlers run in worker threads and may change the catalog from there; the
            # hub's queues and events belong to the loop, so hand the change over safely.
            try:
                on_loop = asyncio.get_running_loop() is loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                self._changed(change)
            else:
                loop.call_soon_threadsafe(self._changed, change)

        async with self.catalog.lifespan.serving():
            unsubscribe = self.catalog.subscribe(publish)
            self.recorder.start()
            if self.live_tail is not None:
                self.live_tail.start()
            self.shared.start(self.relay.deliver)
            expiry = asyncio.create_task(self.expire_sessions())
            if not self.server_tells_shutdown:
                wrapped = self.exit_signals.install()
                log.debug("exit signals heard first: %s", [sig.name for sig in wrapped])
            # (Again, after a drain: an app may be started twice.)
            self.tasks.closing = self.legacy.stopping = False
            self.ready = self.started = True
            try:
                yield
            finally:
                self.exit_signals.uninstall()
                self.begin_shutdown()
                if self._tasks_drained is not None:
                    await self._tasks_drained
                if self._sse_drained is not None:
                    # HTTP+SSE calls outlive their POST: their answers go out before the end.
                    await asyncio.wait({self._sse_drained}, timeout=self.settings.drain_timeout_s)
                expiry.cancel()
                self.runtimes.end_all()
                unsubscribe()
                await self.shared.close()
                # Every request has finished by now (the server waited): write their records.
                await asyncio.to_thread(self.recorder.close)
                if self.live_tail is not None:
                    await asyncio.to_thread(self.live_tail.close)
                if self._drain_deadline is not None:
                    self._drain_deadline.cancel()
                    self._drain_deadline = None  # a later start drains afresh
                self._tasks_drained = None
                self._sse_drained = None
                if self.sse is not None:
                    self.sse.draining = False  # (an app may be started twice)
                self.started = False

    async def expire_sessions(self) -> None:
        """End idle legacy sessions, and everything they hold in this process."""
        interval = min(30.0, max(0.5, self.settings.session_idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.shared.store.expire()  # ended ones release their runtime
            except ServiceUnavailable:
                pass  # Redis is away: the link logs it once; the next sweep retries
            except Exception:
                log.exception("expiring sessions failed")

    def _changed(self, change: Change) -> None:
        """A change of this process's catalog: its own streams, then the other replicas."""
        self.hub.publish(change)
        self.relay.announce_change(change)

    def begin_shutdown(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking long-lived work: end every listen stream with its graceful result, and
        give the calls in flight ``drain_timeout_s`` (``MCP_DRAIN_TIMEOUT_S`` by default) to
        finish; past that they are ended (:meth:`end_calls`).

        It must run (on the app's loop) as soon as the shutdown begins, before the server waits
        for the open connections, which a listen stream never closes by itself: the
        lifespan's shutdown comes only after that wait. :mod:`server.serving` calls it; under
        any other server the lifespan hears SIGTERM and SIGINT first and calls it
        (:mod:`server.app.exit_signals`); a host that stops its server some other way (from another
        thread, say) calls it itself. Calling it again changes nothing."""
        self.ready = False
        self.hub.close_all("shutdown")
        if self.sse is not None:
            # HTTP+SSE streams carry their calls' answers: each closes once they are out.
            if self._sse_drained is None:
                self._sse_drained = asyncio.ensure_future(self.sse.drain())
            self.legacy.end_connections(keep=self.sse.held)
        else:
            self.legacy.end_connections()
        if self._drain_deadline is None:
            delay = self.settings.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
            self._drain_deadline = asyncio.get_running_loop().call_later(delay, self.end_calls)
            # Running tasks get the drain time to finish alongside the calls in flight (a
            # second is kept to write the rest failed, for the other replicas to report).
            self._tasks_drained = asyncio.ensure_future(self.tasks.drain(max(0.0, delay - 1.0)))

    def end_calls(self) -> int:
        """The drain deadline: every call still running, in either era, ends at once with a
        -32000 "Server shutting down" error (503, or an error event on a response that already
        streams) and its record says so; a server's own deadline, which comes later, would
        cut it off with a bare 500 and leave its record without a status. Returns how many."""
        ended = self.dispatcher.stop_waiting(SHUTTING_DOWN)
        if ended:
            log.warning("drain deadline passed: ended %d call(s) still running", ended)
        return ended
