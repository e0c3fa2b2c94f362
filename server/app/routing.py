"""Routing: the MCP path straight to the endpoint, Starlette for the rest, CORS around both.

The MCP path is answered by :class:`~server.transport.endpoint.McpEndpoint` directly (both
``/mcp`` and ``/mcp/``, no redirect), ahead of Starlette's router, because it is the hot path
and needs nothing Starlette adds; Starlette serves the rest (health, readiness, metrics, the
resource metadata, the live report) and owns the lifespan (:mod:`server.app.lifecycle`). Until
the lifespan runs, under a server or host app that could have run it, every request is answered
503 with the fix named, and a warning logged (:data:`NOT_STARTED`).

:class:`Router` is an object the :class:`~server.app.application.Application` owns, like its
:class:`~server.app.lifecycle.Lifecycle`; an ASGI server calls the application (or its
``entry``, which is the router's).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from server.app.lifecycle import Lifecycle
from server.asgi import Receive, Scope, Send, path_of, read_headers
from server.observe.metrics import Metrics, MetricsEndpoint
from server.report.live import LiveReport
from server.security.forwarded import MalformedForwarding, forwarding
from server.security.forwarded import apply as apply_forwarded
from server.security.forwarded import read as read_forwarded
from server.security.gate import Gate
from server.security.metadata import metadata_paths
from server.security.networks import Network, in_networks, parse_networks
from server.settings import Settings
from server.transport.admin import ReportRoute
from server.transport.endpoint import McpEndpoint
from server.transport.health import Probes
from server.transport.legacy_sse import SseTransport
from server.transport.server_card import CARD_SUFFIX, CATALOG_PATHS, ServerCards

log = logging.getLogger(__name__)
CARD_VERBS = ["GET", "OPTIONS"]

# Answered (503) to every request while the lifespan is not running, under a server or host
# app that could have run it; logged once as a warning.
NOT_STARTED = (
    "This MCP app is not running: its lifespan has not started (or has ended), so it would "
    "serve without request records, change notifications or session expiry. Mounted in "
    "Starlette or FastAPI, give the host app its lifespan: FastAPI(lifespan=mcp.lifespan) or "
    "Starlette(..., lifespan=mcp.lifespan), or 'async with mcp.lifespan(app):' inside the "
    "host's own lifespan."
)


class Router:
    """Which app answers a request: the MCP endpoint first, Starlette for everything else."""

    def __init__(
        self,
        settings: Settings,
        lifecycle: Lifecycle,
        *,
        endpoint: McpEndpoint,
        sse: SseTransport | None,
        gate: Gate,
        metrics: Metrics,
        live: LiveReport | None,
        probes: Probes,
        cards: ServerCards | None = None,
    ) -> None:
        # Read on every request: until its lifespan runs the app answers 503.
        self.lifecycle = lifecycle
        self.endpoint = endpoint
        self.sse = sse
        self._not_started_warned = False
        self.mcp_paths = frozenset({settings.path, settings.path + "/"})
        # The HTTP+SSE transport's two paths (MCP_SSE_TRANSPORT), answered like the MCP path.
        self.sse_paths = sse.paths if sse is not None else frozenset()
        # What serves a request: the router, behind CORS when configured. uvicorn calls it
        # directly (serving.server_for), without the coroutine of __call__ per request.
        self.entry: ASGIApp = self.route
        if settings.cors_origins:
            # Browser clients: preflights answered, the MCP headers allowed, the session id
            # and the auth challenge readable by the page.
            self.entry = CORSMiddleware(
                self.route,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                allow_headers=["*"],
                expose_headers=["Mcp-Session-Id", "WWW-Authenticate", "Retry-After"],
                max_age=int(settings.cors_max_age_s),
            )
        metrics_networks = parse_networks(settings.metrics_networks)
        proxies = endpoint.options.trusted_proxies
        self._proxies: tuple[Network, ...] = proxies
        # MCP_ROOT_PATH pins the public prefix: a forwarded one that differs is logged once.
        self._pinned_root = settings.root_path
        self._root_warned = False
        metrics_endpoint = MetricsEndpoint(metrics, metrics_networks, proxies)
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
                        Route(settings.path + CARD_SUFFIX, cards.serve_card, methods=CARD_VERBS),
                        *(
                            Route(path, cards.serve_catalog, methods=CARD_VERBS)
                            for path in CATALOG_PATHS
                        ),
                    ]
                    if cards is not None
                    else []
                ),
                *(
                    [
                        Route(
                            settings.report_path,
                            ReportRoute(endpoint, gate, settings.report_scope, live.render).answer,
                            methods=["GET"],
                        )
                    ]
                    if live is not None
                    else []
                ),
            ],
            lifespan=lifecycle.lifespan,
        )

    def route(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The chosen app's own awaitable for the request."""
        if (
            not self.lifecycle.started
            and scope["type"] == "http"
            and ("state" in scope or "app" in scope)
        ):
            # A server that runs lifespans puts "state" in every request's scope, and a host
            # framework puts "app": either could have run this app's lifespan and did not.
            # A bare test transport (httpx's ASGITransport) runs none and puts neither; tests
            # enter the lifespan themselves where they need it.
            return self._not_started(scope, receive, send)
        if self._proxies and scope["type"] == "http":
            refusal = self._forwarded(scope)
            if refusal is not None:
                return self._refuse(scope, receive, send, *refusal)
        # path_of's usual case in place (no mount prefix): a call fewer on every request.
        path = path_of(scope) if scope.get("root_path") else scope.get("path", "")
        if scope["type"] == "http" and path in self.mcp_paths:
            return self.endpoint(scope, receive, send)
        if path in self.sse_paths and scope["type"] == "http" and self.sse is not None:
            return self.sse(scope, receive, send)
        return self.starlette(scope, receive, send)

    def _forwarded(self, scope: Scope) -> tuple[int, str] | None:
        """A trusted proxy's forwarding headers written into the scope (the URLs the server
        builds are the client's: see security.forwarded), once per request; the answer
        instead when one is malformed (400). The forwarded Host is checked where a Host
        matters, as a direct request's is (the endpoint's HostGuard, the metadata, the card):
        the probes and /metrics answer whatever the Host."""
        peer = scope.get("client")
        if peer is None or not in_networks(peer[0], self._proxies):
            return None
        headers = read_headers(scope)
        if not forwarding(headers):
            return None
        try:
            found = read_forwarded(headers, self._proxies)
        except MalformedForwarding as bad:
            return 400, str(bad)
        unapplied = apply_forwarded(scope, found, self._pinned_root)
        if unapplied is not None and not self._root_warned:
            self._root_warned = True
            log.warning(
                "MCP_ROOT_PATH=%s is pinned, but a trusted proxy forwards X-Forwarded-Prefix %s: "
                "URLs keep MCP_ROOT_PATH (unset it to follow the proxy)",
                self._pinned_root,
                unapplied or "/",
            )
        return None

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, message: str
    ) -> None:
        body = self._error_body(scope, message)
        await JSONResponse(body, status_code=status)(scope, receive, send)

    def _error_body(self, scope: Scope, message: str) -> dict[str, Any]:
        path = path_of(scope)
        if path in self.mcp_paths:
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
        return {"error": message}

    async def _not_started(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._not_started_warned:
            self._not_started_warned = True
            log.warning("%s", NOT_STARTED)
        path = path_of(scope)
        body: dict[str, Any] = (
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": NOT_STARTED}}
            if path in self.mcp_paths
            else {"status": "not started", "error": NOT_STARTED}
        )
        await JSONResponse(body, status_code=503)(scope, receive, send)
