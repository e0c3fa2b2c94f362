"""The request as the client made it, from a trusted proxy's headers: scheme, host and prefix.

A proxy in ``MCP_TRUSTED_PROXIES`` may say how the client reached it with RFC 7239
``Forwarded`` (``for``, ``proto``, ``host``) or ``X-Forwarded-Proto``, ``-Host``, ``-Port``
and ``-Prefix``; both give the same result, ``Forwarded`` winning where both speak. Of a
``Forwarded`` list the element read is the first from the right whose ``for`` is not itself
trusted; of an ``X-Forwarded-*`` comma list, the last value. A value that is not what the
header must hold is :class:`MalformedForwarding` (400 naming the header), never a guess.
:func:`apply` writes the result into the ASGI scope once per request (scheme, Host,
``root_path``, ``path``), so every URL the server writes and the Host allow-list see the
client's request. From an untrusted peer none of this is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from server.asgi import Headers, Scope
from server.security.networks import Network, in_networks

# The headers that carry forwarded identity; a request with none of them costs one set test.
FORWARDING = frozenset(
    (b"forwarded", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port",
     b"x-forwarded-prefix")
)  # fmt: skip
MAX_PREFIX = 256

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
# One pair of an element; unquoted values also take ':' and brackets, which some proxies send
# unquoted (RFC 7239 wants them quoted).
_PAIR = re.compile(rf'\s*({_TOKEN})\s*=\s*("(?:[^"\\]|\\.)*"|[!#$%&\'*+.^_`|~0-9A-Za-z:\[\]-]+)\s*')
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._~!$&'()*+=%-]+)(?::([0-9]{1,5}))?")
_PREFIX = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+/?|/")
_NODE = re.compile(r"\[([0-9a-fA-F:.]+)\](?::[0-9]+)?|([0-9.]+)(?::[0-9]+)?|(.+)")


class MalformedForwarding(ValueError):
    """A trusted proxy's forwarding header holds what it must not; the message names it."""


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What a trusted proxy said about the client's request (None: not said)."""

    scheme: str | None = None
    host: str | None = None  # host[:port], lower-case, as a Host header holds it
    prefix: str | None = None  # "" for "/", else "/a/b" without a trailing slash
    clients: tuple[str, ...] | None = None  # Forwarded's for= chain, as X-Forwarded-For


def forwarding(headers: Headers) -> bool:
    """Whether the request carries any forwarding header at all."""
    return not FORWARDING.isdisjoint(headers)


def read(headers: Headers, trusted: tuple[Network, ...]) -> Forwarded:
    """What the forwarding headers say (the caller has checked that the peer is trusted)."""
    scheme = host = port = prefix = None
    clients: tuple[str, ...] | None = None
    raw = headers.get(b"x-forwarded-proto")
    if raw is not None:
        scheme = _scheme(_last(raw), "X-Forwarded-Proto")
    raw = headers.get(b"x-forwarded-host")
    if raw is not None:
        host = _host(_last(raw), "X-Forwarded-Host")
    raw = headers.get(b"x-forwarded-port")
    if raw is not None:
        port = _port(_last(raw), "X-Forwarded-Port")
    raw = headers.get(b"x-forwarded-prefix")
    if raw is not None:
        prefix = _prefix(_last(raw))
    raw = headers.get(b"forwarded")
    if raw is not None:
        elements = parse_forwarded(raw.decode("latin-1"))
        chosen = _client_side(elements, trusted)
        if "proto" in chosen:
            scheme = _scheme(chosen["proto"], "Forwarded proto")
        if "host" in chosen:
            host = _host(chosen["host"], "Forwarded host")
        if all("for" in element for element in elements):
            clients = tuple(_node(element["for"]) for element in elements)
    if port is not None:
        # X-Forwarded-Port applies to the forwarded host, or else to the request's own Host.
        own = headers.get(b"host")
        if host is not None:
            host = with_port(host, port)
        elif own is not None:
            host = with_port(own.decode("latin-1").lower(), port)
    return Forwarded(scheme, host, prefix, clients)


