"""server.state.bus: the notification bus between replicas, over a real Redis channel.

Two :class:`RedisBus` instances, each on its own link but with one key prefix, stand for two
replicas. Each test has its own prefix (so its own channel). A test that stops Redis starts it
again in a ``finally``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from server.errors import ServiceUnavailable
from server.state.memory import MemoryBus
from server.state.redis.bus import RedisBus
from server.state.redis.link import RedisLink
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, fresh_prefix

# A real redis-server: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TIMEOUT_S = 0.5


class Node:
    """One replica's bus and what it delivered."""

    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self.bus = RedisBus(link)
        self.got: list[tuple[str, dict[str, Any]]] = []

    def deliver(self, kind: str, data: dict[str, Any]) -> None:
        self.got.append((kind, data))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.got]

    def start(self) -> Node:
        self.bus.start(self.deliver)
        return self


class Cluster:
    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = fresh_prefix()
        self.nodes: list[Node] = []

    def node(self) -> Node:
        node = Node(RedisLink(self.url, prefix=self.prefix, timeout_s=TIMEOUT_S))
        self.nodes.append(node)
        return node

    async def started(self, count: int) -> list[Node]:
        nodes = [self.node().start() for _ in range(count)]
        await wait_until(lambda: all(node.bus.subscribed for node in nodes))
        return nodes

    async def close(self) -> None:
        for node in self.nodes:
            await node.bus.close()
            await node.link.close()


@pytest.fixture
async def cluster(redis_server: RedisServer) -> AsyncIterator[Cluster]:
    made = Cluster(redis_server.url)
    yield made
    await made.close()


# -- delivery -----------------------------------------------------------------------------------


async def test_a_message_reaches_the_other_replica_and_not_its_sender(cluster: Cluster) -> None:
    one, two = await cluster.started(2)
    one.bus.publish("change", {"kind": "tools", "uri": None})
    await wait_until(lambda: two.got)
    assert two.got == [("change", {"kind": "tools", "uri": None})]
    # Whatever reaches `one` after its own message was on the channel: had it delivered its
    # own message, that would be there first.
    two.bus.publish("ended", {"sid": "abc"})
    await wait_until(lambda: one.got)
    assert one.got == [("ended", {"sid": "abc"})]
    assert two.got == [("change", {"kind": "tools", "uri": None})]
    assert one.bus.status() == {
        "kind": "redis",
        "subscribed": True,
        "published": 1,
        "delivered": 1,
        "dropped": 0,
    }


async def test_the_bus_lag_is_measured_on_the_senders_own_messages(cluster: Cluster) -> None:
    one, two = await cluster.started(2)
    assert one.bus.lag_s is None
    one.bus.publish("change", {"kind": "tools", "uri": None})
    await wait_until(lambda: one.bus.lag_s is not None)
    assert one.bus.lag_s is not None
    assert 0 <= one.bus.lag_s < 10
    assert two.bus.lag_s is None  # it heard one's message, but its own clock did not send it


async def test_every_other_replica_hears_a_message(cluster: Cluster) -> None:
    one, two, three = await cluster.started(3)
    one.bus.publish("subs", {"sid": "s", "add": "file:///a"})
    await wait_until(lambda: two.got and three.got)
    assert two.got == three.got == [("subs", {"sid": "s", "add": "file:///a"})]


async def test_two_hundred_messages_arrive_in_order(cluster: Cluster) -> None:
    one, two = await cluster.started(2)
    for number in range(200):
        one.bus.publish("answer", {"sid": "s", "id": number})
    await wait_until(lambda: len(two.got) >= 200)
    await asyncio.sleep(0.05)
    assert [data["id"] for _, data in two.got] == list(range(200))
    assert one.bus.published == 200
    assert two.bus.delivered == 200
    assert one.got == []


async def test_malformed_messages_are_ignored_and_later_ones_arrive(
    cluster: Cluster, redis_client: Any
) -> None:
    (one,) = await cluster.started(1)
    channel = one.bus.channel
    for garbage in [
        b"\xff\xfe not json",
        b"",
        b"[1, 2, 3]",
        b'"a string"',
        b'{"o": "elsewhere"}',
        b'{"o": "elsewhere", "k": "change"}',
        b'{"k": "change", "d": {}}',
    ]:
        await redis_client.publish(channel, garbage)
    await redis_client.publish(
        channel, orjson.dumps({"o": "elsewhere", "k": "ended", "d": {"sid": "x"}})
    )
    await wait_until(lambda: one.got)
    await asyncio.sleep(0.05)
    assert one.got == [("ended", {"sid": "x"})]
    assert one.bus.delivered == 1
    assert one.bus.subscribed


