"""server.hub: the Hub's fan-out with bounded queues, and the URI rule of resource updates."""

import asyncio

import pytest

from server.catalog import Catalog, Change
from server.hub import Closed, FrameQueue, Hub, covers


def drain(stream):
    items = []
    while not stream.queue.empty():
        items.append(stream.queue.get_nowait())
    return items


def tools_only(change):
    return f"frame:{change.kind}".encode() if change.kind == "tools" else None


# -- Hub -----------------------------------------------------------------------------------


def test_publish_fans_out_to_every_interested_stream():
    hub = Hub(capacity=4)
    everything = hub.attach(
        lambda change: change.kind.encode() if isinstance(change, Change) else None
    )
    tools = hub.attach(tools_only)
    hub.publish(Change("tools"))
    hub.publish(Change("prompts"))
    assert drain(everything) == [b"tools", b"prompts"]
    assert drain(tools) == [b"frame:tools"]
    assert len(hub) == 2


def test_detached_streams_get_nothing():
    hub = Hub()
    stream = hub.attach(tools_only)
    hub.detach(stream)
    hub.detach(stream)  # idempotent
    hub.publish(Change("tools"))
    assert drain(stream) == []
    assert len(hub) == 0


def test_overflow_closes_only_the_slow_stream():
    hub = Hub(capacity=2)
    slow = hub.attach(tools_only)
    fast = hub.attach(tools_only)
    hub.publish(Change("tools"))
    hub.publish(Change("tools"))
    drain(fast)
    hub.publish(Change("tools"))  # the slow one is full now
    hub.publish(Change("tools"))
    items = drain(slow)
    assert items[:2] == [b"frame:tools", b"frame:tools"]
    assert isinstance(items[2], Closed)
    assert items[2].reason == "overflow"
    assert len(items) == 3  # nothing after the close
    assert slow.closed
    assert not fast.closed
    assert drain(fast) == [b"frame:tools", b"frame:tools"]


def test_uninteresting_changes_do_not_fill_the_queue():
    hub = Hub(capacity=1)
    stream = hub.attach(tools_only)
    for _ in range(10):
        hub.publish(Change("prompts"))
    assert not stream.closed
    assert stream.queue.empty()


def test_close_all_ends_every_stream_once():
    hub = Hub()
    streams = [hub.attach(tools_only) for _ in range(3)]
    hub.close_all("shutdown")
    hub.close_all("shutdown")
    hub.publish(Change("tools"))
    for stream in streams:
        items = drain(stream)
        assert len(items) == 1
        assert isinstance(items[0], Closed)
        assert items[0].reason == "shutdown"


def test_hub_as_catalog_listener():
    catalog = Catalog()
    hub = Hub()
    stream = hub.attach(tools_only)
    catalog.subscribe(hub.publish)
    catalog.tool(lambda: "x", name="t")
    catalog.notify_resource_updated("x://a")
    assert drain(stream) == [b"frame:tools"]


@pytest.mark.parametrize(
    ("subscribed", "updated", "expected"),
    [
        ("file:///a", "file:///a", True),
        ("file:///a", "file:///a/b", True),
        ("file:///a/", "file:///a/b", True),
        ("file:///a", "file:///ab", False),
        ("file:///a/b", "file:///a", False),
        ("x://a", "y://a", False),
    ],
)
def test_covers(subscribed, updated, expected):
    assert covers(subscribed, updated) is expected


# -- FrameQueue -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_frame_queue_hands_items_over_in_order_and_wakes_its_consumer() -> None:
    queue = FrameQueue()
    assert queue.empty()
    assert queue.qsize() == 0
    getting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not getting.done()
    queue.put_nowait(b"one")
    queue.put_nowait(b"two")
    assert await getting == b"one"
    assert queue.qsize() == 1
    assert queue.get_nowait() == b"two"
    assert queue.empty()
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


@pytest.mark.anyio
async def test_a_cancelled_get_loses_nothing() -> None:
    queue = FrameQueue()
    getting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    getting.cancel()
    queue.put_nowait(b"kept")  # lands while the cancellation is on its way
    with pytest.raises(asyncio.CancelledError):
        await getting
    assert await queue.get() == b"kept"
