"""server.legacy.eventstream: event ids, the bounded replay buffer, and waking followers."""

import asyncio

import anyio
import pytest

from server.legacy.eventstream import (
    EVENT_OVERHEAD,
    MAX_SEQ,
    MAX_STREAM_ID_LENGTH,
    Event,
    EventStream,
    SentOnce,
    parse_event_id,
)
from server.legacy.runtime import SessionRuntime

pytestmark = pytest.mark.anyio


def seqs(stream: EventStream, after: int) -> list[int]:
    return [seq for seq, _ in stream.events_after(after)]


async def started(coroutine) -> asyncio.Task[None]:
    """A task running ``coroutine``, given the chance to start waiting."""
    task = asyncio.ensure_future(coroutine)
    for _ in range(3):
        await asyncio.sleep(0)
    return task


# -- ids ----------------------------------------------------------------------------------------


def test_event_ids_name_the_stream_and_count_from_one() -> None:
    stream = EventStream("ab12", capacity=8)
    assert stream.priming_id == "ab12_0"
    assert stream.last_seq == 0
    first = stream.publish(b'{"a":1}')
    second = stream.publish(b'{"a":2}')
    assert first == Event("ab12_1", b'{"a":1}')
    assert second.id == "ab12_2"
    assert stream.last_seq == 2
    assert parse_event_id(second.id) == ("ab12", 2)
    assert parse_event_id(stream.priming_id) == ("ab12", 0)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("a1_3", ("a1", 3)),
        ("  a1_0 \t", ("a1", 0)),
        ("f00d7_42", ("f00d7", 42)),
        ("c0ffee12g_7", ("c0ffee12g", 7)),
        ("a" * MAX_STREAM_ID_LENGTH + "_1", ("a" * MAX_STREAM_ID_LENGTH, 1)),
        (f"ab1_{MAX_SEQ}", ("ab1", 2**64 - 1)),  # the largest a Redis stream id holds
    ],
)
def test_parse_event_id_accepts_stream_and_sequence(text: str, parsed: tuple[str, int]) -> None:
    assert parse_event_id(text) == parsed


@pytest.mark.parametrize(
    "text",
    [
        *("", "   ", "a1", "_3", "a1_", "a1_x", "a1_-1", "a1_1.5", "a1_+2", "a1_ 2"),
        # Sequences past a Redis stream id (2**64 - 1), however many digits.
        f"ab1_{2**64}",
        "ab1_" + "9" * 21,
        "ab1_" + "9" * 5000,  # past Python's int() digit limit, too
        # Stream ids this server never makes: other characters, too long, "g" not last.
        "s1_3",
        "a_b_12",
        "AB1_3",
        "ab:1_3",
        "ab*_3",
        "a" * (MAX_STREAM_ID_LENGTH + 1) + "_1",
        "abg1_2",
        "ab1gg_2",
    ],
)
def test_parse_event_id_rejects_malformed_ids(text: str) -> None:
    assert parse_event_id(text) is None


@pytest.mark.parametrize("text", ["a1_\u00b2", "a1_\u00b3", "a1_1\u00b9", "a\u0661_1"])
def test_parse_event_id_rejects_non_ascii_digits(text: str) -> None:
    assert parse_event_id(text) is None


def test_every_stream_id_a_runtime_makes_is_parsed_back() -> None:
    runtime = SessionRuntime("session", events_per_stream=4)
    streams = [runtime.open_stream() for _ in range(40)] + [runtime.open_stream(standalone=True)]
    for stream in streams:
        assert parse_event_id(stream.priming_id) == (stream.id, 0)
        assert parse_event_id(stream.publish(b"{}").id) == (stream.id, 1)


# -- the buffer ---------------------------------------------------------------------------------


def test_events_after_returns_what_follows_a_sequence_number() -> None:
    stream = EventStream("s", capacity=8)
    for number in range(1, 5):
        stream.publish(str(number).encode())
    assert seqs(stream, 0) == [1, 2, 3, 4]
    assert seqs(stream, 2) == [3, 4]
    assert seqs(stream, 4) == []
    assert seqs(stream, 99) == []
    assert [event.payload for _, event in stream.events_after(2)] == [b"3", b"4"]


def test_the_buffer_keeps_only_the_last_capacity_events() -> None:
    stream = EventStream("s", capacity=3)
    for number in range(1, 6):
        stream.publish(str(number).encode())
    assert seqs(stream, 0) == [3, 4, 5]
    assert seqs(stream, 4) == [5]
    # Numbering goes on regardless of what was forgotten.
    assert stream.last_seq == 5
    assert stream.publish(b"6").id == "s_6"
    assert seqs(stream, 0) == [4, 5, 6]


