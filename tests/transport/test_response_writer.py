"""server.transport.response_writer.ResponseWriter on its own (an ASGI ``send`` the test
controls): JSON until the request sends something or stays silent; then one head, keep-alives,
and the result.

The end-to-end behaviour over a real socket is tests/transport/test_silent_calls.py's; here
what a socket hides: the order of the messages when the keep-alive task and the request's
task send at the same time, and what a stalled client does to each era's call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from server.asgi import ASGIMessage
from server.transport.response_writer import PADDED_HEADERS, PADDING, LazyWriter, ResponseWriter
from server.transport.sse import KEEP_ALIVE, SSE_HEADERS

pytestmark = pytest.mark.anyio

KEEPALIVE_S = 0.05


class Send:
    """An ASGI ``send`` that records every message; ``hold`` makes the next sends wait."""

    def __init__(self) -> None:
        self.sent: list[ASGIMessage] = []
        self.open = asyncio.Event()
        self.open.set()

    async def __call__(self, message: ASGIMessage) -> None:
        await self.open.wait()
        self.sent.append(message)

    def hold(self) -> None:
        self.open.clear()

    def release(self) -> None:
        self.open.set()

    @property
    def kinds(self) -> list[str]:
        return [m["type"].removeprefix("http.response.") for m in self.sent]

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


def me() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None
    return task


def writer(send: Send, *, json_ok: bool = True, sse_ok: bool = True, **options: Any) -> Any:
    return ResponseWriter(
        send, json_ok=json_ok, sse_ok=sse_ok, keepalive_s=KEEPALIVE_S, send_timeout_s=1, **options
    )


async def test_a_call_that_answers_before_the_silence_ends_is_plain_json() -> None:
    send = Send()
    answer = writer(send)
    answer.watch_silence(me())
    await answer.finish(b'{"result":1}')
    answer.close()
    await asyncio.sleep(KEEPALIVE_S * 3)  # the disarmed timer never fires
    assert send.kinds == ["start", "body"]
    assert dict(send.sent[0]["headers"])[b"content-length"] == b"12"
    assert not answer.committed


async def test_a_silent_call_gets_one_sse_head_keep_alives_and_its_result() -> None:
    send = Send()
    answer = writer(send)
    answer.watch_silence(me())
    await asyncio.sleep(KEEPALIVE_S * 4.5)
    await answer.finish(b'{"result":1}')
    answer.close()
    assert send.kinds[0] == "start"
    assert send.sent[0]["headers"] == SSE_HEADERS
    assert send.kinds.count("start") == 1
    *fillers, last = send.bodies
    assert len(fillers) >= 2  # at the silence, then every period
    assert set(fillers) == {KEEP_ALIVE}
    assert last == b'event: message\r\ndata: {"result":1}\r\n\r\n'
    assert send.sent[-1]["more_body"] is False


async def test_a_json_only_client_gets_whitespace_then_the_json_and_the_status_is_200() -> None:
    send = Send()
    answer = writer(send, sse_ok=False)
    answer.watch_silence(me())
    await asyncio.sleep(KEEPALIVE_S * 2.5)
    await answer.emit(b'{"method":"notifications/progress"}')  # no SSE: dropped
    await answer.finish(b'{"error":{}}', 503)  # committed: the status is already 200
    answer.close()
    assert send.sent[0] == {"type": "http.response.start", "status": 200, "headers": PADDED_HEADERS}
    *fillers, last = send.bodies
    assert fillers
    assert set(fillers) == {PADDING}
    assert last == b'{"error":{}}'
    assert b"".join(send.bodies).strip() == b'{"error":{}}'


async def test_the_head_goes_first_once_when_the_silence_and_a_message_race() -> None:
    send = Send()
    answer = writer(send)
    answer.watch_silence(me())
    send.hold()  # the keep-alive task's head waits in send
    await asyncio.sleep(KEEPALIVE_S + 0.03)
    assert answer.streaming
    emitting = asyncio.ensure_future(answer.emit(b'{"method":"notifications/progress"}'))
    await asyncio.sleep(0.01)
    send.release()
    await emitting
    await answer.finish(b'{"result":1}')
    answer.close()
    assert send.kinds[0] == "start"
    assert send.kinds.count("start") == 1
    assert send.bodies[0] == KEEP_ALIVE  # the silence committed it: its filler came first


@pytest.mark.parametrize("stall_cancels", [True, False])
async def test_a_stalled_keep_alive_cancels_the_call_only_where_the_era_says(
    stall_cancels: bool,
) -> None:
    send = Send()
    answer = ResponseWriter(
        send,
        json_ok=True,
        sse_ok=False,
        keepalive_s=KEEPALIVE_S,
        send_timeout_s=0.05,
        stall_cancels=stall_cancels,
    )

    async def call() -> str:
        answer.watch_silence(me())
        try:
            await asyncio.sleep(KEEPALIVE_S * 6)
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    send.hold()  # the client reads nothing: the head's send times out
    outcome = await call()
    answer.close()
    assert answer.stalled
    assert outcome == ("cancelled" if stall_cancels else "finished")
    with pytest.raises(TimeoutError):
        await answer.finish(b"{}")


async def test_a_lazy_writer_makes_one_writer_at_the_first_need_and_its_emit_streams() -> None:
    send = Send()
    lazy = LazyWriter(send, True, True, KEEPALIVE_S, 1.0)
    assert lazy.writer is None  # nothing made, nothing sent
    assert send.sent == []
    await lazy.emit(b'{"jsonrpc":"2.0","method":"notifications/progress"}')
    writer = lazy.writer
    assert writer is not None
    assert writer.committed
    assert lazy.opened() is writer
    assert send.sent[0]["headers"] == SSE_HEADERS
    await writer.finish(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    writer.close()
    assert [m["type"] for m in send.sent][-1] == "http.response.body"
