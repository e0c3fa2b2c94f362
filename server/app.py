"""``create_app``: wires settings, the catalog, the eras and the HTTP shell into one ASGI app.

The MCP path is answered by :class:`~server.transport.endpoint.McpEndpoint` directly (both ``/mcp``
and ``/mcp/``, no redirect), ahead of Starlette's router, because it is the hot path and needs
nothing Starlette adds; Starlette serves the rest (health) and owns the lifespan.

The lifespan is what makes the app whole (request records, change notifications, session
expiry, the catalog's own lifespan), so the app must never serve without it. Any ASGI server
runs it (``uvicorn module:app``, ``--factory``, gunicorn's uvicorn worker); a host app that
mounts this one does not run a mounted app's lifespan, so it passes :meth:`Application.lifespan`
as its own (``FastAPI(lifespan=mcp.lifespan)``), and until it does every request is answered
503 with that fix named, and a warning logged (:data:`NOT_STARTED`). On SIGTERM the lifespan
hears of the exit before the server's graceful wait (:mod:`server.exit_signals`), unless the
server says it tells the app itself (:mod:`server.serving`).

The module is a little over 400 lines: building every part from the settings, in the order
they depend on each other, is one sequence that reads best in one place. What can stand on
its own lives elsewhere (the probes in :mod:`server.transport.health`, the live report in
:mod:`server.report.live`, finding a catalog in :mod:`server.catalog.loading`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from server.asgi import Receive, Scope, Send
from server.catalog import Catalog, Change
from server.catalog.loading import load_catalog
from server.catalog.offload import set_thread_limit
from server.dispatch import Dispatcher
from server.errors import ServiceUnavailable
from server.exit_signals import ExitSignals
from server.hub import Hub, TaskNews
from server.legacy.era import LegacyEra
from server.legacy.runtime import Runtimes
from server.modern.era import ModernEra
from server.modern.input_required import RequestStates
from server.observe import record_observer
from server.observe.metrics import Metrics, MetricsEndpoint, state_readers
from server.pagination import Pager
from server.records.lines import LineWriter
from server.records.privacy import Privacy
from server.records.recorder import Recorder
from server.records.sinks import build_sinks
from server.report.live import LiveReport, open_live_report
from server.sealing import Sealer
from server.security.gate import Gate
from server.security.metadata import metadata_paths
from server.security.networks import parse_networks
from server.settings import Settings
from server.state import shared_state
from server.state.relay import BusRelay
from server.tasks.model import TaskLimits
from server.tasks.service import TaskService
from server.transport.admin import ReportRoute
from server.transport.endpoint import EndpointOptions, McpEndpoint
from server.transport.health import Probes
from server.transport.legacy import LegacyHttp, LegacyOptions
from server.transport.modern import ModernHttp, StreamOptions

log = logging.getLogger(__name__)

# What the calls the drain deadline ends are told (-32000: the same request may succeed later,
# on another replica or once this one is back; not -32603, nothing went wrong with the call).
SHUTTING_DOWN = "Server shutting down"

# A WARNING (plain uvicorn shows no INFO of ours): what breaks, and the fix.
PER_PROCESS_KEY = (
    "MCP_STATE_SECRET is unset: cursors and requestState are signed with a key of this process "
    "alone, so with several workers or replicas a next page or an input-required retry that "
    "reaches another process fails with 'Invalid cursor' or 'Invalid requestState'; set "
    "MCP_STATE_SECRET, the same on every process (openssl rand -hex 32)"
)

# Answered (503) to every request while the lifespan is not running, under a server or host
# app that could have run it; logged once as a warning.
NOT_STARTED = (
    "This MCP app is not running: its lifespan has not started (or has ended), so it would "
    "serve without request records, change notifications or session expiry. Mounted in "
    "Starlette or FastAPI, give the host app its lifespan: FastAPI(lifespan=mcp.lifespan) or "
    "Starlette(..., lifespan=mcp.lifespan), or 'async with mcp.lifespan(app):' inside the "
    "host's own lifespan."
)


class Application:
    """The ASGI application: the MCP endpoint first, Starlette for everything else."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        sealer = Sealer(settings.sealing_key())
        # Refuses to start with authentication off on a non-loopback address (unless asked).
        self.gate = Gate(
            settings, lambda: [scope for tool in catalog.tools.values() for scope in tool.scopes]
        )
        self.hub = Hub(settings.listen_queue_size)
        self.dispatcher = dispatcher = Dispatcher(
            catalog, Pager(sealer, settings.page_size), handler_timeout_s=settings.handler_timeout_s
        )
        # The worker threads of sync handlers are the process's (one pool): the last app built
        # sets their bound.
        set_thread_limit(settings.tool_threads)
        # In one process, or shared through Redis with the other replicas (MCP_REDIS_URL).
        self.shared = shared_state(
            settings,
            # Late-bound: the runtimes and the legacy shell are built below, with the store.
            local_sessions=lambda: self.runtimes.ids(),  # noqa: PLW0108
            busy=self._busy,
            ended=lambda session_id: self.legacy.sessions.session_ended(session_id),  # noqa: PLW0108
        )
        self.runtimes = Runtimes(settings.events_per_stream, self.shared.mirror.track)
        self.tasks = TaskService(
            self.shared.tasks,
            TaskLimits(
                default_ttl_ms=int(settings.task_ttl_s * 1000),
                min_ttl_ms=int(settings.task_ttl_min_s * 1000),
                max_ttl_ms=int(settings.task_ttl_max_s * 1000),
                poll_ms=settings.task_poll_interval_ms,
                lease_s=settings.task_lease_s,
                per_client=settings.max_tasks_per_client,
                total=settings.max_tasks,
                max_result_bytes=settings.task_result_max_bytes,
            ),
            announce=self.shared.bus.publish,
        )
        self.sessions = self.shared.store
        legacy_era = LegacyEra(
            catalog,
            dispatcher,
            self.sessions,
            client_request_timeout_s=settings.client_request_timeout_s,
            default_log_level=(
                None
                if settings.legacy_default_log_level == "off"
                else settings.legacy_default_log_level
            ),
            tasks=self.tasks,
        )
        self.legacy = LegacyHttp(
            legacy_era,
            self.runtimes,
            self.hub,
            self.gate,
            LegacyOptions(
                keepalive_s=settings.keepalive_s,
                retry_ms=settings.sse_retry_ms,
                send_timeout_s=settings.send_timeout_s,
            ),
            bus=self.shared.bus,
            mirror=self.shared.mirror,
        )
        # A task's new state (here or announced by another replica) reaches the streams that
        # follow it: listen streams with its id (2026-07-28), its session's GET stream (2025).
        self.tasks.listeners.append(lambda record: self.hub.publish(TaskNews(record)))
        self.replica = BusRelay(self.hub, self.legacy.sessions, self.shared.bus, tasks=self.tasks)
        legacy_era.on_subscriptions = self.replica.announce_subscriptions
        self.modern = ModernEra(
            catalog,
            dispatcher,
            RequestStates(sealer, settings.request_state_ttl_s),
            list_ttl_ms=settings.list_ttl_ms,
            discover_ttl_ms=settings.discover_ttl_ms,
            cache_scope=settings.cache_scope,
            tasks=self.tasks,
        )
        privacy = Privacy(
            redact=tuple(
                word.lower().replace("-", "").replace("_", "") for word in settings.records_redact
            ),
            max_params_bytes=settings.records_params_max_bytes,
            keep_params=settings.records_params,
        )
        self.metrics = Metrics(lambda name: name in catalog.tools)
        # The live report (MCP_REPORT_LIVE): one more sink, or a follower of the Redis stream.
        self.live: LiveReport | None = None
        self.live_tail: Any = None
        extra_sinks: list[Any] = []
        if settings.report_live:
            self.live, self.live_tail, extra_sinks = open_live_report(
                settings.records,
                settings.redis_url.get_secret_value(),
                f"{settings.redis_prefix}:{settings.records_redis_stream}",
                settings.report_refresh_s,
            )
        self.recorder = Recorder(
            build_sinks(
                settings.records,
                path=settings.records_file,
                max_bytes=settings.records_max_bytes,
                backups=settings.records_backups,
                compress=settings.records_compress,
                redis_url=settings.redis_url.get_secret_value(),
                redis_key=f"{settings.redis_prefix}:{settings.records_redis_stream}",
                redis_maxlen=settings.records_redis_maxlen,
                redis_timeout_s=settings.redis_timeout_s,
            )
            + extra_sinks,
            capacity=settings.records_queue,
            flush_s=settings.records_flush_ms / 1000,
            prepare=privacy.apply,
            line=LineWriter(privacy).line,
            observer=record_observer(self.metrics if settings.metrics else None, settings.otel),
        )
        self.metrics.watch(state_readers(self.hub, self.runtimes, self.recorder, self.shared))
        self.endpoint = McpEndpoint(
            ModernHttp(
                self.modern,
                self.hub,
                self.gate,
                StreamOptions(
                    keepalive_s=settings.keepalive_s,
                    send_timeout_s=settings.send_timeout_s,
                    shutdown_grace_s=settings.shutdown_grace_s,
                ),
            ),
            self.legacy,
            self.gate,
            self.recorder,
            EndpointOptions(
                allowed_hosts=tuple(settings.allowed_hosts),
                # A browser origin allowed by CORS is an allowed origin.
                allowed_origins=tuple(settings.allowed_origins) + tuple(settings.cors_origins),
                max_body_bytes=settings.max_body_bytes,
                max_batch=settings.max_batch,
                max_header_bytes=settings.max_header_bytes,
                max_headers=settings.max_headers,
                max_header_value_bytes=settings.max_header_value_bytes,
                trusted_proxies=parse_networks(settings.trusted_proxies),
            ),
        )
        self.mcp_paths = frozenset({settings.path, settings.path + "/"})
        # What serves a request: the router, behind CORS when configured. uvicorn calls it
        # directly (serving.server_for), without the coroutine of __call__ per request.
        self.entry: ASGIApp = self._route
        if settings.cors_origins:
            # Browser clients: preflights answered, the MCP headers allowed, the session id
            # and the auth challenge readable by the page.
            self.entry = CORSMiddleware(
                self._route,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                allow_headers=["*"],
                expose_headers=["Mcp-Session-Id", "WWW-Authenticate", "Retry-After"],
                max_age=int(settings.cors_max_age_s),
            )
        self.ready = False
        self.started = False
        # The server running the app calls begin_shutdown itself before its graceful wait
        # (server.serving's Server sets this); otherwise the lifespan wraps the exit signals.
        self.server_tells_shutdown = False
        self.exit_signals = ExitSignals(self.begin_shutdown)
        self._not_started_warned = False
        # Armed by begin_shutdown: when it fires, the calls still running are ended.
        self._drain_deadline: asyncio.TimerHandle | None = None
        # Started by begin_shutdown: running tasks finish, or are failed, within the drain.
        self._tasks_drained: asyncio.Future[None] | None = None
        probes = Probes(self, self.recorder, self.shared, self.gate)
        metrics_networks = parse_networks(settings.metrics_networks)
        proxies = self.endpoint.options.trusted_proxies
        metrics_endpoint = MetricsEndpoint(self.metrics, metrics_networks, proxies)
        self.starlette = Starlette(
            routes=[
                Route("/healthz", probes.healthz, methods=["GET"]),
                Route("/readyz", probes.readyz, methods=["GET"]),
                *([Route("/metrics", metrics_endpoint)] if settings.metrics else []),
                *(
                    Route(path, probes.resource_metadata, methods=["GET"])
                    for path in metadata_paths(settings.path)
                ),
                *(
                    [
                        Route(
                            settings.report_path,
                            ReportRoute(
                                self.endpoint, self.gate, settings.report_scope, self.live.render
                            ).answer,
                            methods=["GET"],
                        )
                    ]
                    if self.live is not None
                    else []
                ),
            ],
            lifespan=self.lifespan,
        )
        # Last: a configuration refused above is then the only line printed.
        if not settings.state_secret.get_secret_value():
            log.warning(PER_PROCESS_KEY)

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
            self.shared.start(self.replica.deliver)
            expiry = asyncio.create_task(self.expire_sessions())
            if not self.server_tells_shutdown:
                wrapped = self.exit_signals.install()
                log.debug("exit signals heard first: %s", [sig.name for sig in wrapped])
            self.tasks.closing = False  # (again, after a drain: an app may be started twice)
            self.ready = self.started = True
            try:
                yield
            finally:
                self.exit_signals.uninstall()
                self.begin_shutdown()
                if self._tasks_drained is not None:
                    await self._tasks_drained
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
                self.started = False

    async def expire_sessions(self) -> None:
        """End idle legacy sessions, and everything they hold in this process."""
        interval = min(30.0, max(0.5, self.settings.session_idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sessions.expire()  # ended ones release their runtime
            except ServiceUnavailable:
                pass  # Redis is away: the link logs it once; the next sweep retries
            except Exception:
                log.exception("expiring sessions failed")

    def _changed(self, change: Change) -> None:
        """A change of this process's catalog: its own streams, then the other replicas."""
        self.hub.publish(change)
        self.replica.announce_change(change)

    def _busy(self, session_id: str) -> bool:
        runtime = self.runtimes.peek(session_id)
        return runtime is not None and runtime.busy()

    def begin_shutdown(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking long-lived work: end every listen stream with its graceful result, and
        give the calls in flight ``drain_timeout_s`` (``MCP_DRAIN_TIMEOUT_S`` by default) to
        finish; past that they are ended (:meth:`end_calls`).

        It must run (on the app's loop) as soon as the shutdown begins, before the server waits
        for the open connections, which a listen stream never closes by itself: the
        lifespan's shutdown comes only after that wait. :mod:`server.serving` calls it; under
        any other server the lifespan hears SIGTERM and SIGINT first and calls it
        (:mod:`server.exit_signals`); a host that stops its server some other way (from another
        thread, say) calls it itself. Calling it again changes nothing."""
        self.ready = False
        self.hub.close_all("shutdown")
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.entry(scope, receive, send)

    def _route(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine function: it hands back the chosen app's own awaitable, so routing
        # costs no coroutine of its own on every request.
        if not self.started and scope["type"] == "http" and ("state" in scope or "app" in scope):
            # A server that runs lifespans puts "state" in every request's scope, and a host
            # framework puts "app": either could have run this app's lifespan and did not.
            # A bare test transport (httpx's ASGITransport) runs none and puts neither; tests
            # enter the lifespan themselves where they need it.
            return self._not_started(scope, receive, send)
        path = scope.get("path", "")
        # Behind a prefix (uvicorn --root-path, MCP_ROOT_PATH) the path arrives with it.
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        if scope["type"] == "http" and path in self.mcp_paths:
            return self.endpoint(scope, receive, send)
        return self.starlette(scope, receive, send)

    async def _not_started(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._not_started_warned:
            self._not_started_warned = True
            log.warning("%s", NOT_STARTED)
        path = scope.get("path", "")
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :]
        body: dict[str, Any] = (
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": NOT_STARTED}}
            if path in self.mcp_paths
            else {"status": "not started", "error": NOT_STARTED}
        )
        await JSONResponse(body, status_code=503)(scope, receive, send)


def create_app(settings: Settings | None = None, catalog: Catalog | None = None) -> Application:
    """The ASGI app serving ``catalog`` (None: ``MCP_CATALOG``) with ``settings`` (None: the
    ``MCP_*`` variables). Run it with any ASGI server, or mount it in a host app that passes
    its :meth:`~Application.lifespan` on."""
    settings = settings or Settings()
    return Application(settings, catalog if catalog is not None else load_catalog(settings.catalog))