def parse_forwarded(value: str) -> list[dict[str, str]]:
    """RFC 7239 elements, each its pairs by lower-case name, quoted values unquoted."""
    elements: list[dict[str, str]] = []
    element: dict[str, str] = {}
    position, end = 0, len(value)
    while True:
        found = _PAIR.match(value, position)
        if found is None:
            raise MalformedForwarding(
                f"Forwarded header is malformed near {value[position : position + 40]!r} "
                "(RFC 7239: for=...;proto=...;host=..., elements separated by commas)"
            )
        name, item = found[1].lower(), found[2]
        if item.startswith('"'):
            item = re.sub(r"\\(.)", r"\1", item[1:-1])
        if name in element:
            raise MalformedForwarding(f"Forwarded header names {name!r} twice in one element")
        element[name] = item
        position = found.end()
        if position == end:
            elements.append(element)
            return elements
        separator = value[position]
        position += 1
        if separator == ",":
            elements.append(element)
            element = {}
            while position < end and value[position] in " \t,":
                position += 1
            if position == end:
                return elements
        elif separator != ";":
            raise MalformedForwarding(
                f"Forwarded header is malformed at {value[position - 1 : position + 39]!r}"
            )


def with_port(host: str, port: str) -> str:
    """``host`` (a Host value, with or without a port) with ``port`` instead."""
    found = _HOST.fullmatch(host)
    name = found[1] if found else host
    return f"{name}:{port}"


def apply(scope: Scope, forwarded: Forwarded, pinned_root: str) -> str | None:
    """Write ``forwarded`` into ``scope``; returns the forwarded prefix when a pinned root path
    (``MCP_ROOT_PATH``) keeps it from applying and the two differ (for the caller's warning)."""
    if forwarded.scheme is not None:
        scope["scheme"] = forwarded.scheme
    host = forwarded.host
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    if host is not None or forwarded.clients is not None:
        kept = [
            (name, value)
            for name, value in headers
            if not (
                (host is not None and name == b"host")
                or (forwarded.clients is not None and name == b"x-forwarded-for")
            )
        ]
        if host is not None:
            kept.append((b"host", host.encode("latin-1")))
        if forwarded.clients is not None:
            kept.append((b"x-forwarded-for", ", ".join(forwarded.clients).encode("latin-1")))
        scope["headers"] = kept
    prefix = forwarded.prefix
    if prefix is None:
        return None
    if pinned_root:
        return prefix if prefix != pinned_root.rstrip("/") else None
    if prefix:
        scope["root_path"] = prefix + (scope.get("root_path") or "")
        scope["path"] = prefix + scope.get("path", "")
        if "raw_path" in scope and scope["raw_path"] is not None:
            scope["raw_path"] = prefix.encode("latin-1") + scope["raw_path"]
    return None


def _last(raw: bytes) -> str:
    return raw.decode("latin-1").rpartition(",")[2].strip()


def _scheme(value: str, header: str) -> str:
    scheme = value.strip().lower()
    if scheme not in ("http", "https"):
        raise MalformedForwarding(f"{header} must be http or https, not {value[:40]!r}")
    return scheme


def _host(value: str, header: str) -> str:
    host = value.strip().lower()
    found = _HOST.fullmatch(host)
    if found is None or len(host) > 255 or (found[2] is not None and not 0 < int(found[2]) < 65536):
        raise MalformedForwarding(f"{header} is not a host[:port]: {value[:60]!r}")
    return host


def _port(value: str, header: str) -> str:
    if not (value.isascii() and value.isdigit() and len(value) <= 5 and 0 < int(value) < 65536):
        raise MalformedForwarding(f"{header} must be a port number (1-65535), not {value[:40]!r}")
    return str(int(value))


def _prefix(value: str) -> str:
    if len(value) > MAX_PREFIX or _PREFIX.fullmatch(value) is None or "/." in value:
        raise MalformedForwarding(
            f"X-Forwarded-Prefix must be a path such as /api (no query, no dot segments), "
            f"not {value[:60]!r}"
        )
    return value.rstrip("/")


def _node(value: str) -> str:
    """An address from a ``for`` node (``192.0.2.1:80``, ``[2001:db8::1]:80``, ``unknown``)."""
    found = _NODE.fullmatch(value.strip())
    if found is None:
        return value.strip()
    return found[1] or found[2] or found[3]


def _client_side(elements: list[dict[str, str]], trusted: tuple[Network, ...]) -> dict[str, str]:
    for element in reversed(elements):
        node = element.get("for")
        if node is None or not in_networks(_node(node), trusted):
            return element
    return elements[0]
