"""The composition: every part built from the settings and the catalog, into one ASGI app.

:class:`Application` builds the parts in the order they depend on each other (the gate, the
dispatcher, the stream mirror, the sessions' runtimes over it, the session store with its hooks
and the rest of shared state, the legacy era and its HTTP half, the relay between replicas, the
modern era, the records, the endpoint), one sequence that reads best in one place: nothing is
bound late. It owns a :class:`~server.app.lifecycle.Lifecycle` that starts and stops them and
a :class:`~server.app.routing.Router` that routes requests, and forwards the few methods
servers, hosts and probes use. What can stand on its own lives elsewhere (the probes in
:mod:`server.transport.health`, the live report in :mod:`server.report.live`, finding a catalog
in :mod:`server.catalog.loading`).
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial
from typing import Any

from server.app.doctor_tools import add_doctor_tools
from server.app.lifecycle import Lifecycle
from server.app.routing import Router
from server.asgi import Receive, Scope, Send
from server.catalog import Catalog
from server.catalog.loading import load_catalog
from server.catalog.offload import set_thread_limit
from server.catalog.visibility import Views, item_scopes
from server.dispatch import Dispatcher
from server.hub import Hub, TaskNews
from server.legacy.era import LegacyEra
from server.legacy.runtime import Runtimes
from server.logs import adopt as adopt_logs
from server.modern.era import ModernEra
from server.modern.input_required import RequestStates
from server.observe import record_observer
from server.observe.gauges import state_readers
from server.observe.metrics import Metrics
from server.pagination import Pager
from server.records.lines import LineWriter
from server.records.privacy import Privacy
from server.records.recorder import Recorder
from server.records.sinks import SinkOptions, build_sinks
from server.report.live import LiveReport, open_live_report
from server.sealing import Sealer
from server.security.gate import Gate
from server.security.networks import parse_networks
from server.security.quotas import build_quotas
from server.security.shared_limits import SharedLimits
from server.settings import Settings
from server.state.auto import shared_state, state_link, stream_mirror
from server.state.messages import publish_subscription
from server.state.relay import BusRelay
from server.tasks.model import TaskLimits
from server.tasks.service import TaskService
from server.transport.endpoint import EndpointOptions, McpEndpoint
from server.transport.health import Probes
from server.transport.legacy import LegacyHttp
from server.transport.legacy_answer import LegacyOptions
from server.transport.legacy_sessions import release_session
from server.transport.legacy_sse import SseTransport
from server.transport.legacy_sse_parts import SseOptions
from server.transport.modern import ModernHttp, StreamOptions
from server.transport.retiring import Retiring
from server.transport.server_card import ServerCards

log = logging.getLogger(__name__)

# A WARNING (plain uvicorn shows no INFO of ours): what breaks, and the fix.
PER_PROCESS_KEY = (
    "MCP_STATE_SECRET is unset: cursors and requestState are signed with a key of this process "
    "alone, so with several workers or replicas a next page or an input-required retry that "
    "reaches another process fails with 'Invalid cursor' or 'Invalid requestState'; set "
    "MCP_STATE_SECRET, the same on every process (openssl rand -hex 32)"
)


class Application:
    """The ASGI application: the MCP endpoint first, Starlette for everything else."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        # Plain `uvicorn module:app` configured its logging, not ours: MCP_LOG_FORMAT applies
        # all the same, and uvicorn's access lines stay off a stdout that holds records.
        adopt_logs(
            settings.log_format, settings.log_level, records_on_stdout="stdout" in settings.records
        )
        if settings.doctor and "doctor.wait" not in catalog.tools:
            add_doctor_tools(catalog, settings)  # python -m server doctor's side, when asked
        sealer = Sealer(settings.sealing_key())
        # Refuses to start with authentication off on a non-loopback address (unless asked).
        self.gate = Gate(settings, lambda: item_scopes(catalog))
        self.hub = Hub(settings.listen_queue_size)
        # In one process, or shared through Redis with the other replicas (MCP_REDIS_URL): the
        # mirror first, the sessions' runtimes that feed it, then the store told of them.
        link = state_link(settings)
        mirror = stream_mirror(settings, link)
        self.dispatcher = dispatcher = Dispatcher(
            catalog,
            Pager(sealer, settings.page_size),
            handler_timeout_s=settings.handler_timeout_s,
            # Item scopes hide only from callers who are told apart (not with MCP_AUTH=none).
            views=Views(catalog, settings.scoped_items, scoped=self.gate.authenticates),
            # A tool call answers once its changes are in the Redis change log, if any.
            durable=getattr(mirror, "changes", None),
        )
        # The worker threads of sync handlers are the process's (one pool): the last app built
        # sets their bound.
        set_thread_limit(settings.tool_threads)
        self.runtimes = Runtimes(
            settings.events_per_stream,
            mirror.track,
            mirror.forget,
            replica=link.replica if link is not None else "",
        )
        self.shared = shared_state(
            settings,
            link,
            mirror,
            local_sessions=self.runtimes.ids,
            busy=self.runtimes.busy,
            ended=partial(release_session, self.runtimes, self.gate),
        )
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
        # What MCP_RETIRE names (nothing by default: then no request pays for a check).
        retiring = self.retiring = Retiring(settings.retire_plan) if settings.retire_plan else None
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
            # A session's subscription changes, announced for a GET stream another replica
            # holds: this needs only the bus, so the era need not wait for the relay.
            on_subscriptions=partial(publish_subscription, self.shared.bus),
            versions_now=(
                (lambda: retiring.plan.supported_versions(retiring.now()))
                if retiring is not None
                else None
            ),
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
        self.relay = BusRelay(self.hub, self.legacy.sessions, self.shared.bus, tasks=self.tasks)
        self.modern = ModernEra(
            catalog,
            dispatcher,
            RequestStates(sealer, settings.request_state_ttl_s, self.shared.spent),
            list_ttl_ms=settings.list_ttl_ms,
            discover_ttl_ms=settings.discover_ttl_ms,
            cache_scope=settings.cache_scope
            or ("private" if self.gate.authenticates else "public"),
            tasks=self.tasks,
        )
        privacy = Privacy(
            redact=tuple(settings.records_redact),
            max_params_bytes=settings.records_params_max_bytes,
            keep_params=settings.records_params,
        )
        self.metrics = Metrics(lambda name: name in catalog.tools, settings.metrics_tenants)
        # The live report (MCP_REPORT_LIVE): one more sink, or a follower of the Redis stream.
        self.live: LiveReport | None = None
        self.live_tail: Any = None
        extra_sinks: list[Any] = []
        sinks = sink_options(settings)
        if settings.report_live:
            self.live, self.live_tail, extra_sinks = open_live_report(
                settings.records,
                sinks.redis_url,
                sinks.redis_key,
                settings.report_refresh_s,
                retire=[retirement.item.name for retirement in settings.retire_plan.retirements],
            )
        self.recorder = Recorder(
            build_sinks(sinks) + extra_sinks,
            capacity=settings.records_queue,
            flush_s=settings.records_flush_ms / 1000,
            prepare=privacy.apply,
            line=LineWriter(privacy).line,
            observer=record_observer(self.metrics if settings.metrics else None, settings.otel),
        )
        self.metrics.watch(
            state_readers(
                self.hub,
                self.runtimes,
                self.recorder,
                self.shared,
                retiring.gauges if retiring is not None else list,
            )
        )
        modern_http = ModernHttp(
            self.modern,
            self.hub,
            self.gate,
            StreamOptions(
                keepalive_s=settings.keepalive_s,
                send_timeout_s=settings.send_timeout_s,
                shutdown_grace_s=settings.shutdown_grace_s,
            ),
        )
        self.endpoint = McpEndpoint(
            modern_http,
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
        self.sse: SseTransport | None = None
        if settings.sse_transport:
            self.sse = SseTransport(
                self.endpoint,
                self.legacy,
                SseOptions(
                    stream_path=settings.sse_transport_path,
                    messages_path=settings.sse_transport_messages_path,
                    max_pending=settings.sse_transport_max_pending,
                    max_queued_bytes=settings.sse_transport_max_queued_bytes,
                    keepalive_s=settings.keepalive_s,
                    send_timeout_s=settings.send_timeout_s,
                ),
            )
            self.endpoint.sse = self.sse
        self.endpoint.retiring = self.legacy.sessions.retiring = retiring
        share_limits(self.gate, self.shared.limits)
        self.legacy.quotas = modern_http.quotas = build_quotas(
            settings.quota_entries, self.shared.limits
        )
        self.lifecycle = Lifecycle(
            settings,
            catalog=catalog,
            hub=self.hub,
            dispatcher=dispatcher,
            shared=self.shared,
            runtimes=self.runtimes,
            tasks=self.tasks,
            legacy=self.legacy,
            sse=self.sse,
            relay=self.relay,
            recorder=self.recorder,
            live_tail=self.live_tail,
        )
        probes = Probes(self.lifecycle, self.recorder, self.shared, self.gate, settings.path)
        if retiring is not None:
            probes.retirements = retiring.status
        self.router = Router(
            settings,
            self.lifecycle,
            endpoint=self.endpoint,
            sse=self.sse,
            gate=self.gate,
            metrics=self.metrics,
            live=self.live,
            probes=probes,
            cards=ServerCards(
                self.modern.discover_result,
                legacy_era.supported_versions,
                legacy_era.versions_now,
                mcp_path=settings.path,
                sse_path=settings.sse_transport_path if settings.sse_transport else None,
                authenticated=self.gate.authenticates,
                name=settings.server_card_name,
                allowed_hosts=settings.allowed_hosts,
            )
            if settings.server_card
            else None,
        )
        # What serves a request (the router, behind CORS when configured), and Starlette's
        # part, which tests enter for its lifespan.
        self.entry = self.router.entry
        self.starlette = self.router.starlette
        # Last: a configuration refused above is then the only line printed.
        if not settings.state_secret.get_secret_value():
            log.warning(PER_PROCESS_KEY)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.entry(scope, receive, send)

    def lifespan(self, app: object = None) -> contextlib.AbstractAsyncContextManager[None]:
        """Start and stop (:meth:`Lifecycle.lifespan <server.app.lifecycle.Lifecycle.lifespan>`):
        what a host app that mounts this one passes as its own lifespan
        (``FastAPI(lifespan=mcp.lifespan)``); ``app`` (the host) is not used."""
        return self.lifecycle.lifespan(app)

    def begin_shutdown(self, drain_timeout_s: float | None = None) -> None:
        """Stop taking long-lived work and arm the drain deadline
        (:meth:`Lifecycle.begin_shutdown <server.app.lifecycle.Lifecycle.begin_shutdown>`)."""
        self.lifecycle.begin_shutdown(drain_timeout_s)

    @property
    def ready(self) -> bool:
        """Started and not draining: what ``/readyz`` reports."""
        return self.lifecycle.ready

    @property
    def started(self) -> bool:
        """The lifespan runs."""
        return self.lifecycle.started


def create_app(settings: Settings | None = None, catalog: Catalog | None = None) -> Application:
    """The ASGI app serving ``catalog`` (None: ``MCP_CATALOG``) with ``settings`` (None: the
    ``MCP_*`` variables). Run it with any ASGI server, or mount it in a host app that passes
    its :meth:`~Application.lifespan` on."""
    settings = settings or Settings()
    return Application(settings, catalog if catalog is not None else load_catalog(settings.catalog))


def sink_options(settings: Settings) -> SinkOptions:
    """What the record sinks are built with (``MCP_RECORDS*``, and Redis's URL and timeout)."""
    return SinkOptions(
        names=settings.records,
        path=settings.records_file,
        max_bytes=settings.records_max_bytes,
        backups=settings.records_backups,
        compress=settings.records_compress,
        redis_url=settings.redis_url.get_secret_value(),
        redis_key=f"{settings.redis_prefix}:{settings.records_redis_stream}",
        redis_maxlen=settings.records_redis_maxlen,
        redis_timeout_s=settings.redis_timeout_s,
    )


def share_limits(gate: Gate, limits: SharedLimits | None) -> None:
    """With Redis, the per-client limits counted there too (with the quota charge, for a
    tool call: :func:`~server.security.quotas.build_quotas` is given them)."""
    if limits is not None:
        gate.shared, gate.shares = limits, True
