"""The one test client: message builders, headers, an SSE parser and small clients for both eras.

Tests build requests and read event streams only through this module, so the wire rules a test
relies on (the modern ``_meta`` keys and the headers mirroring the body, the legacy
``initialize`` and session headers, SSE framing) live in one place. Tests whose subject is a
malformed ``_meta`` or raw bytes still write those by hand: that is what they test.
``tests/test_support.py`` checks this.
It is one module past 400 lines on purpose: a test imports its whole client from one place.
"""

import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
BOTH = "application/json, text/event-stream"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"
SUB_ID = "io.modelcontextprotocol/subscriptionId"
CLIENT_INFO = {"name": "legacy-test-client", "version": "1"}
# Methods whose Mcp-Name header mirrors a body field (server/protocol.py NAME_FIELD_BY_METHOD),
# written out here so a change to the server's table cannot silently change what tests send.
NAME_FIELD = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


# -- messages -----------------------------------------------------------------------------------


def modern_meta(
    capabilities: dict[str, Any] | None = None,
    client_info: dict[str, Any] | None = None,
    version: str = MODERN_VERSION,
    **extra: Any,
) -> dict[str, Any]:
    """The ``_meta`` a modern request carries; ``extra`` entries (progressToken, ...) added."""
    meta: dict[str, Any] = {META_VERSION: version, META_CAPABILITIES: capabilities or {}}
    if client_info is not None:
        meta[META_INFO] = client_info
    meta.update(extra)
    return meta


def modern(
    method: str,
    params: dict[str, Any] | None = None,
    id: Any = 1,
    *,
    capabilities: dict[str, Any] | None = None,
    client_info: dict[str, Any] | None = None,
    version: str = MODERN_VERSION,
    **meta: Any,
) -> dict[str, Any]:
    """A modern request: ``params._meta`` names the version and capabilities (plus ``meta``)."""
    body = dict(params or {})
    body["_meta"] = {
        **modern_meta(capabilities, client_info, version, **meta),
        **body.get("_meta", {}),
    }
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": body}


def legacy(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    """A legacy request: no ``_meta`` of its own (params always present, possibly empty)."""
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}


