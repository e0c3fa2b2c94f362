"""What a retirement says on the wire: the deprecation headers, and the 410 problem details.

Before its sunset an affected answer carries ``Deprecation`` (RFC 9745, ``@<epoch seconds>``),
``Sunset`` (RFC 8594, an HTTP date) and ``Link`` to the migration page
(``rel="deprecation"``) and the successor (``rel="successor-version"``). In a brownout and
after the sunset the request is answered ``410 Gone`` with ``application/problem+json``
(RFC 9457) naming what replaces the item, the sunset and the successor. Pure functions over a
:class:`~server.retirement.plan.Retirement`, so both the endpoint and the HTTP+SSE transport
write the same bytes.
"""

from __future__ import annotations

from datetime import datetime
from email.utils import format_datetime

import orjson

from server.errors import SERVER_UNAVAILABLE, McpError
from server.retirement.plan import Item, Retirement

Header = tuple[bytes, bytes]
PROBLEM_TYPE = b"application/problem+json"


class Retired(McpError):
    """A request for something retired now (a brownout, or past the sunset): 410 on both
    wires, written as :func:`problem` where the answer has not begun."""

    code = SERVER_UNAVAILABLE
    status = 410

    def __init__(
        self, retirement: Retirement, now: datetime, supported_versions: tuple[str, ...]
    ) -> None:
        self.retirement = retirement
        self.headers, self.body = problem(retirement, now, supported_versions)
        what, _ = describe(retirement.item)
        super().__init__(f"Gone: {what} is retired", {"item": retirement.item.name})


def describe(item: Item) -> tuple[str, str]:
    """What the item is, and what a client should use instead."""
    if item.kind == "sse":
        return (
            "the HTTP+SSE transport (GET /sse, protocol 2024-11-05)",
            "Streamable HTTP: POST the same messages to the MCP endpoint",
        )
    if item.kind == "initialize":
        return (
            "the initialize era (protocol 2025-11-25 and older)",
            "protocol 2026-07-28: no initialize, the version and capabilities in params._meta",
        )
    if item.kind == "version":
        return (f"protocol version {item.value}", "a newer protocol version")
    if item.client_feature:
        return (f"the {item.value} client feature", f"a tool that does without {item.value}")
    return (f"the method {item.value}", f"a client that does not send {item.value}")


def deprecation_headers(retirement: Retirement) -> list[Header]:
    """The headers every affected answer carries before the sunset."""
    headers = [
        (b"deprecation", b"@%d" % int(retirement.deprecated.timestamp())),
        (b"sunset", format_datetime(retirement.sunset, usegmt=True).encode()),
    ]
    links = link_values(retirement)
    if links:
        headers.append((b"link", b", ".join(links)))
    return headers


def link_values(retirement: Retirement) -> list[bytes]:
    links = []
    if retirement.link is not None:
        links.append(b'<%s>; rel="deprecation"; type="text/html"' % retirement.link.encode())
    if retirement.successor is not None:
        links.append(b'<%s>; rel="successor-version"' % retirement.successor.encode())
    return links


def problem(
    retirement: Retirement, now: datetime, supported_versions: tuple[str, ...]
) -> tuple[list[Header], bytes]:
    """The 410's whole head (type and length too) and ``application/problem+json`` body."""
    what, instead = describe(retirement.item)
    brownout = now < retirement.sunset
    sunset = retirement.sunset.isoformat().replace("+00:00", "Z")
    when = (
        f"it is switched off for a brownout now and retired for good at {sunset}"
        if brownout
        else f"it was retired at {sunset}"
    )
    if retirement.item.kind in ("version", "initialize"):
        instead = f"{instead} (supported: {', '.join(supported_versions)})"
    body: dict[str, object] = {
        "type": retirement.link or "about:blank",
        "title": f"Gone: {what} is retired",
        "status": 410,
        "detail": f"{what[0].upper()}{what[1:]}: {when}. Use {instead}.",
        "item": retirement.item.name,
        "sunset": sunset,
        "brownout": brownout,
    }
    if retirement.successor is not None:
        body["successor"] = retirement.successor
    if retirement.item.kind in ("version", "initialize"):
        body["supported_versions"] = list(supported_versions)
    encoded = orjson.dumps(body)
    headers = [(b"content-type", PROBLEM_TYPE), (b"content-length", b"%d" % len(encoded))]
    links = link_values(retirement)
    if links:
        headers.append((b"link", b", ".join(links)))
    return headers, encoded
