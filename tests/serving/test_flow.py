"""server.serving.flow: a Signal is an asyncio.Event without its deque, and the flow control
waits on one."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from server.serving.flow import FlowControl, Signal
from tests.support.core_helpers import FakeTransport


@pytest.mark.anyio
async def test_a_signal_is_an_event_without_its_deque() -> None:
    signal = Signal()
    assert not signal.is_set()
    first, second = signal.wait(), signal.wait()
    assert not first.done()
    signal.set()
    assert signal.is_set()
    assert first.result() is True
    assert second.result() is True
    assert signal.wait().result() is True  # already set: done at once
    signal.clear()
    given_up = signal.wait()
    given_up.cancel()  # a waiter cancelled (its task was) is dropped, not resolved
    waiting = signal.wait()
    assert signal._waiters is waiting  # one waiter, held as it is
    more = [signal.wait(), signal.wait()]
    more[0].cancel()
    last = signal.wait()
    assert cast(object, signal._waiters) == [waiting, more[1], last]
    signal.set()
    assert [waiting.result(), more[1].result(), last.result()] == [True, True, True]
    assert Signal(True).is_set()


@pytest.mark.anyio
async def test_the_flow_control_drains_once_writable_again() -> None:
    flow = FlowControl(FakeTransport())
    assert flow.drain().done()  # writable: nothing to wait for
    flow.pause_writing()
    draining = flow.drain()
    assert not draining.done()
    flow.resume_writing()
    await asyncio.wait_for(draining, 1)
    assert draining.result() is True
