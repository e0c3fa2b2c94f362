"""OAuth 2.0 Protected Resource Metadata (RFC 9728): the document and the URLs it lives at.

Clients find the authorization server through this document: the 401 challenge names its URL
(``resource_metadata=``), and the app serves it at both ``/.well-known/oauth-protected-resource``
and ``/.well-known/oauth-protected-resource<MCP_PATH>`` (paths below the app's root, see
:func:`metadata_paths`). Behind a prefix (``MCP_ROOT_PATH=/api``) the app can only answer below
that prefix, so the challenge points to ``/api/.well-known/oauth-protected-resource/mcp``; the
RFC's origin-root location (``/.well-known/oauth-protected-resource/api/mcp``) is the proxy's
to route, if wanted. Mounted in a host app (``app.mount("/ai", mcp)``), the prefix comes from the
request's ASGI ``root_path`` the same way: ``/ai/.well-known/oauth-protected-resource/mcp``.
Which document this configuration serves is decided from the settings in
:func:`server.security.gate.protected_resource_document`.
"""

from __future__ import annotations

from typing import Any

WELL_KNOWN = "/.well-known/oauth-protected-resource"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def resource_metadata(
    resource: str, authorization_servers: list[str], scopes_supported: list[str]
) -> dict[str, Any]:
    """The metadata document; MCP requires at least one authorization server."""
    if not resource:
        raise ValueError("the protected-resource metadata needs the resource URI")
    if not authorization_servers:
        raise ValueError("the protected-resource metadata needs an authorization server")
    document: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": list(dict.fromkeys(authorization_servers)),
        "bearer_methods_supported": ["header"],
    }
    if scopes_supported:
        document["scopes_supported"] = sorted(set(scopes_supported))
    return document


def metadata_paths(path: str = "/mcp") -> tuple[str, str]:
    """The two app paths (below the root path) that serve the document for endpoint ``path``."""
    return WELL_KNOWN, WELL_KNOWN + path


def metadata_url(scheme: str, host: str, root_path: str = "", path: str = "/mcp") -> str:
    """The absolute URL of the document for the ``WWW-Authenticate`` challenge.

    ``scheme`` and ``host`` are the request's (the ASGI scope's scheme and Host header after
    trusted-proxy handling, :mod:`server.security.forwarded`), ``root_path`` is where the app
    answers (the request's ASGI ``root_path``: ``MCP_ROOT_PATH``, a forwarded prefix, or a host
    app's mount prefix) and ``path`` is ``MCP_PATH``. A default port (80 for http, 443 for
    https) is left out.
    """
    return f"{origin(scheme, host)}{root_path.rstrip('/')}{WELL_KNOWN}{path}"


def resource_url(scheme: str, host: str, root_path: str = "", path: str = "/mcp") -> str:
    """The MCP endpoint's URL as the client used it: the ``resource`` of the metadata when no
    setting pins one (same parts as :func:`metadata_url`)."""
    return f"{origin(scheme, host)}{root_path.rstrip('/')}{path}"


def origin(scheme: str, host: str) -> str:
    """``scheme://host``, lower-case, without the scheme's default port."""
    scheme = scheme.lower()
    host = host.strip().lower()
    name, colon, port = host.rpartition(":")
    if colon and name and _DEFAULT_PORTS.get(scheme) == port:
        host = name  # "[::1]:443" -> "[::1]"; IPv6 literals are bracketed in a Host header
    return f"{scheme}://{host}"
