"""The server card (SEP-2127) at ``<MCP_PATH>/server-card`` and the catalog that points to it.

Both are drawn from what the running server answers, so they cannot contradict it: identity and
versions from the modern era's own ``server/discover`` result and the legacy era's versions,
remotes from the transports that are on, the Authorization header from ``MCP_AUTH``; URLs as
the client made the request (:mod:`server.security.forwarded`), the Host allowed. Public by
design (CORS ``*``), cached (``Cache-Control: public``, ``ETag``, 304), off with
``MCP_SERVER_CARD=false``. The catalog is at ``/.well-known/mcp/catalog.json`` (the extension's
earlier name) and ``/.well-known/ai-catalog.json`` (its current one).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from server.memo import BoundedMemo
from server.protocol import META_SERVER_INFO
from server.security.metadata import resource_url
from server.transport.guards import host_allowed

SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
CARD_TYPE = "application/mcp-server-card+json"
CATALOG_TYPE = "application/ai-catalog+json"
CATALOG_PATHS = ("/.well-known/mcp/catalog.json", "/.well-known/ai-catalog.json")
CARD_SUFFIX = "/server-card"
MAX_AGE_S = 3600
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET",
    "Access-Control-Allow-Headers": "Content-Type, If-None-Match",
    "Access-Control-Expose-Headers": "ETag",
}
_NOT_NAME = re.compile(r"[^a-zA-Z0-9._-]+")


class ServerCards:
    """The card and the catalog of one app, per public base URL (a bounded number kept)."""

    KEPT = 64

    def __init__(
        self,
        discover: Callable[[], dict[str, Any]],
        legacy_versions: Sequence[str],
        versions_now: Callable[[], Sequence[str]] | None,
        *,
        mcp_path: str,
        sse_path: str | None,
        authenticated: bool,
        name: str,
        allowed_hosts: Sequence[str],
    ) -> None:
        self.discover = discover
        self.legacy_versions = tuple(legacy_versions)
        # The versions MCP_RETIRE has not retired now, modern and legacy (None: it retires
        # none), read for each answer: a version leaves the card as it is retired.
        self.versions_now = versions_now
        self.mcp_path = mcp_path
        self.sse_path = sse_path
        self.authenticated = authenticated
        self.name = name
        self.allowed_hosts = tuple(allowed_hosts)
        self._answers: BoundedMemo[tuple[str, str, tuple[str, ...]], tuple[bytes, str]] = (
            BoundedMemo(self.KEPT)
        )

    def card(self, base: str, host: str) -> dict[str, Any]:
        """The server card for clients that reach the app at ``base`` (origin and prefix)."""
        result = self.discover()
        info: dict[str, Any] = result["_meta"][META_SERVER_INFO]
        modern = list(result["supportedVersions"])
        legacy = list(self.legacy_versions)
        if self.versions_now is not None:
            now = set(self.versions_now())
            modern = [version for version in modern if version in now]
            legacy = [version for version in legacy if version in now]
        headers = (
            [
                {
                    "name": "Authorization",
                    "description": "A bearer token for this server.",
                    "isRequired": True,
                    "isSecret": True,
                    "value": "Bearer {token}",
                    "variables": {"token": {"isRequired": True, "isSecret": True}},
                }
            ]
            if self.authenticated
            else []
        )
        streamable: dict[str, Any] = {
            "type": "streamable-http",
            "url": base + self.mcp_path,
            "supportedProtocolVersions": modern + [v for v in legacy if v not in modern],
        }
        remotes = [streamable]
        if self.sse_path is not None and legacy:  # not once the initialize era is retired
            remotes.append(
                {
                    "type": "sse",
                    "url": base + self.sse_path,
                    "supportedProtocolVersions": [legacy[-1]],
                }
            )
        for remote in remotes:
            if headers:
                remote["headers"] = headers
        card: dict[str, Any] = {
            "$schema": SCHEMA,
            "name": self.name or default_name(host, info["name"]),
            "version": info["version"],
            "description": (info.get("description") or info.get("title") or info["name"])[:100],
        }
        for field in ("title", "websiteUrl", "icons"):
            if field in info:
                card[field] = info[field][:100] if field == "title" else info[field]
        card["remotes"] = remotes
        return card

    def catalog(self, base: str, host: str) -> dict[str, Any]:
        card = self.card(base, host)
        namespace, _, server = card["name"].partition("/")
        publisher = ".".join(reversed(namespace.split(".")))  # the domain, as urn:air names it
        return {
            "specVersion": "1.0",
            "entries": [
                {
                    "identifier": f"urn:air:{publisher}:mcp:{server}",
                    "type": CARD_TYPE,
                    "url": base + self.mcp_path + CARD_SUFFIX,
                }
            ],
        }

    async def serve_card(self, request: Request) -> Response:
        return self._answer(request, "card")

    async def serve_catalog(self, request: Request) -> Response:
        return self._answer(request, "catalog")

    def _answer(self, request: Request, kind: str) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers={**CORS, "Access-Control-Max-Age": "86400"})
        scope = request.scope
        host = request.headers.get("host")
        if host is None or not host_allowed(host, self.allowed_hosts):
            return JSONResponse({"error": "Host is not allowed"}, status_code=403, headers=CORS)
        base = resource_url(scope.get("scheme", "http"), host, scope.get("root_path") or "", "")
        offered = () if self.versions_now is None else tuple(self.versions_now())
        key = (kind, base, offered)  # a version retired (or back after a brownout): a new card
        answer = self._answers.get(key)
        if answer is None:
            document = self.card(base, host) if kind == "card" else self.catalog(base, host)
            body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            answer = self._answers.remember(key, (body, etag), len(body))
        body, etag = answer
        headers = {**CORS, "Cache-Control": f"public, max-age={MAX_AGE_S}", "ETag": etag}
        if etag_matches(request.headers.get("if-none-match"), etag):
            return Response(status_code=304, headers=headers)
        media = CARD_TYPE if kind == "card" else CATALOG_TYPE
        return Response(body, media_type=media, headers=headers)


def etag_matches(header: str | None, etag: str) -> bool:
    """RFC 9110 If-None-Match: ``*`` or a list of (weakly compared) entity tags."""
    if header is None:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",")]
    return "*" in tags or etag in tags


def default_name(host: str, server: str) -> str:
    """``com.example.mcp/<server>`` from a host ``mcp.example.com[:port]``: the reverse-DNS
    name the card needs when ``MCP_SERVER_CARD_NAME`` does not give one."""
    name = host.rpartition(":")[0] if host.count(":") == 1 else host
    if name.startswith("["):  # [v6 address]:port
        name = name[1:].partition("]")[0]
    try:  # an address has no domain to reverse: its digits, as one label
        address = ipaddress.ip_address(name)
    except ValueError:
        address = None
    if address is not None:
        namespace = (
            "localhost" if address.is_loopback else "ip-" + re.sub(r"[.:]+", "-", str(address))
        )
        return f"{namespace}/{_NOT_NAME.sub('-', server).strip('-') or 'server'}"
    labels = [label for label in re.split(r"[^a-zA-Z0-9-]+", name.lower()) if label]
    namespace = ".".join(reversed(labels)) or "localhost"
    return f"{namespace}/{_NOT_NAME.sub('-', server).strip('-') or 'server'}"
