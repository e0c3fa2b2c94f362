"""server.state.mirror: legacy stream events copied to Redis Streams, replayed and followed.

One :class:`RedisMirror` copies a tracked :class:`EventStream` (as the replica that runs the
call does); another, on its own link with the same prefix, opens and tails the copy (as the
replica a client resumed on does). Each test has its own prefix; a test that stops Redis starts
it again in a ``finally``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from server.errors import ServiceUnavailable
from server.legacy.eventstream import MAX_SEQ, Copy, EventStream
from server.state.memory import MemoryMirror
from server.state.redis.link import RedisLink
from server.state.redis.mirror import RedisMirror
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.5
SESSION = "session-1"
END_501 = [(b"0-501", {b"e": b"1"})]  # the end marker after event 500
TTL_S = 10.0


class Pair:
    """The replica that runs a stream (``source``) and the one a client resumes on (``other``)."""

    def __init__(self, url: str, capacity: int) -> None:
        prefix = fresh_prefix()
        self.links = [RedisLink(url, prefix=prefix, timeout_s=TIMEOUT_S) for _ in range(2)]
        self.source = RedisMirror(self.links[0], capacity=capacity, ttl_s=TTL_S)
        self.other = RedisMirror(self.links[1], capacity=capacity, ttl_s=TTL_S)
        self.capacity = capacity
        self.source.start()
        self.other.start()

    def key(self, stream_id: str, session_id: str = SESSION) -> str:
        return self.links[0].key("events", session_id, stream_id)

    def tracked(self, stream_id: str = "ab1") -> EventStream:
        stream = EventStream(stream_id, self.capacity)
        self.source.track(SESSION, stream)
        return stream

    async def close(self) -> None:
        for mirror in (self.source, self.other):
            await mirror.close()
        for link in self.links:
            await link.close()


@pytest.fixture
async def pair(redis_server: RedisServer) -> AsyncIterator[Pair]:
    made = Pair(redis_server.url, capacity=16)
    yield made
    await made.close()


async def copied(redis_client: Any, key: str, entries: int) -> None:
    """Wait until the mirror's writer has put ``entries`` entries (end marker included)."""
    async with asyncio.timeout(5):
        while await redis_client.xlen(key) < entries:  # noqa: ASYNC110 - Redis is polled
            await asyncio.sleep(0.005)


def opened(copy: Copy | None) -> Copy | None:
    """A copy read back, but for the replica that wrote it (each Pair's own)."""
    return None if copy is None else replace(copy, holder=None)


def plain(entries: list[Any]) -> list[Any]:
    """Entries without what only a copy's newest entry of a write carries (its replica, ...)."""
    return [
        (entry_id, {k: v for k, v in fields.items() if k in (b"d", b"e")})
        for entry_id, fields in entries
    ]


def publish(stream: EventStream, *numbers: int) -> None:
    for number in numbers:
        stream.publish(b'{"n":%d}' % number)


def payload(number: int) -> bytes:
    return b'{"n":%d}' % number


def seqs_and_ids(stream: EventStream) -> list[tuple[int, str]]:
    return [(seq, event.id) for seq, event in stream.events_after(0)]


# -- copying ------------------------------------------------------------------------------------


