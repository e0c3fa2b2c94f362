"""server.transport.request_body: a POST's body read whole within its limit, every byte that
arrived counted into the record, in one message or several."""

from __future__ import annotations

from typing import Any

import pytest

from server.errors import McpError, http_status
from server.records.draft import Draft
from server.transport.request_body import read_body


@pytest.mark.anyio
async def test_read_body_counts_what_arrives_into_the_draft() -> None:
    chunks = [b'{"jsonrpc":', b'"2.0"}', b""]

    async def receive() -> dict[str, Any]:
        body = chunks.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(chunks)}

    draft = Draft("POST", "/mcp", None, None, None)
    assert await read_body(receive, {}, 100, draft) == b'{"jsonrpc":"2.0"}'
    assert draft.bytes_in == 17
    # Refused past the limit: what arrived is still counted (the record says how much came).
    chunks[:] = [b"x" * 60, b"y" * 60]
    draft = Draft("POST", "/mcp", None, None, None)
    with pytest.raises(McpError) as refused:
        await read_body(receive, {}, 100, draft)
    assert http_status(refused.value, "modern") == 413
    assert draft.bytes_in == 120


@pytest.mark.anyio
async def test_a_body_in_one_message_and_a_declared_length_over_the_limit() -> None:
    received: list[int] = []

    async def receive() -> dict[str, Any]:
        received.append(1)
        return {"type": "http.request", "body": b"x" * 150, "more_body": False}

    draft = Draft("POST", "/mcp", None, None, None)
    with pytest.raises(McpError) as refused:
        await read_body(receive, {}, 100, draft)
    assert http_status(refused.value, "modern") == 413
    assert draft.bytes_in == 150  # read, counted, then refused
    # A Content-Length over the limit is refused before anything is read.
    draft = Draft("POST", "/mcp", None, None, None)
    with pytest.raises(McpError) as refused:
        await read_body(receive, {b"content-length": b"101"}, 100, draft)
    assert http_status(refused.value, "modern") == 413
    assert draft.bytes_in == 0
    assert len(received) == 1
    assert await read_body(receive, {b"content-length": b"150"}, 200, draft) == b"x" * 150
