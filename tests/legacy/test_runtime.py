"""server.legacy.runtime: a legacy session's live part (streams, questions, calls, hub feed)."""

import asyncio
import time
from typing import Any

import anyio
import orjson
import pytest

from server.catalog import Change
from server.hub import Hub
from server.legacy.eventstream import EventStream, SentOnce, parse_event_id
from server.legacy.runtime import (
    MAX_STREAMS_PER_SESSION,
    Runtimes,
    SessionRuntime,
    asked_by,
    is_standalone_id,
)

pytestmark = pytest.mark.anyio

ALL_CAPS = {"tools": {}, "prompts": {}, "resources": {"subscribe": True}}


def messages(stream: EventStream) -> list[dict[str, Any]]:
    return [orjson.loads(event.payload) for _, event in stream.events_after(0)]


async def sleeper() -> asyncio.Task[None]:
    task = asyncio.ensure_future(asyncio.sleep(30))
    await asyncio.sleep(0)
    return task


# -- streams ------------------------------------------------------------------------------------


def test_streams_get_distinct_ids_that_event_ids_can_carry() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    streams = [runtime.open_stream() for _ in range(5)]
    ids = [stream.id for stream in streams]
    assert len(set(ids)) == 5
    assert list(runtime.streams) == ids
    for stream in streams:
        assert "_" not in stream.id
        assert stream.id.isascii()
        assert parse_event_id(stream.publish(b"{}").id) == (stream.id, 1)
    # The per-runtime buffer size reaches every stream.
    for _ in range(6):
        streams[0].publish(b"{}")
    assert len(streams[0].events_after(0)) == 4


def test_stream_ids_differ_between_sessions() -> None:
    first = {SessionRuntime("a", 4).open_stream().id for _ in range(20)}
    second = {SessionRuntime("b", 4).open_stream().id for _ in range(20)}
    assert first.isdisjoint(second)


def test_running_streams_are_never_evicted() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    streams = [runtime.open_stream() for _ in range(MAX_STREAMS_PER_SESSION + 5)]
    assert len(runtime.streams) == MAX_STREAMS_PER_SESSION + 5
    assert all(stream.id in runtime.streams for stream in streams)


def test_the_oldest_finished_streams_make_room() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    streams = [runtime.open_stream() for _ in range(MAX_STREAMS_PER_SESSION + 1)]
    for stream in (streams[0], streams[1], streams[2], streams[10]):
        stream.finish(b"{}")
    newest = runtime.open_stream()
    # 34 streams, 2 too many: the two oldest finished ones go; the other finished ones and
    # every running one stay.
    assert len(runtime.streams) == MAX_STREAMS_PER_SESSION
    assert streams[0].id not in runtime.streams
    assert streams[1].id not in runtime.streams
    assert streams[2].id in runtime.streams
    assert streams[10].id in runtime.streams
    assert newest.id in runtime.streams


def test_opening_a_stream_never_rescans_the_running_ones() -> None:
    # A 2025-03-26 batch of 32,000 pings opened 32,000 running streams in one session, and
    # each open scanned every one before it: 36 s of a frozen event loop. Now each open costs
    # the same however many run (the old code takes minutes here).
    runtime = SessionRuntime("session", events_per_stream=4)
    started = time.process_time()  # this process's CPU: a busy machine does not count
    for _ in range(32_000):
        runtime.open_stream()
    assert time.process_time() - started < 2.0
    assert len(runtime.streams) == 32_000


def test_the_finished_index_holds_only_kept_streams() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    for _ in range(1_000):  # what every JSON-answered call does: open, finish, drop
        stream = runtime.open_stream()
        stream.finish(b"{}")
        runtime.drop_stream(stream)
    assert runtime.streams == {}
    assert len(runtime._finished) == 0
    runtime.drop_stream(runtime.open_stream())  # dropped while running
    assert len(runtime._finished) == 0


def test_drop_stream_forgets_it() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    stream = runtime.open_stream()
    runtime.drop_stream(stream)
    runtime.drop_stream(stream)
    assert runtime.streams == {}


def test_outgoing_request_ids_are_fresh_and_unique_across_runtimes() -> None:
    # Two replicas may each hold a runtime of one session; an answer relayed between them
    # must find exactly one waiter, so their ids never collide.
    runtime = SessionRuntime("session", events_per_stream=4)
    other = SessionRuntime("session", events_per_stream=4)
    ids = [runtime.next_request_id() for _ in range(3)]
    assert len(set(ids)) == 3
    assert all(id_.startswith("srv-") for id_ in ids)
    assert [int(id_.rpartition("-")[2]) for id_ in ids] == [1, 2, 3]
    assert not set(ids) & {other.next_request_id() for _ in range(3)}


def test_outgoing_request_ids_name_the_replica_that_waits_for_the_answer() -> None:
    # Issue 35: with replicas, an answer goes only to the replica that asked.
    runtime = SessionRuntime("session", events_per_stream=4, replica="0123456789abcdef")
    request_id = runtime.next_request_id()
    assert asked_by(request_id) == "0123456789abcdef"
    assert asked_by(SessionRuntime("session", events_per_stream=4).next_request_id()) is None
    for other in ("srv-1", 7, "srv-0123456789abcdeg-abc-1", "x-0123456789abcdef-abc-1", None):
        assert asked_by(other) is None


