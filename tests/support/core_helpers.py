"""Helpers shared by the tests: a recording exchange, a Context factory, the tool that makes
a tool list change, a transport that keeps what is written to it, and an ASGI scope for
calling the app directly."""

import asyncio
from typing import Any

from server.catalog import Catalog
from server.context import Context, InputRequest


class RecordingExchange:
    """An Exchange that records what a Context sends and answers from a fixed dict."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.asked: list[dict[str, InputRequest]] = []
        self.answers = answers or {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.sent.append((method, params))

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        self.asked.append(requests)
        return {key: request.parse(self.answers[key]) for key, request in requests.items()}

    def close_stream(self) -> None:
        self.sent.append(("<close-stream>", {}))


def make_context(exchange: Any = None, **overrides: Any) -> Context:
    fields: dict[str, Any] = {
        "exchange": exchange if exchange is not None else RecordingExchange(),
        "method": "tools/call",
        "request_id": 1,
        "era": "modern",
        "protocol_version": "2026-07-28",
        "client_capabilities": {},
    }
    fields.update(overrides)
    return Context(**fields)


def add_toggle_tool(catalog: Catalog, name: str = "toggle_tool") -> None:
    """A tool that adds the tool ``extra`` when it is missing and removes it when it is there:
    a tool list change on every call (answers "added" or "removed")."""

    async def toggle() -> str:
        """Adds or removes the tool `extra`."""
        if catalog.remove_tool("extra"):
            return "removed"

        async def extra() -> str:
            """Here only between two toggles."""
            return "extra"

        catalog.tool(extra)
        return "added"

    catalog.tool(toggle, name=name)


class FakeTransport(asyncio.Transport):
    """A connection's transport that keeps each write (one bytes object per call)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.reading = True

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000)}.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def post_scope(headers: list[tuple[bytes, bytes]], path: str = "/mcp") -> dict[str, Any]:
    """An ASGI HTTP scope of a POST to ``path`` from 127.0.0.1, as a server would hand it to
    the app (for tests that drive the app's own receive and send)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
