"""HTTP admission rules for the MCP endpoint, as pure functions over header values.

Host and Origin allow-lists (DNS-rebinding protection), the Accept negotiation (lenient: only
refuse when neither JSON nor SSE is acceptable), and the Content-Type check. Each failure is an
:class:`~server.errors.McpError` with its HTTP status, so the endpoint answers every refusal with
a JSON-RPC error body.

May import: errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from server.errors import InvalidRequest


def split_host(value: str) -> tuple[str, str | None]:
    """("host", "port") from a Host header value; IPv6 literals keep their brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return value, None
        host, rest = value[: end + 1], value[end + 1 :]
        return host, rest[1:] if rest.startswith(":") else None
    host, sep, port = value.rpartition(":")
    return (host, port) if sep and port.isdigit() else (value, None)


def host_allowed(value: str, allowed: Sequence[str]) -> bool:
    """``allowed`` holds "host" (any port), "host:port", or "*" (anything)."""
    if "*" in allowed:
        return True
    host, port = split_host(value)
    for entry in allowed:
        entry_host, entry_port = split_host(entry)
        if entry_host == host and (entry_port is None or entry_port == port):
            return True
    return False


def check_host(host: str | None, allowed: Sequence[str]) -> None:
    if host is None or not host_allowed(host, allowed):
        raise InvalidRequest(f"Host {host!r} is not allowed", http_status=403)


def check_origin(
    origin: str | None, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> None:
    """A present Origin must be an allowed origin, or name an allowed host; absent is fine."""
    if origin is None:
        return
    if origin in allowed_origins or "*" in allowed_origins:
        return
    parts = urlsplit(origin)
    if (
        parts.scheme in ("http", "https")
        and parts.netloc
        and host_allowed(parts.netloc, allowed_hosts)
    ):
        return
    raise InvalidRequest(f"Origin {origin!r} is not allowed", http_status=403)


def _media_ranges(accept: str) -> set[str]:
    ranges = set()
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
            continue
        if media:
            ranges.add(media.lower())
    return ranges


def negotiate(accept: str | None) -> tuple[bool, bool]:
    """(JSON acceptable, SSE acceptable); 406 when neither is."""
    if accept is None or not accept.strip():
        return True, True
    ranges = _media_ranges(accept)
    anything = "*/*" in ranges
    json_ok = anything or "application/json" in ranges or "application/*" in ranges
    sse_ok = anything or "text/event-stream" in ranges or "text/*" in ranges
    if not (json_ok or sse_ok):
        raise InvalidRequest(
            "Not acceptable: accept application/json or text/event-stream", http_status=406
        )
    return json_ok, sse_ok


def check_content_type(content_type: str | None) -> None:
    media, *params = (part.strip().lower() for part in (content_type or "").split(";"))
    charset_ok = all(
        not p.startswith("charset=") or p in ("charset=utf-8", 'charset="utf-8"') for p in params
    )
    if media != "application/json" or not charset_ok:
        raise InvalidRequest(
            "Unsupported media type: send Content-Type: application/json (UTF-8)", http_status=415
        )