def test_standalone_streams_are_named_as_such() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    call = runtime.open_stream()
    standalone = runtime.standalone_stream(Hub(), dict)
    assert is_standalone_id(standalone.id)
    assert not is_standalone_id(call.id)


# -- the standalone stream and the hub ----------------------------------------------------------


def test_standalone_stream_is_created_once_and_fed_by_the_hub() -> None:
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    stream = runtime.standalone_stream(hub, lambda: ALL_CAPS)
    assert runtime.standalone is stream
    assert runtime.streams[stream.id] is stream
    assert runtime.standalone_stream(hub, lambda: ALL_CAPS) is stream
    assert len(hub) == 1
    hub.publish(Change("tools"))
    hub.publish(Change("prompts"))
    hub.publish(Change("resources"))
    assert messages(stream) == [
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
    ]


def test_list_changed_only_for_capabilities_the_server_has() -> None:
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    capabilities: dict[str, Any] = {"tools": {"listChanged": True}}
    stream = runtime.standalone_stream(hub, lambda: capabilities)
    hub.publish(Change("prompts"))
    hub.publish(Change("resources"))
    hub.publish(Change("tools"))
    assert [message["method"] for message in messages(stream)] == [
        "notifications/tools/list_changed"
    ]
    # Capabilities are read per change, so a primitive declared later counts from then on.
    capabilities["prompts"] = {"listChanged": True}
    hub.publish(Change("prompts"))
    assert messages(stream)[-1]["method"] == "notifications/prompts/list_changed"


def test_resource_updates_only_for_subscribed_uris_and_below() -> None:
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    runtime.subscriptions.apply("test://docs", True)
    runtime.subscriptions.apply("test://dir/", True)
    stream = runtime.standalone_stream(hub, lambda: ALL_CAPS)
    for uri in (
        "test://other",
        "test://docsextra",
        "test://docs/page/1",
        "test://dir",
        "test://dir/a",
        "test://docs",
    ):
        hub.publish(Change("resource_updated", uri))
    assert messages(stream) == [
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
        for uri in ("test://docs/page/1", "test://dir/a", "test://docs")
    ]
    # Unsubscribing (the runtime's set follows the session's) stops them.
    runtime.subscriptions.apply("test://docs", False)
    runtime.subscriptions.apply("test://dir/", False)
    hub.publish(Change("resource_updated", "test://docs"))
    assert len(messages(stream)) == 3


def test_a_resume_catches_up_with_what_its_previous_holder_did_not_tell() -> None:
    # Issue 35: the changes made while no replica held the GET stream, filtered as the hub's
    # are (subscriptions, capabilities), and not repeated when heard meanwhile.
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    runtime.subscriptions.apply("test://docs", True)
    stream = runtime.standalone_stream(hub, lambda: {"tools": {}})
    after = stream.last_seq
    hub.publish(Change("tools"))  # heard here after this stream opened
    runtime.catch_up(
        [
            Change("resource_updated", "test://docs/1"),
            Change("resource_updated", "test://other"),
            Change("prompts"),  # not a capability of the session
            Change("tools"),  # already told
            Change("resource_updated", "test://docs/1"),  # a second update: told again
        ],
        after,
    )
    assert [message["method"] for message in messages(stream)] == [
        "notifications/tools/list_changed",
        "notifications/resources/updated",
        "notifications/resources/updated",
    ]
    assert messages(stream)[1]["params"] == {"uri": "test://docs/1"}


def test_a_resume_that_cannot_know_what_was_missed_tells_to_read_everything_again() -> None:
    runtime = SessionRuntime("session", events_per_stream=16)
    runtime.subscriptions.apply("test://docs", True)
    stream = runtime.standalone_stream(Hub(), lambda: ALL_CAPS)
    runtime.catch_up(None, stream.last_seq)
    assert [(message["method"], message.get("params")) for message in messages(stream)] == [
        ("notifications/tools/list_changed", None),
        ("notifications/prompts/list_changed", None),
        ("notifications/resources/list_changed", None),
        ("notifications/resources/updated", {"uri": "test://docs"}),
    ]


def test_a_finished_standalone_stream_ignores_changes() -> None:
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    stream = runtime.standalone_stream(hub, lambda: ALL_CAPS)
    stream.finish()
    hub.publish(Change("tools"))  # must not raise "stream is finished"
    assert messages(stream) == []


# -- closing ------------------------------------------------------------------------------------


