"""server.transport.send: whole answers in one response, and stream sends bounded in time."""

from __future__ import annotations

import asyncio

import pytest

from server.asgi import ASGIMessage
from server.transport.send import END_OF_BODY, send_body, send_empty, send_json, send_within

pytestmark = pytest.mark.anyio


class Send:
    """An ASGI ``send`` that keeps what it is given, or never returns (a client not reading)."""

    def __init__(self, *, stuck: bool = False) -> None:
        self.sent: list[ASGIMessage] = []
        self.stuck = stuck

    async def __call__(self, message: ASGIMessage) -> None:
        if self.stuck:
            await asyncio.Event().wait()
        self.sent.append(message)


async def test_send_json_gives_the_length_and_type_then_the_body() -> None:
    send = Send()
    await send_json(send, 202, b'{"a":1}', [(b"x-extra", b"1")])
    assert send.sent == [
        {
            "type": "http.response.start",
            "status": 202,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"7"),
                (b"x-extra", b"1"),
            ],
        },
        {"type": "http.response.body", "body": b'{"a":1}'},
    ]


async def test_send_empty_is_a_head_and_no_body() -> None:
    send = Send()
    await send_empty(send, 204)
    assert send.sent == [
        {"type": "http.response.start", "status": 204, "headers": []},
        {"type": "http.response.body", "body": b""},
    ]


async def test_a_stream_piece_says_more_follows_and_the_end_does_not() -> None:
    send = Send()
    await send_body(send, b"data: x\r\n\r\n", 1.0)
    await send_within(send, END_OF_BODY, 1.0)
    assert send.sent == [
        {"type": "http.response.body", "body": b"data: x\r\n\r\n", "more_body": True},
        {"type": "http.response.body", "body": b""},
    ]


async def test_a_send_the_client_does_not_take_times_out() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError):
        await send_body(Send(stuck=True), b": \r\n\r\n", 0.05)
    # Coarse timers: 10 ms slots, so a little past the bound, never long past it.
    assert 0.04 <= loop.time() - began < 1.0
