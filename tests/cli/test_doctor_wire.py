"""The doctor's SSE reader: the events of a stream however its pieces fall, and a JSON string
holding U+2028 (orjson writes it as it is) is one line of data, not two."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from server.cli.doctor_wire import events

pytestmark = pytest.mark.anyio


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


async def test_events_keep_a_line_separator_inside_their_data_and_split_at_cr_lf() -> None:
    answer = {"jsonrpc": "2.0", "id": 9, "result": {"text": "one\u2028two"}}
    stream = b"id: a\r\nevent: message\r\ndata: " + orjson.dumps(answer) + b"\r\n\r\n: ping\n\n"
    stream += b'data: {"id": 10}\r\rdata: 1\ndata: 2\n\n'
    assert "\u2028".encode() in stream  # as the server writes it
    # In pieces that cut a CRLF and the U+2028 in two.
    cut = [stream[:12], stream[12:50], stream[50:71], stream[71:]]
    response = httpx.Response(200, stream=Pieces(cut))
    found = [(event.id, event.event, event.message()) async for event in events(response)]
    assert found == [
        ("a", "message", answer),
        (None, "message", {"id": 10}),
        (None, "message", None),  # "1\n2": not an object
    ]