async def test_close_ends_everything_the_session_holds() -> None:
    hub = Hub()
    runtime = SessionRuntime("session", events_per_stream=16)
    standalone = runtime.standalone_stream(hub, lambda: ALL_CAPS)
    call_stream = runtime.open_stream()
    running = await sleeper()
    runtime.inflight["call-1"] = running
    waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    answered: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    answered.set_result({"result": {}})
    runtime.pending = {"srv-1": waiting, "srv-2": answered}
    follower = asyncio.ensure_future(call_stream.wait_beyond(0, call_stream.generation))
    await asyncio.sleep(0)
    assert runtime.busy()

    runtime.close()

    assert len(hub) == 0  # no longer fed
    with anyio.fail_after(1):
        await follower
    await asyncio.sleep(0)
    assert running.cancelled()
    assert waiting.cancelled()
    assert answered.result() == {"result": {}}
    assert runtime.pending == {}
    assert runtime.streams == {}
    assert runtime.standalone is None
    assert standalone.finished
    assert call_stream.finished
    hub.publish(Change("tools"))
    assert standalone.events_after(0) == []


async def test_close_ends_streams_that_drop_themselves_as_they_finish() -> None:
    """The HTTP+SSE transport's call streams leave the session when they finish: closing a
    session with two of them running must not trip over its own table (issue 34)."""
    runtime = SessionRuntime("session", events_per_stream=16)
    runtime.standalone_stream(Hub(), lambda: ALL_CAPS)
    calls = [runtime.open_stream(replayable=False) for _ in range(2)]
    for stream in calls:
        stream.on_finish = runtime.drop_stream  # what the transport sets

    runtime.close()

    assert all(stream.finished for stream in calls)
    assert runtime.streams == {}


def test_streams_nothing_replays_keep_nothing_and_are_not_mirrored() -> None:
    mirrored: list[str] = []
    runtime = SessionRuntime("s", 16, lambda _, stream: mirrored.append(stream.id))
    replayable = runtime.open_stream()
    call = runtime.open_stream(replayable=False)
    one = runtime.standalone_stream(Hub(), lambda: ALL_CAPS, sent_once=1 << 20)
    assert mirrored == [replayable.id]
    call.publish(b'{"jsonrpc":"2.0","method":"x"}')
    assert call.events_after(0) == []  # forwarded by its observer, kept by nobody
    assert isinstance(one, SentOnce)
    assert one.max_bytes == 1 << 20


async def test_busy_while_calls_run_or_a_get_stream_is_followed() -> None:
    runtime = SessionRuntime("session", events_per_stream=16)
    assert not runtime.busy()
    runtime.standalone_followers = 1
    assert runtime.busy()
    runtime.standalone_followers = 0
    task = await sleeper()
    runtime.inflight[1] = task
    assert runtime.busy()
    del runtime.inflight[1]
    task.cancel()
    assert not runtime.busy()


# -- Runtimes -----------------------------------------------------------------------------------


async def test_runtimes_create_on_get_and_tear_down_on_end() -> None:
    hub = Hub()
    runtimes = Runtimes(events_per_stream=8)
    assert runtimes.peek("a") is None
    assert len(runtimes) == 0
    first = runtimes.get("a")
    assert runtimes.get("a") is first
    assert runtimes.peek("a") is first
    assert first.session_id == "a"
    other = runtimes.get("b")
    assert len(runtimes) == 2
    first.standalone_stream(hub, lambda: ALL_CAPS)
    task = await sleeper()
    first.inflight[1] = task

    runtimes.end("a")
    runtimes.end("a")
    runtimes.end("never-existed")

    await asyncio.sleep(0)
    assert task.cancelled()
    assert len(hub) == 0
    assert runtimes.peek("a") is None
    assert runtimes.peek("b") is other
    assert len(runtimes) == 1
    assert runtimes.get("a") is not first  # a new session by that id starts fresh


def test_shutdown_ends_only_get_stream_connections_and_keeps_calls_running() -> None:
    runtimes = Runtimes(events_per_stream=8)
    hub = Hub()
    calls = [runtimes.get(name).open_stream() for name in ("a", "a", "b")]
    standalone = runtimes.get("a").standalone_stream(hub, lambda: {})
    runtimes.end_standalone_connections("shutdown")
    assert standalone.generation == 1
    assert standalone.end_reason == "shutdown"
    # Calls in flight keep their connections: they finish within the drain deadline.
    assert [stream.generation for stream in calls] == [0, 0, 0]
    assert not any(stream.finished for stream in [*calls, standalone])
    assert len(runtimes) == 2


def test_runtimes_end_all() -> None:
    runtimes = Runtimes(events_per_stream=8)
    streams = [runtimes.get(name).open_stream() for name in ("a", "b", "c")]
    runtimes.end_all()
    assert len(runtimes) == 0
    assert all(stream.finished for stream in streams)


def test_a_session_ending_is_told_but_a_shutdown_is_not() -> None:
    # The mirror drops a session's copies when it ends (deleted, closed, expired); at shutdown
    # the sessions live on and resume on another replica, so their copies must stay.
    ended: list[str] = []
    runtimes = Runtimes(8, on_end=ended.append)
    runtimes.get("one").open_stream()
    runtimes.get("two").open_stream()
    runtimes.end("one")
    runtimes.end("never-here")  # nothing of it here: nothing to tell
    assert ended == ["one"]
    runtimes.end_all()
    assert ended == ["one"]
    assert len(runtimes) == 0
