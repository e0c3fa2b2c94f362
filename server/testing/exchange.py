"""One HTTP request of :class:`server.testing.Client` to the app, through its ASGI callable.

No transport that buffers: an SSE answer is read event by event as the app sends it, so a
legacy server-to-client request can be answered while its call waits, and a listen stream
delivers while it stays open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


class Exchange:
    """One HTTP request to the app: its body goes in, its answer is read as it is sent."""

    def __init__(
        self, on_message: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    ) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.messages: list[dict[str, Any]] = []
        self.ended = asyncio.Event()
        # Set once the answer starts (a stream is open from then on).
        self.started = asyncio.Event()
        self.on_message = on_message
        self._sse = False
        self._pending = b""

    async def send(self, message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {
                name.decode("latin-1"): value.decode("latin-1")
                for name, value in message.get("headers", [])
            }
            self._sse = self.headers.get("content-type", "").startswith("text/event-stream")
            self.started.set()
            return
        if message["type"] != "http.response.body":
            return
        chunk = message.get("body", b"")
        if self._sse:
            self._pending += chunk
            *events, self._pending = self._pending.replace(b"\r\n", b"\n").split(b"\n\n")
            for event in events:
                await self._event(event)
        else:
            self.body += chunk
        if not message.get("more_body", False):
            if not self._sse and self.body:
                self.messages.append(json.loads(self.body))
            self.ended.set()

    async def _event(self, event: bytes) -> None:
        data = b"\n".join(
            line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
        )
        if not data:
            return  # a priming event or a keep-alive
        message = json.loads(data)
        self.messages.append(message)
        if self.on_message is not None:
            await self.on_message(message)

    async def run(
        self,
        app: ASGIApp,
        verb: str,
        message: Mapping[str, Any] | None,
        headers: Mapping[str, str],
        closed: asyncio.Event | None,
    ) -> None:
        """Send the request to ``app`` and read its answer; the client stays connected until the
        answer ends, or until ``closed`` for a stream that does not end by itself."""
        body = b"" if message is None else json.dumps(message).encode()
        raw = [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(body)).encode())]
        raw += [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": verb,
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "root_path": "",
            "query_string": b"",
            "headers": raw,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self._gone(closed)
            return {"type": "http.disconnect"}

        await app(scope, receive, self.send)

    async def _gone(self, closed: asyncio.Event | None) -> None:
        """Until the answer ends or the client closes (``closed``), whichever comes first."""
        if closed is None:
            await self.ended.wait()
            return
        waits = [asyncio.ensure_future(self.ended.wait()), asyncio.ensure_future(closed.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
