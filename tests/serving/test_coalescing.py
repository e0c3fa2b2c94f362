"""server.serving.coalescing: writes held until the loop's turn ends, one write per connection, in
order; closing writes what is pending first; everything else passes through; and a live server
writing through it answers each of many concurrent calls with its own result."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.serving.coalescing import CoalescingTransport, WriteBatch
from server.settings import Settings
from tests.support.core_helpers import FakeTransport
from tests.support.live_server import ServerThread
from tests.support.mcp_client import modern, modern_headers


async def next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


@pytest.mark.anyio
async def test_writes_wait_for_the_turn_to_end_then_go_out_joined_per_connection() -> None:
    batch = WriteBatch(asyncio.get_running_loop())
    first, second = FakeTransport(), FakeTransport()
    a, b = CoalescingTransport(first, batch), CoalescingTransport(second, batch)
    a.write(b"HTTP/1.1 200 OK\r\n\r\n")
    b.write(b"head-b|")
    a.write(b"body-a")
    b.writelines([b"body", b"-b"])
    assert first.writes == []  # nothing yet: the turn is not over
    assert second.writes == []
    await next_turn()
    assert first.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody-a"]  # one write, in order
    assert second.writes == [b"head-b|body-b"]
    assert batch.flushes == 1


@pytest.mark.anyio
async def test_an_idle_connection_holds_no_list_and_no_dict() -> None:
    """Thousands of idle listen streams each hold one: between writes it holds nothing but its
    two references."""
    batch = WriteBatch(asyncio.get_running_loop())
    transport = CoalescingTransport(FakeTransport(), batch)
    transport.write(b"a frame")
    await next_turn()
    assert transport._pieces is None
    assert not hasattr(transport, "__dict__")
    assert transport.get_extra_info("anything", "default") == "default"


@pytest.mark.anyio
async def test_close_writes_what_is_pending_first_and_abort_drops_it() -> None:
    batch = WriteBatch(asyncio.get_running_loop())
    closing, aborting, other = FakeTransport(), FakeTransport(), FakeTransport()
    c = CoalescingTransport(closing, batch)
    d = CoalescingTransport(aborting, batch)
    o = CoalescingTransport(other, batch)
    c.write(b"last words")
    d.write(b"never sent")
    o.write(b"still pending")
    c.close()
    assert closing.writes == [b"last words"]
    assert closing.closed
    d.abort()
    assert aborting.aborted
    assert other.writes == []  # the others keep waiting for the turn
    await next_turn()
    assert other.writes == [b"still pending"]
    assert aborting.writes == []


@pytest.mark.anyio
async def test_a_connection_gone_before_the_flush_loses_only_its_own_bytes() -> None:
    batch = WriteBatch(asyncio.get_running_loop())
    gone, alive = FakeTransport(), FakeTransport()
    CoalescingTransport(gone, batch).write(b"too late")
    CoalescingTransport(alive, batch).write(b"fine")
    gone.closed = True  # the peer went away: the real transport is closing
    await next_turn()
    assert gone.writes == []
    assert alive.writes == [b"fine"]


def test_reading_and_addresses_pass_straight_through() -> None:
    real = FakeTransport()
    wrapped = CoalescingTransport(real, WriteBatch(asyncio.new_event_loop()))
    wrapped.pause_reading()
    assert real.reading is False
    wrapped.resume_reading()
    assert real.reading is True
    assert wrapped.get_extra_info("peername") == ("127.0.0.1", 5000)
    assert wrapped.is_closing() is False


def modern_echo(number: int) -> tuple[dict[str, Any], dict[str, str]]:
    body = modern("tools/call", {"name": "echo", "arguments": {"text": f"text-{number}"}}, number)
    headers = modern_headers(body, Content_Type=None)
    return body, headers


@pytest.mark.anyio
async def test_a_live_server_answers_many_concurrent_calls_each_with_its_own_result() -> None:
    # Coalescing asked for (the default), whatever MCP_COALESCE_WRITES the run has; it is
    # used where uvicorn is a verified release (serving.http_protocol).
    settings = Settings(_env_file=None, records=["none"], log_level="warning", coalesce_writes=True)
    app = create_app(settings)
    thread = ServerThread(app).start()
    try:
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(base_url=thread.url, limits=limits) as client:

            async def call(number: int) -> str:
                body, headers = modern_echo(number)
                answer = await client.post("/mcp", json=body, headers=headers)
                assert answer.status_code == 200
                assert answer.json()["id"] == number
                return str(answer.json()["result"]["content"][0]["text"])

            texts = await asyncio.gather(*(call(n) for n in range(200)))
        assert texts == [f"text-{n}" for n in range(200)]
    finally:
        thread.stop()
