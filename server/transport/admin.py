"""The live report's HTTP route (``MCP_REPORT_PATH``): who may see it, and the answer.

The report itself is drawn by :mod:`server.report.live` (``render``, handed in by
:mod:`server.app`, which wires the two). Here: the endpoint's Host and Origin checks, then a
caller on this machine (:func:`is_local_caller`) is served, and anyone else must present a
token with the admin scope: 401 without one or with a bad one (``WWW-Authenticate`` says how),
403 when authentication is off or the scope is missing. The page is drawn in a worker thread,
so a large report does not hold up the event loop.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from server.asgi import Headers, Scope, header_text, read_headers
from server.errors import InvalidRequest, McpError, http_status
from server.security.auth import single_authorization
from server.security.gate import Gate
from server.security.networks import Network, forwarded_client, in_networks
from server.transport.endpoint import McpEndpoint


def is_local_caller(
    peer: str | None,
    forwarded_for: str | None,
    *,
    proxied: bool,
    trusted_proxies: tuple[Network, ...] = (),
) -> bool:
    """The caller is on this machine: its address is loopback, and the request did not come
    through a proxy (``proxied``: it has an X-Forwarded-For or Forwarded header) unless the peer
    is a trusted proxy, in which case the forwarded address (``forwarded_for``, read as
    :func:`~server.security.networks.client_address` reads it) is the caller's. A local reverse
    proxy that forwards the world must not make the world local."""
    address = forwarded_client(peer, forwarded_for, proxied, trusted_proxies)
    return address is not None and in_networks(address, _LOOPBACK)


MEDIA_TYPES = {
    "html": "text/html; charset=utf-8",
    "json": "application/json",
    "markdown": "text/markdown; charset=utf-8",
    "table": "text/plain; charset=utf-8",
}
_LOOPBACK: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)


class ReportRoute:
    """``GET MCP_REPORT_PATH``: the live page, or ``?format=json``; ``?by-tenant`` (or
    ``?tenant=T``) the traffic by tenant, also as ``?format=markdown`` or ``table`` (text),
    as the file report's ``--by-tenant`` draws it."""

    def __init__(
        self,
        endpoint: McpEndpoint,
        gate: Gate,
        scope: str,
        render: Callable[[str, str | None, str | None], str],
    ) -> None:
        self.endpoint = endpoint
        self.gate = gate
        self.admin_scope = scope
        self.render = render

    async def answer(self, request: Request) -> Response:
        scope = request.scope
        headers = read_headers(scope)
        try:
            self.endpoint.admit(scope, headers)  # header sizes, Host and Origin, as for /mcp
            peer = scope.get("client")
            trusted = self.endpoint.options.trusted_proxies
            local = is_local_caller(
                peer[0] if peer else None,
                header_text(headers, b"x-forwarded-for") if trusted else None,
                proxied=b"x-forwarded-for" in headers or b"forwarded" in headers,
                trusted_proxies=trusted,
            )
            if not local:
                await self.admin(scope, headers)
        except McpError as error:
            extra = self.gate.headers(error, scope, header_text(headers, b"host"))
            return JSONResponse(
                {"error": error.message},
                status_code=http_status(error, "modern"),
                headers={name.decode("latin-1"): value.decode("latin-1") for name, value in extra},
            )
        query = request.query_params
        retire = query.get("retire")  # an item of MCP_RETIRE: who still uses it
        # The traffic by tenant (all, or ?tenant=T's), as the file report's --by-tenant.
        tenants = query.get("tenant", "" if "by-tenant" in query else None)
        form = query.get("format", "html")
        if form not in MEDIA_TYPES or (form in ("markdown", "table") and tenants is None):
            form = "html"
        body = await asyncio.to_thread(self.render, form, retire, tenants)
        return Response(
            body,
            media_type=MEDIA_TYPES[form],
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    async def admin(self, scope: Scope, headers: Headers) -> None:
        """A caller off loopback: authenticated, with the admin scope (McpError otherwise)."""
        if not self.gate.authenticates:
            raise InvalidRequest(
                "The live report is served only on loopback while authentication is off",
                http_status=403,
            )
        authorization = (
            single_authorization(scope["headers"]) if b"authorization" in headers else None
        )
        principal = await self.gate.auth.authenticate(authorization, scope.get("query_string", b""))
        self.gate.auth.require(principal, [self.admin_scope])
