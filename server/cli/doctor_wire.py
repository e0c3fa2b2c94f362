"""What ``python -m server doctor`` says on the wire: requests of both eras and of HTTP+SSE,
and the SSE events it reads back, over httpx (imported by the doctor alone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from server.cli.call import Event, EventParser, response_of
from server.modern.headers import modern_request
from server.protocol import LEGACY_VERSIONS, TOOLS_CALL

LEGACY = LEGACY_VERSIONS[0]
SSE_VERSION = LEGACY_VERSIONS[-1]
CLIENT = {"name": "mcp-http-server-doctor", "version": "1"}


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """The SSE events of ``response`` as they arrive (comments skipped)."""
    parser = EventParser()
    async for text in response.aiter_text():
        for event in parser.feed(text):
            yield event


def modern_call(name: str, arguments: dict[str, Any], **meta: Any) -> tuple[Any, dict[str, str]]:
    params = {"name": name, "arguments": arguments, "_meta": meta}
    return modern_request(TOOLS_CALL, params, client_info=CLIENT)


def modern_request_discover() -> tuple[Any, dict[str, str]]:
    return modern_request("server/discover", {}, client_info=CLIENT)


def legacy_message(method: str, params: dict[str, Any] | None = None, id: int | None = 1) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id is not None:
        message["id"] = id
    return message


def initialize(version: str = LEGACY) -> Any:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT}
    return legacy_message("initialize", params, 0)


def legacy_headers(session: str | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers["Mcp-Session-Id"] = session
        headers["MCP-Protocol-Version"] = LEGACY
    return headers


async def answer_of(response: httpx.Response, request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC answer to ``request_id`` in a JSON or SSE response, read to its end (as
    ``python -m server call`` reads one: :func:`server.cli.call.response_of`)."""
    body = await response.aread()
    try:
        return response_of(response.headers.get("content-type", ""), body, request_id)
    except ValueError:
        return None


async def open_legacy_session(client: httpx.AsyncClient, url: str) -> str:
    """A 2025-11-25 session: initialize and the initialized notification; its id."""
    opened = await client.post(url, json=initialize(), headers=legacy_headers())
    session = opened.headers.get("mcp-session-id")
    if opened.status_code != 200 or not session:
        raise RuntimeError(f"initialize answered HTTP {opened.status_code} without a session")
    await client.post(
        url,
        json=legacy_message("notifications/initialized", id=None),
        headers=legacy_headers(session),
    )
    return str(session)


def result_text(answer: dict[str, Any] | None) -> str:
    """A tool result's text, or a description of what came instead."""
    if answer is None:
        return "no answer"
    if "error" in answer:
        return f"error {answer['error'].get('message', answer['error'])!s}"
    result = answer.get("result") or {}
    if result.get("isError"):
        texts = [item.get("text", "") for item in result.get("content", [])]
        return "tool error " + " ".join(texts)
    return "ok"


def structured(answer: dict[str, Any] | None) -> dict[str, Any]:
    if answer is None or not isinstance(answer.get("result"), dict):
        return {}
    value = answer["result"].get("structuredContent")
    return value if isinstance(value, dict) else {}
