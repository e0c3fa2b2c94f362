"""The 2024-11-05 HTTP+SSE transport's ``endpoint`` event, for tests that speak that wire raw.

A ``GET /sse`` stream opens with one ``endpoint`` event naming where to POST; the answers follow
on the same stream. :func:`endpoint_of` (``aiter_lines()``) and :func:`endpoint_of_blocking`
(``iter_lines()``) read that first event and leave the lines to be read on; :func:`sse_endpoint`
opens a stream only for the URL it names; :func:`sse_get_scope` is the ASGI scope of the GET, for
tests that drive the app without httpx. ``mcp_client.py`` speaks Streamable HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx

from tests.support.core_helpers import post_scope


class _EndpointEvent:
    """The first event's fields, line by line (comments and blank lines before it skipped)."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def feed(self, line: str) -> str | None:
        """The URL once the event is whole, else None."""
        if line == "":
            if not self.fields:
                return None
            assert self.fields.get("event") == "endpoint", f"not the endpoint event: {self.fields}"
            return self.fields["data"]
        if not line.startswith(":"):
            name, _, value = line.partition(":")
            self.fields[name] = value.removeprefix(" ")
        return None


async def endpoint_of(lines: AsyncIterator[str], limit: float = 5) -> str:
    """The URL the stream's ``endpoint`` event names (within ``limit`` seconds)."""
    event = _EndpointEvent()
    with anyio.fail_after(limit):
        async for line in lines:
            if (url := event.feed(line)) is not None:
                return url
    raise AssertionError("the stream ended before its endpoint event")


def endpoint_of_blocking(lines: Iterator[str]) -> str:
    """The same from a synchronous httpx stream (``httpx.stream``)."""
    event = _EndpointEvent()
    for line in lines:
        if (url := event.feed(line)) is not None:
            return url
    raise AssertionError("the stream ended before its endpoint event")


def sse_endpoint(url: str, headers: dict[str, str] | None = None, timeout: float = 10) -> str:
    """The URL the ``endpoint`` event of a ``GET`` on ``url`` names (the stream then closed)."""
    sent = {"Accept": "text/event-stream", **(headers or {})}
    with httpx.stream("GET", url, headers=sent, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        return endpoint_of_blocking(response.iter_lines())


def sse_get_scope(host: bytes = b"127.0.0.1:8000", path: str = "/sse") -> dict[str, Any]:
    """The ASGI scope of a ``GET /sse`` from 127.0.0.1, for a test that calls the app itself."""
    scope = post_scope([(b"host", host), (b"accept", b"text/event-stream")], path)
    return {**scope, "method": "GET", "server": ("127.0.0.1", 8000)}