def test_finish_publishes_the_last_message_and_is_idempotent() -> None:
    stream = EventStream("s", capacity=8)
    stream.publish(b"note")
    stream.finish(b"result")
    assert stream.finished
    assert [event.payload for _, event in stream.events_after(0)] == [b"note", b"result"]
    stream.finish(b"again")
    stream.finish()
    assert stream.last_seq == 2
    assert [event.payload for _, event in stream.events_after(0)] == [b"note", b"result"]
    with pytest.raises(RuntimeError, match="finished"):
        stream.publish(b"late")


def test_finish_without_a_payload_adds_no_event() -> None:
    stream = EventStream("s", capacity=8)
    stream.finish()
    assert stream.finished
    assert stream.events_after(0) == []


def test_end_connections_moves_the_generation_but_not_the_stream() -> None:
    stream = EventStream("s", capacity=8)
    assert stream.generation == 0
    stream.end_connections()
    stream.end_connections()
    assert stream.generation == 2
    assert not stream.finished
    assert stream.publish(b"x").id == "s_1"


# -- followers ----------------------------------------------------------------------------------


async def test_wait_beyond_returns_at_once_when_there_is_more() -> None:
    stream = EventStream("s", capacity=8)
    stream.publish(b"1")
    with anyio.fail_after(1):
        await stream.wait_beyond(0, stream.generation)


async def test_wait_beyond_returns_at_once_on_a_finished_stream() -> None:
    stream = EventStream("s", capacity=8)
    stream.finish()
    with anyio.fail_after(1):
        await stream.wait_beyond(0, stream.generation)


async def test_wait_beyond_returns_at_once_for_an_old_generation() -> None:
    stream = EventStream("s", capacity=8)
    old = stream.generation
    stream.end_connections()
    with anyio.fail_after(1):
        await stream.wait_beyond(0, old)


async def test_wait_beyond_wakes_every_follower_on_publish() -> None:
    stream = EventStream("s", capacity=8)
    followers = [await started(stream.wait_beyond(0, 0)) for _ in range(3)]
    assert not any(task.done() for task in followers)
    stream.publish(b"1")
    with anyio.fail_after(1):
        await asyncio.gather(*followers)


async def test_wait_beyond_ignores_events_it_has_already_seen() -> None:
    stream = EventStream("s", capacity=8)
    stream.publish(b"1")
    follower = await started(stream.wait_beyond(1, 0))
    assert not follower.done()
    stream.publish(b"2")
    with anyio.fail_after(1):
        await follower


async def test_wait_beyond_wakes_on_finish() -> None:
    stream = EventStream("s", capacity=8)
    follower = await started(stream.wait_beyond(0, 0))
    assert not follower.done()
    stream.finish()
    with anyio.fail_after(1):
        await follower


async def test_wait_beyond_wakes_on_end_connections_and_the_next_generation_waits() -> None:
    stream = EventStream("s", capacity=8)
    follower = await started(stream.wait_beyond(0, stream.generation))
    assert not follower.done()
    stream.end_connections()
    with anyio.fail_after(1):
        await follower
    # A connection that resumes follows the new generation, and waits for real news.
    resumed = await started(stream.wait_beyond(0, stream.generation))
    assert not resumed.done()
    stream.publish(b"1")
    with anyio.fail_after(1):
        await resumed


# -- SentOnce: the one stream of an HTTP+SSE session ------------------------------------------


def test_sent_once_lets_an_event_go_once_its_follower_has_it() -> None:
    stream = SentOnce("1g", max_bytes=1 << 20)
    for n in range(300):  # more than any replay buffer: nothing is dropped while unsent
        stream.publish(b"x" * n)
    assert [seq for seq, _ in stream.events_after(0)] == list(range(1, 301))
    assert stream.queued_bytes == sum(range(300)) + 300 * EVENT_OVERHEAD
    assert [seq for seq, _ in stream.events_after(299)] == [300]  # 1..299 sent: let go
    assert stream.queued_bytes == 299 + EVENT_OVERHEAD
    assert stream.events_after(300) == []
    assert stream.queued_bytes == 0


def test_sent_once_past_its_bound_ends_the_connection_and_keeps_nothing() -> None:
    stream = SentOnce("1g", max_bytes=10_000)
    generation = stream.generation
    stream.publish(b"a" * 50_000)  # one event of any size goes when none waits
    assert not stream.overflowed
    stream.publish(b"b" * 10)  # a second one, past the bound: the connection ends
    assert stream.overflowed
    assert stream.generation != generation
    assert stream.end_reason == "overflow"
    assert stream.events_after(0) == []
    assert stream.queued_bytes == 0
    stream.publish(b"c" * 10)  # the session is ending: nothing more is kept
    assert stream.events_after(0) == []
    assert not stream.finished  # the transport ends it with its session


def test_sent_once_within_its_bound_while_the_follower_keeps_up() -> None:
    stream = SentOnce("1g", max_bytes=10_000)
    for _ in range(100):  # 100 x 5 KB: twice the bound in all, never waiting together
        stream.publish(b"z" * 5_000)
        stream.events_after(stream.last_seq)  # the follower sent it
    assert not stream.overflowed