async def test_a_failing_handler_does_not_stop_the_listener(cluster: Cluster) -> None:
    one, two = await cluster.started(2)
    seen: list[str] = []

    def deliver(kind: str, data: dict[str, Any]) -> None:
        seen.append(kind)
        if kind == "boom":
            raise RuntimeError("a handler's bug")

    # Swap the handler: restart `two`'s bus with one that fails on "boom".
    await two.bus.close()
    two.bus.start(deliver)
    await wait_until(lambda: two.bus.subscribed)
    one.bus.publish("boom", {})
    one.bus.publish("after", {})
    await wait_until(lambda: "after" in seen)
    assert seen == ["boom", "after"]


# -- outages ------------------------------------------------------------------------------------


async def test_after_an_outage_the_listener_resubscribes_and_resyncs_once(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, two = await cluster.started(2)
    with redis_server.stopped():
        await wait_until(lambda: not one.bus.subscribed and not two.bus.subscribed)
        assert not two.link.connected
        one.bus.publish("change", {"kind": "tools", "uri": None})  # lost: nobody hears it
        await wait_until(lambda: one.bus.dropped == 1)
    await wait_until(lambda: "resync" in one.kinds() and "resync" in two.kinds())
    await wait_until(lambda: one.bus.subscribed and two.bus.subscribed)
    assert one.link.connected
    assert two.link.connected
    one.bus.publish("change", {"kind": "prompts", "uri": None})
    await wait_until(lambda: ("change", {"kind": "prompts", "uri": None}) in two.got)
    two.bus.publish("ended", {"sid": "s"})
    await wait_until(lambda: ("ended", {"sid": "s"}) in one.got)
    # Told at once that the subscription is lost (its streams' messages may be), once.
    assert two.got == [("away", {}), ("resync", {}), ("change", {"kind": "prompts", "uri": None})]
    assert one.got == [("away", {}), ("resync", {}), ("ended", {"sid": "s"})]


async def test_a_stalled_redis_is_a_lost_subscription_within_the_redis_timeout(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, two = await cluster.started(2)
    with redis_server.paused():  # its sockets stay open: only the unanswered ping tells
        stalled = time.monotonic()
        await wait_until(lambda: "away" in one.kinds() and "away" in two.kinds(), limit=5)
        noticed = time.monotonic() - stalled
        assert not one.bus.subscribed
        assert not one.link.connected  # readiness says so too
        assert "resync" not in one.kinds()  # resubscribing to a stalled Redis proves nothing
        await asyncio.sleep(1.5)
        assert "resync" not in one.kinds()
    # The ping is answered within TIMEOUT_S, and sent after check_s of silence.
    assert noticed < TIMEOUT_S + 2 * one.bus.check_s + 1.0
    await wait_until(lambda: one.bus.subscribed and two.bus.subscribed, limit=10)
    assert one.kinds() == ["away", "resync"]
    one.bus.publish("ended", {"sid": "s"})
    await wait_until(lambda: ("ended", {"sid": "s"}) in two.got)


async def test_a_stream_message_that_cannot_go_out_comes_back_as_unsent(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, _ = await cluster.started(2)
    with redis_server.stopped():
        await wait_until(lambda: not one.link.connected)
        one.bus.publish("sse", {"sid": "s1", "m": "{}"})
        one.bus.publish("sse", {"sid": "s1", "m": "{}"})
        one.bus.publish("sse", {"sid": "s2", "m": "{}"})
        one.bus.publish("ended", {"sid": "s3"})
        await wait_until(lambda: one.bus.dropped == 4)
    # Once per session and batch; only a stream's messages (the others have no one waiting).
    unsent = [data for kind, data in one.got if kind == "unsent"]
    assert {data["sid"] for data in unsent} == {"s1", "s2"}
    assert all(data["k"] == "sse" for data in unsent)


async def stream_held(node: Node, session_id: str, held: bool) -> None:
    async with asyncio.timeout(5):
        while await node.bus.stream_held(session_id) != held:  # noqa: ASYNC110 - Redis's answer
            await asyncio.sleep(0.01)


async def test_a_stream_message_reaches_only_the_replica_holding_the_stream(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, two, three = await cluster.started(3)
    assert not await one.bus.stream_held("s1")
    await two.bus.hold("s1")  # returns once Redis confirmed the subscription
    assert await one.bus.stream_held("s1")
    assert await two.bus.stream_held("s1")
    one.bus.publish("sse", {"sid": "s1", "m": "{}"})
    await wait_until(lambda: two.got)
    assert two.got == [("sse", {"sid": "s1", "m": "{}"})]
    # Held through an outage: subscribed again with the bus's channel.
    with redis_server.stopped():
        await wait_until(lambda: not two.bus.subscribed)
    await wait_until(lambda: two.bus.subscribed and one.bus.subscribed, limit=10)
    one.bus.publish("sse", {"sid": "s1", "m": "[]"})
    await wait_until(lambda: ("sse", {"sid": "s1", "m": "[]"}) in two.got)
    assert [kind for kind in three.kinds() if kind == "sse"] == []
    assert "unsent" not in one.kinds()
    # Let go (or its replica gone): a message for it reached nobody, and its sender is told.
    two.bus.release("s1")
    await stream_held(one, "s1", False)
    one.bus.publish("sse", {"sid": "s1", "m": "{}"})
    await wait_until(lambda: ("unsent", {"k": "sse", "sid": "s1"}) in one.got)


async def test_a_command_refused_by_redis_is_no_outage_and_no_resync(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, two = await cluster.started(2)
    with pytest.raises(ServiceUnavailable):  # an error reply: "ERR Invalid stream ID"
        await one.link.run(one.link.client.xrange(one.link.key("s"), f"0-{2**64}", "+"))
    assert one.link.connected
    # Longer than the listener takes to notice a lost link (1 s) and to resubscribe (1 s).
    await asyncio.sleep(2.5)
    assert one.bus.subscribed
    assert one.got == []  # no "resync": its streams are not told their lists changed
    one.bus.publish("ended", {"sid": "s"})
    await wait_until(lambda: two.got)
    assert two.got == [("ended", {"sid": "s"})]


async def test_a_subscribe_refused_by_redis_is_no_outage(
    redis_server: RedisServer, redis_client: Any
) -> None:
    user = f"nosub{time.monotonic_ns()}"
    # This user may run commands but not SUBSCRIBE: Redis answers NOPERM, and keeps answering.
    await redis_client.execute_command(
        "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-subscribe"
    )
    url = redis_server.url.replace("redis://", f"redis://{user}:pw@")
    link = RedisLink(url, prefix=fresh_prefix(), timeout_s=TIMEOUT_S)
    node = Node(link).start()
    try:
        await wait_until(lambda: link.refused >= 1)
        assert "no permissions to run the 'subscribe' command" in link.status()["last_refusal"]
        assert link.connected  # not taken for Redis lost: readiness stays
        assert "error" not in link.status()
        assert await link.run(link.client.ping()) is True
    finally:
        await node.bus.close()
        await link.close()
        await redis_client.execute_command("ACL", "DELUSER", user)


async def test_messages_queued_while_redis_is_away_are_dropped_and_counted(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, _ = await cluster.started(2)
    with redis_server.stopped():
        await wait_until(lambda: not one.link.connected)
        for number in range(3):
            one.bus.publish("answer", {"sid": "s", "id": number})
        await wait_until(lambda: one.bus.dropped == 3)
        assert one.bus.published == 0


async def test_publish_before_start_is_dropped_and_counted(redis_server: RedisServer) -> None:
    link = RedisLink(redis_server.url, prefix=fresh_prefix(), timeout_s=TIMEOUT_S)
    try:
        bus = RedisBus(link)
        bus.publish("change", {"kind": "tools"})
        bus.publish("ended", {"sid": "s"})
        assert bus.dropped == 2
        assert bus.status() == {
            "kind": "redis",
            "subscribed": False,
            "published": 0,
            "delivered": 0,
            "dropped": 2,
        }
        await bus.close()  # never started: nothing to stop
    finally:
        await link.close()


async def test_close_returns_promptly_and_sends_what_is_queued(cluster: Cluster) -> None:
    one, two = await cluster.started(2)
    for number in range(50):
        one.bus.publish("answer", {"sid": "s", "id": number})
    started = time.monotonic()
    await one.bus.close()
    assert time.monotonic() - started < 1
    assert one.bus.published == 50
    await wait_until(lambda: len(two.got) == 50)
    started = time.monotonic()
    await two.bus.close()  # idle: its listener waits in get_message
    assert time.monotonic() - started < 1
    assert not two.bus.subscribed


async def test_close_returns_promptly_while_redis_is_away(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    one, _ = await cluster.started(2)
    with redis_server.stopped():
        await wait_until(lambda: not one.bus.subscribed)
        one.bus.publish("change", {"kind": "tools"})
        started = time.monotonic()
        await one.bus.close()
        assert time.monotonic() - started < TIMEOUT_S * 2 + 1


# -- one process --------------------------------------------------------------------------------


async def test_the_local_bus_does_nothing() -> None:
    bus = MemoryBus()
    got: list[Any] = []
    bus.start(lambda kind, data: got.append(kind))
    bus.publish("change", {"kind": "tools"})
    await asyncio.sleep(0.01)
    await bus.close()
    assert got == []
    assert bus.status() == {"kind": "local"}
