"""The HTTP+SSE transport's pieces that hold no state, beside the transport itself.

Its options, the ``endpoint`` event, forwarding a call's messages to the session's stream, a
POST's ``session_id``, the path under the mount prefix, a request's record opened as the MCP
path opens its own, and the refusal of a request id still running; the transport that uses
them is :mod:`server.transport.legacy_sse`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs

from server.asgi import Headers, Scope, header_text
from server.errors import InvalidRequest
from server.legacy.eventstream import EventStream
from server.legacy.sessions import is_session_id
from server.records.draft import Draft
from server.security.networks import client_address, in_networks
from server.transport.endpoint import McpEndpoint

# What the records of this transport's requests say it is.
TRANSPORT = "sse"


@dataclass(frozen=True, slots=True)
class SseOptions:
    stream_path: str
    messages_path: str
    max_pending: int
    keepalive_s: float
    send_timeout_s: float
    max_queued_bytes: int = 16 * 1024 * 1024


def endpoint_frame(url: str) -> bytes:
    """The stream's first event: where the client posts its messages."""
    return b"event: endpoint\r\ndata: " + url.encode() + b"\r\n\r\n"


def forward(stream: EventStream, deliver: Callable[[bytes], object]) -> None:
    """Hand every message ``stream`` publishes to ``deliver`` as it is published (after
    whoever observed the stream already: the mirror)."""
    previous = stream.observer

    def observer(seq: int, payload: bytes | None) -> None:
        if previous is not None:
            previous(seq, payload)
        if payload is not None:
            deliver(payload)

    stream.observer = observer


def session_param(query_string: bytes) -> str:
    values = parse_qs(query_string.decode("latin-1")).get("session_id")
    if not values:
        raise InvalidRequest("session_id is required: POST to the URL the endpoint event named")
    session_id = values[0].strip()
    if not is_session_id(session_id):
        raise InvalidRequest("session_id is not a session id of this server")
    return session_id


def open_draft(scope: Scope, headers: Headers, endpoint: McpEndpoint) -> Draft:
    """The request's record, opened as the MCP path opens its own."""
    peer = scope.get("client")
    address = peer[0] if peer else None
    trusted = endpoint.options.trusted_proxies
    from_proxy = bool(trusted) and address is not None and in_networks(address, trusted)
    if from_proxy:
        address = client_address(address, header_text(headers, b"x-forwarded-for"), trusted)
    draft = Draft(
        scope["method"],
        scope["path"],
        header_text(headers, b"user-agent"),
        address,
        header_text(headers, b"mcp-protocol-version"),
    )
    draft.era, draft.transport = "legacy", TRANSPORT
    if from_proxy or b"traceparent" in headers:
        draft.carry(headers, from_proxy)
    return draft