def initialize_params(
    version: Any = LEGACY_VERSION,
    capabilities: dict[str, Any] | None = None,
    client_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The params of a legacy ``initialize``; ``version`` may be anything (negotiation tests)."""
    return {
        "protocolVersion": version,
        "capabilities": capabilities if capabilities is not None else {},
        "clientInfo": client_info if client_info is not None else CLIENT_INFO,
    }


def initialize(
    version: Any = LEGACY_VERSION,
    capabilities: dict[str, Any] | None = None,
    client_info: dict[str, Any] | None = None,
    id: Any = 0,
) -> dict[str, Any]:
    """A legacy ``initialize`` request, the one message that opens a session."""
    return legacy("initialize", initialize_params(version, capabilities, client_info), id)


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool_call(
    name: str, arguments: dict[str, Any] | None = None, token: Any = None, id: Any = 1
) -> dict[str, Any]:
    """A legacy tools/call, with a progress token when one is given."""
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return legacy("tools/call", params, id)


# -- headers ------------------------------------------------------------------------------------


def _apply(headers: dict[str, str], extra: dict[str, str | None]) -> dict[str, str]:
    """``extra`` on top of ``headers``: ``Last_Event_ID`` means ``Last-Event-ID``; None removes."""
    for key, value in extra.items():
        name = key.replace("_", "-")
        for existing in [k for k in headers if k.lower() == name.lower()]:
            del headers[existing]
        if value is not None:
            headers[name] = value
    return headers


def modern_headers(
    message: dict[str, Any], accept: str = BOTH, **extra: str | None
) -> dict[str, str]:
    """The headers mirroring a modern request: version, method and (where the method has one)
    the name. ``extra`` adds or (with None) removes headers."""
    params = message.get("params") or {}
    headers = {"Content-Type": "application/json", "Accept": accept}
    meta = params.get("_meta")
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    # A body with a malformed version still gets a valid header: the body is the test's subject.
    headers["MCP-Protocol-Version"] = version if isinstance(version, str) else MODERN_VERSION
    headers["Mcp-Method"] = message["method"]
    name_field = NAME_FIELD.get(message["method"])
    if name_field is not None and params.get(name_field) is not None:
        headers["Mcp-Name"] = str(params[name_field])
    return _apply(headers, extra)


def legacy_headers(
    session_id: str | None = None,
    version: str | None = LEGACY_VERSION,
    accept: str = BOTH,
    **extra: str | None,
) -> dict[str, str]:
    """A legacy client's headers: the session (once it has one) and, from 2025-06-18 on, the
    negotiated version."""
    headers = {"Content-Type": "application/json", "Accept": accept}
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    if version is not None and version >= "2025-06-18":
        headers["MCP-Protocol-Version"] = version
    return _apply(headers, extra)


# -- SSE ----------------------------------------------------------------------------------------


@dataclass
class Frame:
    """One SSE event as written: its id, data (empty for priming) and retry."""

    id: str | None
    data: str
    retry: int | None

    @property
    def message(self) -> dict[str, Any] | None:
        return json.loads(self.data) if self.data else None


class _Framer:
    """Turns SSE lines into frames, checking each line is one this server writes."""

    def __init__(self) -> None:
        self.fields: dict[str, list[str]] = {}
        self.comments = 0

    def feed(self, line: str) -> Frame | None:
        if line == "":
            if not self.fields:
                return None
            fields, self.fields = self.fields, {}
            retry = fields.get("retry")
            return Frame(
                fields["id"][-1] if "id" in fields else None,
                "\n".join(fields.get("data", [])),
                int(retry[-1]) if retry else None,
            )
        if line.startswith(":"):
            self.comments += 1
            return None
        name, _, value = line.partition(":")
        assert name in ("id", "data", "retry", "event"), line
        if name == "event":
            assert value == " message", line
        self.fields.setdefault(name, []).append(value.removeprefix(" "))
        return None


def frames_of(text: str) -> list[Frame]:
    """Every event of a whole SSE body already read."""
    framer = _Framer()
    frames = [frame for line in text.splitlines() if (frame := framer.feed(line)) is not None]
    if framer.fields:
        frames.append(framer.feed("") or Frame(None, "", None))
    return frames


def messages_of(text: str) -> list[dict[str, Any]]:
    """Every JSON-RPC message of a whole SSE body already read (priming events skipped)."""
    return [frame.message for frame in frames_of(text) if frame.message is not None]


class SSE:
    """An SSE response read event by event as it streams (httpx ``client.stream``)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self._framer = _Framer()
        self.frames: list[Frame] = []

    @property
    def comments(self) -> int:
        return self._framer.comments

    async def next_frame(self, limit: float | None = 3) -> Frame | None:
        """The next event, or None when the response ends."""
        with anyio.fail_after(limit):
            async for line in self._lines:
                frame = self._framer.feed(line)
                if frame is not None:
                    self.frames.append(frame)
                    return frame
        assert not self._framer.fields, "the response ended inside an event"
        return None

    async def next(self, limit: float | None = 3) -> dict[str, Any] | None:
        """The next JSON-RPC message (priming events skipped), or None at the end."""
        while (frame := await self.next_frame(limit)) is not None:
            if frame.message is not None:
                return frame.message
        return None

    async def message(self, limit: float | None = 3) -> dict[str, Any]:
        """The next JSON-RPC message; the test fails when the stream ends first."""
        message = await self.next(limit)
        assert message is not None, "the stream ended before its next message"
        return message

    async def rest(self, limit: float | None = 3) -> list[dict[str, Any]]:
        found = []
        while (message := await self.next(limit)) is not None:
            found.append(message)
        return found

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [frame.message for frame in self.frames if frame.message is not None]


async def sse_frames(response: httpx.Response, limit: float | None = None) -> AsyncIterator[Frame]:
    """Each event of a streaming response as it arrives (``limit``: seconds to wait for each)."""
    stream = SSE(response)
    while (frame := await stream.next_frame(limit)) is not None:
        yield frame


async def sse_messages(
    response: httpx.Response, limit: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Each JSON-RPC message of a streaming response as it arrives (priming skipped)."""
    stream = SSE(response)
    while (message := await stream.next(limit)) is not None:
        yield message


def sse_messages_blocking(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The same for a synchronous httpx stream (``httpx.stream``), e.g. in a plain test."""
    return sse_messages_of_lines(response.iter_lines())


def sse_messages_of_lines(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Each JSON-RPC message of SSE lines as they are read, line endings included or not: a
    subprocess's output (``curl -N``), say."""
    framer = _Framer()
    for line in lines:
        frame = framer.feed(line.rstrip("\r\n"))
        if frame is not None and frame.message is not None:
            yield frame.message
    assert not framer.fields, "the stream ended inside an event"


# -- clients ------------------------------------------------------------------------------------


class ModernClient:
    """Modern requests over one httpx client: every request carries its ``_meta`` and headers."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        capabilities: dict[str, Any] | None = None,
        client_info: dict[str, Any] | None = None,
        path: str = "/mcp",
    ) -> None:
        self.http = http
        self.capabilities = capabilities
        self.client_info = client_info
        self.path = path
        self._ids = itertools.count(1)

    def message(
        self, method: str, params: dict[str, Any] | None = None, **meta: Any
    ) -> dict[str, Any]:
        return modern(
            method,
            params,
            next(self._ids),
            capabilities=self.capabilities,
            client_info=self.client_info,
            **meta,
        )

    async def post(self, message: Any, accept: str = BOTH, **headers: str | None) -> httpx.Response:
        return await self.http.post(
            self.path,
            content=json.dumps(message),
            headers=modern_headers(message, accept, **headers),
        )

    async def call(
        self, method: str, params: dict[str, Any] | None = None, **meta: Any
    ) -> dict[str, Any]:
        """A request answered with plain JSON; the whole JSON-RPC response."""
        message = self.message(method, params, **meta)
        response = await self.post(message, accept="application/json")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert body["id"] == message["id"]
        return body

    @contextlib.asynccontextmanager
    async def stream(
        self, message: dict[str, Any], accept: str = BOTH, **headers: str | None
    ) -> AsyncIterator[SSE]:
        async with self.http.stream(
            "POST",
            self.path,
            content=json.dumps(message),
            headers=modern_headers(message, accept, **headers),
        ) as response:
            assert response.status_code == 200, (await response.aread()).decode()
            assert response.headers["content-type"] == "text/event-stream"
            yield SSE(response)


class LegacySession:
    """One legacy session, spoken the way a conforming client does."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        version: str = LEGACY_VERSION,
        capabilities: dict[str, Any] | None = None,
        path: str = "/mcp",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.http = http
        self.version = version
        self.capabilities = capabilities if capabilities is not None else {}
        self.path = path
        self.sent_headers = dict(headers or {})  # on every request: ``Authorization``, say
        self.session_id: str | None = None
        self.init_result: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def headers(self, accept: str = BOTH, **extra: str | None) -> dict[str, str]:
        return legacy_headers(
            self.session_id, self.version, accept, **{**self.sent_headers, **extra}
        )

    async def initialize(self, *, notify: bool = True) -> "LegacySession":
        """``initialize``, then ``notifications/initialized`` unless ``notify`` is False (a test
        of what ``initialize`` alone does)."""
        message = initialize(self.version, self.capabilities)
        response = await self.http.post(
            self.path, json=message, headers=legacy_headers(version=None, **self.sent_headers)
        )
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        self.init_result = response.json()["result"]
        assert self.init_result["protocolVersion"] == self.version
        if notify:
            initialized = await self.post(notification("notifications/initialized"))
            assert initialized.status_code == 202
        return self

    async def post(self, message: Any, accept: str = BOTH, **headers: str | None) -> httpx.Response:
        return await self.http.post(
            self.path, content=json.dumps(message), headers=self.headers(accept, **headers)
        )

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A request answered with plain JSON; the whole JSON-RPC response."""
        message_id = self.next_id()
        response = await self.post(legacy(method, params, message_id))
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        body: dict[str, Any] = response.json()
        assert body["id"] == message_id
        return body

    @contextlib.asynccontextmanager
    async def stream(self, message: dict[str, Any]) -> AsyncIterator[SSE]:
        async with self.http.stream(
            "POST", self.path, content=json.dumps(message), headers=self.headers()
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            yield SSE(response)

    @contextlib.asynccontextmanager
    async def get(self, last_event_id: str | None = None) -> AsyncIterator[SSE]:
        headers = self.headers("text/event-stream", Content_Type=None)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        async with self.http.stream("GET", self.path, headers=headers) as response:
            assert response.status_code == 200, (await response.aread()).decode()
            assert response.headers["content-type"] == "text/event-stream"
            yield SSE(response)


async def legacy_session(
    http: httpx.AsyncClient, version: str = LEGACY_VERSION, **options: Any
) -> LegacySession:
    """An initialized legacy session."""
    return await LegacySession(http, version, **options).initialize()
