"""server.transport.disconnect.DisconnectWatch: a request's task cancelled when its client
leaves, watched without a task of its own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from server.transport.disconnect import DisconnectWatch, uncancel

DISCONNECT = {"type": "http.disconnect"}


class Receive:
    """An ASGI server's ``receive``: each call waits on a future the test resolves."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[dict[str, Any]]] = []
        self.calls = 0
        self.ended = 0  # reads that were given up on (closed or cancelled)

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        try:
            return await future
        except (GeneratorExit, asyncio.CancelledError):
            self.ended += 1
            raise

    def answer(self, message: dict[str, Any]) -> None:
        self.waiting[-1].set_result(message)


async def watched(receive: Receive, *, seconds: float = 5.0) -> bool:
    """A request that waits ``seconds`` under a watch; whether its client left."""
    with DisconnectWatch(receive) as disconnect:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if not disconnect.happened:
                raise
            uncancel()
    return disconnect.happened


async def settle() -> None:
    await asyncio.sleep(DisconnectWatch.WATCH_AFTER_S + 0.05)


@pytest.mark.anyio
async def test_a_client_that_leaves_cancels_the_request_and_no_task_watches_it() -> None:
    receive = Receive()
    before = len(asyncio.all_tasks())
    request = asyncio.ensure_future(watched(receive))
    await settle()
    assert receive.calls == 1  # watching...
    assert len(asyncio.all_tasks()) == before + 1  # ...with the request's task alone
    receive.answer(DISCONNECT)
    assert await asyncio.wait_for(request, 1) is True


@pytest.mark.anyio
async def test_given_a_callback_a_client_that_leaves_is_told_and_nothing_is_cancelled() -> None:
    # The legacy era's use: a disconnect is not a cancellation there.
    receive = Receive()
    left: list[bool] = []

    async def request() -> str:
        with DisconnectWatch(receive, lambda: left.append(True)) as disconnect:
            await asyncio.sleep(DisconnectWatch.WATCH_AFTER_S + 0.05)
            receive.answer(DISCONNECT)
            await asyncio.sleep(0.05)  # not cancelled: it sleeps on to the end
            return f"done, left={disconnect.happened}"

    assert await asyncio.wait_for(request(), 2) == "done, left=True"
    assert left == [True]


@pytest.mark.anyio
async def test_a_quick_request_never_reads() -> None:
    receive = Receive()
    assert await watched(receive, seconds=0) is False
    await settle()
    assert receive.calls == 0


@pytest.mark.anyio
async def test_more_body_is_read_past_until_the_disconnect() -> None:
    receive = Receive()
    request = asyncio.ensure_future(watched(receive))
    await settle()
    receive.answer({"type": "http.request", "body": b"more", "more_body": False})
    await asyncio.sleep(0.01)
    assert receive.calls == 2
    assert not request.done()
    receive.answer(DISCONNECT)
    assert await asyncio.wait_for(request, 1) is True


@pytest.mark.anyio
async def test_a_request_that_ends_leaves_no_read_behind() -> None:
    receive = Receive()
    assert await watched(receive, seconds=0.1) is False
    await asyncio.sleep(0)
    # The read it was waiting on ends with the watch, its future given up on.
    assert receive.ended == 1
    assert receive.waiting[0].cancelled()
    await asyncio.sleep(0.05)
    assert receive.calls == 1


@pytest.mark.anyio
async def test_a_receive_that_fails_stops_the_watch_not_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    receive = Receive()
    request = asyncio.ensure_future(watched(receive, seconds=0.2))
    await settle()
    receive.waiting[-1].set_exception(RuntimeError("broken"))
    with caplog.at_level(logging.ERROR, logger="server.transport.disconnect"):
        assert await asyncio.wait_for(request, 1) is False
    assert "the disconnect watch stopped" in caplog.text
    assert receive.calls == 1


@pytest.mark.anyio
async def test_on_watching_hears_a_request_that_lasts_and_never_a_quick_one() -> None:
    heard: list[asyncio.Task[Any]] = []
    quick = Receive()
    with DisconnectWatch(quick, on_watching=heard.append):
        await asyncio.sleep(0)
    await settle()
    assert heard == []
    lasting = Receive()
    with DisconnectWatch(lasting, on_watching=heard.append):
        await settle()
    assert heard == [asyncio.current_task()]
    assert lasting.calls == 1  # and the watch reads as before
