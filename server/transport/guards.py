"""HTTP admission rules for the MCP endpoint, as pure functions over header values.

Header sizes first (:func:`check_header_sizes`, 431): what an ASGI server hands over is not
trusted to be bounded (uvicorn's httptools accepts megabytes).
Host and Origin allow-lists (DNS-rebinding protection), the Accept negotiation (lenient: only
refuse when neither JSON nor SSE is acceptable), and the Content-Type check. Each failure is an
:class:`~server.errors.McpError` with its HTTP status, so the endpoint answers every refusal with
a JSON-RPC error body. A refused Host is also logged (one line, the value cut short and, like
every client value on a log line, escaped by :mod:`server.logs`): it is either an attack
(DNS rebinding) or a deployment whose ``MCP_ALLOWED_HOSTS`` misses its public name, and
either way the operator should see it without reading the records.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

from server.errors import InvalidRequest
from server.logs import bounded
from server.memo import BoundedMemo, memoized

log = logging.getLogger(__name__)
# What a log line or an error message repeats of a refused Host value.
MAX_HOST_SHOWN = 200

_HOST = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[a-z0-9._\-]+)(?::(?P<port>[0-9]{1,5}))?")


def check_header_sizes(
    headers: Iterable[tuple[bytes, bytes]], max_bytes: int, max_count: int, max_value: int
) -> None:
    """431 for more than ``max_count`` headers, a value past ``max_value`` bytes, or more than
    ``max_bytes`` of names and values together."""
    count = total = 0
    for name, value in headers:
        count += 1
        total += len(name) + len(value)
        if len(value) > max_value:
            raise _too_large(f"a header value is larger than {max_value} bytes")
    if count > max_count:
        raise _too_large(f"more than {max_count} headers")
    if total > max_bytes:
        raise _too_large(f"headers larger than {max_bytes} bytes in all")


def _too_large(why: str) -> InvalidRequest:
    return InvalidRequest(f"Request header fields too large: {why}", http_status=431)


def split_host(value: str) -> tuple[str, str | None] | None:
    """("host", "port") from a Host header value (IPv6 keeps its brackets); None if malformed."""
    found = _HOST.fullmatch(value.strip().lower())
    return (found["host"], found["port"]) if found else None


def host_allowed(value: str, allowed: Sequence[str]) -> bool:
    """``allowed`` holds "host" (any port), "host:port", or "*" (anything)."""
    allowed = tuple(allowed)
    key = (value, allowed)
    verdict = _HOST_VERDICTS.get(key)
    if verdict is None:
        # The allow-list is the settings' own tuple, shared by every entry: only the value
        # is the client's.
        verdict = _HOST_VERDICTS.remember(key, _host_allowed(value, allowed), len(value))
    return verdict


# Hosts repeat: each (value, allow-list) is parsed once.
_HOST_VERDICTS: BoundedMemo[tuple[str, tuple[str, ...]], bool] = BoundedMemo(1024)


def _host_allowed(value: str, allowed: tuple[str, ...]) -> bool:
    if "*" in allowed:
        return True
    parsed = split_host(value)
    if parsed is None:
        return False
    host, port = parsed
    for entry in allowed:
        entry_parsed = split_host(entry)
        if entry_parsed is None:
            continue
        entry_host, entry_port = entry_parsed
        if entry_host == host and (entry_port is None or entry_port == port):
            return True
    return False


def check_host(host: str | None, allowed: Sequence[str]) -> None:
    if host is None or not host_allowed(host, allowed):
        shown = None if host is None else bounded(host, MAX_HOST_SHOWN)
        raise InvalidRequest(f"Host {shown!r} is not allowed", http_status=403)


class HostGuard:
    """:func:`check_host` for one allow-list, on the raw header, remembering the raw values it
    allowed (small ones, a bounded number): a client sends the same Host on every request, so
    the endpoint pays a dict lookup instead of decoding and parsing it each time."""

    KEPT = 256

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = tuple(allowed)
        # Read by the endpoint before it calls check: a lookup, no call.
        self.allowed_raw: BoundedMemo[bytes, bool] = BoundedMemo(self.KEPT)

    def check(self, raw: bytes | None) -> None:
        if raw is not None and raw in self.allowed_raw:
            return
        host = None if raw is None else raw.decode("latin-1")
        try:
            check_host(host, self.allowed)
        except InvalidRequest:
            shown = "no Host" if host is None else f"Host {bounded(host, MAX_HOST_SHOWN)!r}"
            log.warning("Refused a request with %s: not in MCP_ALLOWED_HOSTS", shown)
            raise
        if raw is not None:
            self.allowed_raw.remember(raw, True)


def check_origin(
    origin: str | None, allowed_hosts: Sequence[str], allowed_origins: Sequence[str]
) -> None:
    """A present Origin must be an allowed origin, or name an allowed host; absent is fine."""
    if origin is None:
        return
    if origin in allowed_origins or "*" in allowed_origins:
        return
    # Parsed here rather than by urllib's urlsplit, which keeps its last 128 answers in an
    # lru_cache whatever their size (megabytes for a client's 1 MB Origin, each).
    scheme, separator, rest = origin.partition("://")
    netloc = rest.partition("/")[0].partition("?")[0].partition("#")[0]
    if (
        separator
        and scheme.lower() in ("http", "https")
        and netloc
        and host_allowed(netloc, allowed_hosts)
    ):
        return
    raise InvalidRequest(f"Origin {origin!r} is not allowed", http_status=403)


def _media_ranges(accept: str) -> dict[str, float]:
    """Media range -> quality; a malformed quality counts as 1 (be lenient)."""
    ranges: dict[str, float] = {}
    for item in accept.split(","):
        media, *params = (part.strip().lower() for part in item.split(";"))
        if not media:
            continue
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 1.0
        ranges[media] = quality
    return ranges


def _acceptable(ranges: dict[str, float], media: str) -> bool:
    # RFC 9110 12.5.1: the most specific matching range decides.
    kind = media.split("/", maxsplit=1)[0]
    for candidate in (media, f"{kind}/*", "*/*"):
        if candidate in ranges:
            return ranges[candidate] > 0
    return False


@memoized(256)  # a client sends the same value every time
def negotiate(accept: str | None) -> tuple[bool, bool]:
    """(JSON acceptable, SSE acceptable); 406 when neither is."""
    if accept is None or not accept.strip():
        return True, True
    ranges = _media_ranges(accept)
    json_ok = _acceptable(ranges, "application/json")
    sse_ok = _acceptable(ranges, "text/event-stream")
    if not (json_ok or sse_ok):
        raise InvalidRequest(
            "Not acceptable: accept application/json or text/event-stream", http_status=406
        )
    return json_ok, sse_ok


@memoized(256)  # a client sends the same value every time
def check_content_type(content_type: str | None) -> bool:
    """True, or 415 for anything but JSON in UTF-8 (True so that the memo keeps it)."""
    media, *params = (part.strip().lower() for part in (content_type or "").split(";"))
    charset_ok = all(
        not p.startswith("charset=") or p in ("charset=utf-8", 'charset="utf-8"') for p in params
    )
    if media != "application/json" or not charset_ok:
        raise InvalidRequest(
            "Unsupported media type: send Content-Type: application/json (UTF-8)", http_status=415
        )
    return True


# Read by the endpoint before it calls answerable: a lookup, no call.
ANSWERABLE: BoundedMemo[tuple[bytes | None, bytes | None], tuple[bool, bool]] = BoundedMemo(256)


def answerable(content_type: bytes | None, accept: bytes | None) -> tuple[bool, bool]:
    """A POST's Content-Type checked (415) and its Accept negotiated (406): (JSON acceptable,
    SSE acceptable). One lookup for the pair a client sends on every request."""
    key = (content_type, accept)
    found = ANSWERABLE.get(key)
    if found is None:
        check_content_type(None if content_type is None else content_type.decode("latin-1"))
        found = ANSWERABLE.remember(
            key, negotiate(None if accept is None else accept.decode("latin-1"))
        )
    return found
