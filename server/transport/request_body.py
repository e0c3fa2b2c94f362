"""A POST's body, read whole within the size limit and counted into its record's bytes in.

:func:`read_body` is the whole way; the endpoint writes it out on its hot path from the parts
(:func:`check_declared_length`, :func:`whole_body`, :func:`read_rest`), so that a body that
arrived in one message costs no coroutine of its own.
"""

from __future__ import annotations

from server.asgi import ASGIMessage, Headers, Receive
from server.errors import InvalidRequest
from server.records.draft import Draft


def _too_large(limit: int) -> InvalidRequest:
    return InvalidRequest(f"Request body larger than {limit} bytes", http_status=413)


async def read_body(receive: Receive, headers: Headers, limit: int, draft: Draft) -> bytes:
    """The whole body, counted into the draft's bytes in as it arrives (read from the server's
    own ``receive``: the draft's observing one would add a coroutine to every request)."""
    check_declared_length(headers, limit)
    message = await receive()
    body = whole_body(message, limit, draft)
    return body if body is not None else await read_rest(receive, message, limit, draft)


def check_declared_length(headers: Headers, limit: int) -> None:
    """413 for a body whose Content-Length is over ``limit``, before any of it is read."""
    declared = headers.get(b"content-length")
    if (
        declared is not None
        and declared.isascii()
        and declared.isdigit()
        and (len(declared) > 18 or int(declared) > limit)
    ):
        raise _too_large(limit)


def whole_body(message: ASGIMessage, limit: int, draft: Draft) -> bytes | None:
    """The body when the first message holds all of it (the usual case), counted into the
    draft; None when more follows (:func:`read_rest`)."""
    if message["type"] == "http.request" and not message.get("more_body", False):
        body: bytes = message.get("body", b"")
        draft.bytes_in += len(body)
        if len(body) > limit:
            raise _too_large(limit)
        return body
    return None


async def read_rest(receive: Receive, message: ASGIMessage, limit: int, draft: Draft) -> bytes:
    """A body in more than one message, from its first (``message``) on."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client went away while sending the body")
        chunk = message.get("body", b"")
        draft.bytes_in += len(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()