async def test_events_land_in_redis_under_their_seqs(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked()
    publish(stream, 1, 2, 3)
    await copied(redis_client, pair.key(stream.id), 3)
    entries = plain(await redis_client.xrange(pair.key(stream.id)))
    assert entries == [(f"0-{n}".encode(), {b"d": payload(n)}) for n in (1, 2, 3)]
    assert 0 < await redis_client.pttl(pair.key(stream.id)) <= TTL_S * 1000


async def test_open_returns_exactly_the_events_after_a_seq(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked()
    publish(stream, 1, 2, 3, 4, 5)
    await copied(redis_client, pair.key(stream.id), 5)
    copy = opened(await pair.other.open(SESSION, stream.id, after=2))
    assert copy == Copy([(3, payload(3)), (4, payload(4)), (5, payload(5))], finished=False)
    everything = opened(await pair.other.open(SESSION, stream.id, after=0))
    assert everything is not None
    assert [seq for seq, _ in everything.events] == [1, 2, 3, 4, 5]
    # Resumed at the newest event of a stream still running: nothing yet, not finished.
    assert opened(await pair.other.open(SESSION, stream.id, after=5)) == Copy([], finished=False)


async def test_finish_writes_the_end_marker(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked()
    publish(stream, 1, 2, 3, 4)
    stream.finish(payload(5))  # the call's result is the last event
    await copied(redis_client, pair.key(stream.id), 6)
    last = plain(await redis_client.xrevrange(pair.key(stream.id), count=1))
    assert last == [(b"0-6", {b"e": b"1"})]
    copy = opened(await pair.other.open(SESSION, stream.id, after=3))
    assert copy == Copy([(4, payload(4)), (5, payload(5))], finished=True)
    # At or after the last event: nothing follows, but the stream did finish.
    assert opened(await pair.other.open(SESSION, stream.id, after=5)) == Copy([], finished=True)
    assert opened(await pair.other.open(SESSION, stream.id, after=6)) == Copy([], finished=True)
    assert opened(await pair.other.open(SESSION, stream.id, after=1000)) == Copy([], finished=True)


async def test_the_largest_seq_an_event_id_may_name_is_a_valid_redis_id(
    pair: Pair, redis_client: Any
) -> None:
    # parse_event_id lets a client name sequences up to MAX_SEQ: each must be a command Redis
    # accepts (a refused one would be a 503 for a well-formed id).
    stream = pair.tracked()
    publish(stream, 1)
    await copied(redis_client, pair.key(stream.id), 1)
    assert opened(await pair.other.open(SESSION, stream.id, after=MAX_SEQ)) == Copy(
        [], finished=False
    )
    with pytest.raises(ServiceUnavailable):  # one past it: what parse_event_id refuses
        opened(await pair.other.open(SESSION, stream.id, after=MAX_SEQ + 1))
    assert pair.links[1].refused == 1
    assert pair.links[1].connected


async def test_an_unknown_stream_is_none(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked()
    publish(stream, 1)
    await copied(redis_client, pair.key(stream.id), 1)
    assert opened(await pair.other.open(SESSION, "nope", after=0)) is None
    assert opened(await pair.other.open("another-session", stream.id, after=0)) is None


async def test_copies_are_bounded_and_keep_the_newest_events(
    redis_server: RedisServer, redis_client: Any
) -> None:
    pair = Pair(redis_server.url, capacity=10)
    try:
        stream = pair.tracked()
        publish(stream, *range(1, 500))
        stream.finish(payload(500))
        async with asyncio.timeout(5):  # until the end marker (after event 500) is there
            while plain(await redis_client.xrevrange(pair.key(stream.id), count=1)) != END_501:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        # MAXLEN ~ trims whole nodes: about the capacity, never the whole stream.
        length = await redis_client.xlen(pair.key(stream.id))
        assert 10 < length < 250
        copy = opened(await pair.other.open(SESSION, stream.id, after=0))
        assert copy is not None
        assert copy.finished
        seqs = [seq for seq, _ in copy.events]
        assert len(seqs) <= pair.capacity + 1
        assert seqs[-1] == 500  # the newest are kept, the call's result among them
        assert seqs == list(range(seqs[0], 501))
        recent = opened(await pair.other.open(SESSION, stream.id, after=495))
        assert recent == Copy([(n, payload(n)) for n in range(496, 501)], finished=True)
    finally:
        await pair.close()


# -- standing in for the other replica's stream --------------------------------------------------


async def test_copy_stream_keeps_the_original_seqs(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked("ab7")
    publish(stream, 1, 2, 3, 4, 5)
    await copied(redis_client, pair.key(stream.id), 5)
    copy = opened(await pair.other.open(SESSION, stream.id, after=2))
    assert copy is not None
    local = copy.stream(stream.id, after=2, capacity=16)
    assert seqs_and_ids(local) == [(3, "ab7_3"), (4, "ab7_4"), (5, "ab7_5")]
    assert [event.payload for _, event in local.events_after(3)] == [payload(4), payload(5)]
    assert local.last_seq == 5
    assert not local.finished
    assert local.publish(b"next").id == "ab7_6"  # numbering goes on where the original is


def test_copy_stream_with_gaps_and_with_nothing() -> None:
    gappy = Copy([(3, b"a"), (7, b"b")], finished=True).stream("s9", after=1, capacity=8)
    assert seqs_and_ids(gappy) == [(3, "s9_3"), (7, "s9_7")]
    assert gappy.finished
    assert gappy.last_seq == 7
    empty = Copy([], finished=False).stream("s9", after=12, capacity=8)
    assert empty.events_after(0) == []
    assert empty.last_seq == 12
    assert empty.publish(b"x").id == "s9_13"


# -- following ----------------------------------------------------------------------------------


async def test_tail_follows_the_stream_until_its_end_marker(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked("cd2")
    publish(stream, 1, 2)
    await copied(redis_client, pair.key(stream.id), 2)
    copy = opened(await pair.other.open(SESSION, stream.id, after=1))
    assert copy is not None
    local = copy.stream(stream.id, after=1, capacity=16)
    generation = local.generation
    follower = asyncio.create_task(local.wait_beyond(2, generation))
    tail = asyncio.create_task(pair.other.tail(SESSION, local))
    await asyncio.sleep(0.05)
    assert not follower.done()
    publish(stream, 3, 4)
    async with asyncio.timeout(3):
        await follower  # a connection following the local copy is woken
    stream.finish(payload(5))
    async with asyncio.timeout(3):
        await tail
    assert local.finished
    assert seqs_and_ids(local) == [(n, f"cd2_{n}") for n in range(2, 6)]
    assert [event.payload for _, event in local.events_after(0)] == [
        payload(n) for n in range(2, 6)
    ]
    assert local.end_reason == "complete"
    assert local.generation == generation


async def test_tail_of_a_finished_copy_returns_at_once(pair: Pair, redis_client: Any) -> None:
    stream = pair.tracked()
    publish(stream, 1)
    stream.finish()
    await copied(redis_client, pair.key(stream.id), 2)
    copy = opened(await pair.other.open(SESSION, stream.id, after=0))
    assert copy == Copy([(1, payload(1))], finished=True)
    local = copy.stream(stream.id, after=0, capacity=16)
    async with asyncio.timeout(0.5):
        await pair.other.tail(SESSION, local)


async def test_tail_ends_the_connections_when_redis_goes_away(
    pair: Pair, redis_client: Any, redis_server: RedisServer
) -> None:
    stream = pair.tracked()
    publish(stream, 1)
    await copied(redis_client, pair.key(stream.id), 1)
    copy = opened(await pair.other.open(SESSION, stream.id, after=0))
    assert copy is not None
    local = copy.stream(stream.id, after=0, capacity=16)
    follower = asyncio.create_task(local.wait_beyond(local.last_seq, local.generation))
    tail = asyncio.create_task(pair.other.tail(SESSION, local))
    await asyncio.sleep(0.05)  # blocked in XREAD
    with redis_server.stopped():
        started = time.monotonic()
        async with asyncio.timeout(TIMEOUT_S * 2 + 2):
            await tail
        assert time.monotonic() - started < TIMEOUT_S * 2 + 1
        async with asyncio.timeout(1):
            await follower  # its connection ends: the client reconnects with Last-Event-ID
        assert local.end_reason == "shared_state_lost"
        assert not local.finished  # the stream goes on; only the connections end
        # Events of the running call cannot be copied meanwhile: dropped and counted.
        publish(stream, 2, 3)
        await wait_until(lambda: pair.source.dropped == 2)


async def test_tail_with_redis_already_away_ends_at_once(
    pair: Pair, redis_server: RedisServer
) -> None:
    local = EventStream("zz1", 16)
    with redis_server.stopped():
        async with asyncio.timeout(TIMEOUT_S * 2 + 2):
            await pair.other.tail(SESSION, local)
    assert local.end_reason == "shared_state_lost"
    assert local.generation == 1


# -- lifecycle ----------------------------------------------------------------------------------


async def test_an_untracked_or_unstarted_mirror_copies_nothing(
    redis_server: RedisServer, redis_client: Any
) -> None:
    link = RedisLink(redis_server.url, prefix=fresh_prefix(), timeout_s=TIMEOUT_S)
    mirror = RedisMirror(link, capacity=8, ttl_s=TTL_S)
    try:
        stream = EventStream("ab1", 8)
        mirror.track(SESSION, stream)
        publish(stream, 1)  # not started: the observer has nowhere to queue
        stream.finish()
        assert await redis_client.exists(link.key("events", SESSION, "ab1")) == 0
        started = time.monotonic()
        await mirror.close()
        assert time.monotonic() - started < 1
    finally:
        await link.close()


async def test_close_is_prompt(pair: Pair) -> None:
    started = time.monotonic()
    await pair.source.close()
    await pair.other.close()
    assert time.monotonic() - started < 1


async def test_the_local_mirror_does_nothing() -> None:
    mirror = MemoryMirror()
    mirror.start()
    stream = EventStream("ab1", 4)
    mirror.track(SESSION, stream)
    assert stream.observer is None
    assert await mirror.open(SESSION, "ab1", after=0) is None
    await mirror.tail(SESSION, stream)
    await mirror.close()


async def test_a_get_stream_that_sent_nothing_leaves_where_it_started(
    pair: Pair, redis_client: Any
) -> None:
    """Its replica killed before the stream's first event, a resume still knows which changes
    came after it (issue 35: without it, two changes in the gap were told as one "all
    updated"); a call's stream leaves no such start, and the start goes with the session."""
    pair.source.changes.saw("1700000000000-3")
    get_stream, call_stream = pair.tracked("ab7g"), pair.tracked("ab8")
    await wait_until(lambda: pair.source._queue is not None and pair.source._queue.empty())
    await asyncio.sleep(0.1)  # the batch's round trip
    copy = await pair.other.open(SESSION, get_stream.id, after=0)
    assert copy == Copy([], finished=False, position="1700000000000-3")
    assert await pair.other.open(SESSION, call_stream.id, after=0) is None
    pair.source.forget(SESSION)
    await wait_until(lambda: pair.source._queue is not None and pair.source._queue.empty())
    await asyncio.sleep(0.1)
    assert await pair.other.open(SESSION, get_stream.id, after=0) is None


# -- the copies go with their session (issue 35) --------------------------------------------------


async def test_forget_deletes_the_sessions_copies_and_copies_nothing_more(
    pair: Pair, redis_client: Any
) -> None:
    first, second = pair.tracked("ab1"), pair.tracked("ab2g")
    publish(first, 1, 2)
    publish(second, 1)
    pair.source.forget(SESSION)  # what was queued is written, then deleted with the rest
    first.finish()  # the end marker of a stream ended with its session: not copied
    publish(second, 2)
    listed = pair.links[0].key("streams", SESSION)
    await wait_until(lambda: pair.source._queue is not None and pair.source._queue.empty())
    await asyncio.sleep(0.1)  # the last batch's round trip
    for key in (pair.key("ab1"), pair.key("ab2g"), listed):
        assert await redis_client.exists(key) == 0, key


@pytest.mark.slow
async def test_no_copies_are_left_once_the_sessions_are_deleted(
    redis_server: RedisServer, redis_client: Any
) -> None:
    # Two replicas; six sessions, each with its GET stream on A hearing two updates and a
    # streamed call on B (both copied to Redis), DELETEd through either replica. Nothing of
    # `<prefix>:events:*` (713 keys, 5.4 MB after one load run on main) may stay behind.
    from server.app import Application
    from server.settings import Settings
    from tests.support.deploy_helpers import (
        legacy_headers,
        modern_call,
        modern_headers,
        open_session,
        sse_get_headers,
    )
    from tests.support.live_server import ServerThread
    from tests.support.mcp_client import sse_messages
    from tests.support.replica_catalog import COUNTER_URI, catalog

    prefix = fresh_prefix()
    settings = Settings(
        redis_url=redis_server.url,
        redis_prefix=prefix,
        redis_timeout_s=0.5,
        state_secret="a shared secret for both replicas",
        records=["none"],
    )
    threads = [ServerThread(Application(settings, catalog), check_health=True) for _ in "ab"]
    for thread in threads:
        thread.start()
    a, b = (thread.url for thread in threads)

    async def keys() -> list[bytes]:
        return [key async for key in redis_client.scan_iter(match=f"{prefix}:*")]

    try:
        async with httpx.AsyncClient(timeout=10) as client:
            sessions = [await open_session(client, f"{a}/mcp") for _ in range(6)]
            for sid in sessions:
                subscribe = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "resources/subscribe",
                    "params": {"uri": COUNTER_URI},
                }
                done = await client.post(f"{a}/mcp", json=subscribe, headers=legacy_headers(sid))
                assert done.status_code == 200, done.text
                async with client.stream("GET", f"{a}/mcp", headers=sse_get_headers(sid)) as get:
                    messages = sse_messages(get, limit=5)
                    for n in range(2):
                        touch = modern_call("touch", {}, n)
                        await client.post(f"{b}/mcp", json=touch, headers=modern_headers(touch))
                        assert (await anext(messages))["method"].endswith("resources/updated")
                work = {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {
                        "name": "work",
                        "arguments": {"seconds": 0.01},
                        "_meta": {"progressToken": "p"},
                    },
                }
                streamed = await client.post(f"{b}/mcp", json=work, headers=legacy_headers(sid))
                assert streamed.headers["content-type"].startswith("text/event-stream")
            await asyncio.sleep(0.3)
            copies = [key for key in await keys() if b":events:" in key]
            assert len(copies) >= 2 * len(sessions)  # both streams of each were copied
            for n, sid in enumerate(sessions):
                ended = await client.delete(f"{(a, b)[n % 2]}/mcp", headers=legacy_headers(sid))
                assert ended.status_code == 200
        deadline = time.monotonic() + 5
        while left := [key for key in await keys() if b":events:" in key or b":streams:" in key]:
            assert time.monotonic() < deadline, f"{len(left)} copies left: {left[:4]}"
            await asyncio.sleep(0.05)
    finally:
        for thread in threads:
            thread.stop()
