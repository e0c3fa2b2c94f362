"""Bounded sends on the MCP endpoint: whole JSON or empty answers, and a stream's pieces.

:func:`send_json` and :func:`send_empty` answer a request in one response (its head and its
body). :func:`send_within` and :func:`send_body` send on a stream, each send bounded by the
send timeout (MCP_SEND_TIMEOUT_S): a send waits while the client does not read (uvicorn's flow
control), and a client that stops reading must not keep a stream, nor the memory it holds.
"""

from __future__ import annotations

from collections.abc import Awaitable

from server.aio import Deadline
from server.asgi import ASGIMessage, Send

# First in a JSON answer's head: the record's observer (server.records.draft) looks for it there.
JSON_TYPE = (b"content-type", b"application/json")


async def send_json(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [JSON_TYPE, (b"content-length", b"%d" % len(body))]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_empty(
    send: Send, status: int, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": extra or []})
    await send({"type": "http.response.body", "body": b""})


END_OF_BODY: ASGIMessage = {"type": "http.response.body", "body": b""}


async def send_within(send: Send, message: ASGIMessage, timeout_s: float) -> None:
    """Send, or raise TimeoutError after ``timeout_s``: a send waits while the client does not
    read (uvicorn's flow control), and a client that stops reading must not keep a stream.
    The caller then returns with its response unfinished, and the server's HTTP protocol
    aborts the connection (server/serving/uvicorn_protocol.py)."""
    async with Deadline(timeout_s):
        await send(message)


def send_body(send: Send, body: bytes, timeout_s: float) -> Awaitable[None]:
    """One piece of a streamed body, within the send timeout."""
    return send_within(
        send, {"type": "http.response.body", "body": body, "more_body": True}, timeout_s
    )
