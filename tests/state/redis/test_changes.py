"""server.state.redis.changes: every change logged once with its id, read back after a position."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from server.errors import ServiceUnavailable
from server.state.redis.bus import RedisBus
from server.state.redis.changes import ChangeLog, position_of
from server.state.redis.link import RedisLink
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def test_a_position_is_a_log_entry_id_or_nothing() -> None:
    assert position_of("1700-3") == (1700, 3)
    assert position_of(b"0-0") == (0, 0)
    assert position_of("1700-3") > position_of("1699-99")  # type: ignore[operator]
    for wrong in ("", "17", "a-1", "1-", "-1", "1-2-3", 5, None, "9" * 30 + "-" + "9" * 20):
        assert position_of(wrong) is None


def test_seen_only_moves_forward() -> None:
    log = ChangeLog.__new__(ChangeLog)
    log._seen = (-1, -1)
    log.saw("5-1")
    log.saw("4-9")
    log.saw("not an id")
    assert log.seen == "5-1"
    log.saw(b"5-2")
    assert log.seen == "5-2"


class Replica:
    """A bus and its change log, as one replica has them, with what it heard."""

    def __init__(self, url: str, prefix: str) -> None:
        self.link = RedisLink(url, prefix=prefix, timeout_s=1.0)
        self.changes = ChangeLog(self.link, ttl_s=60)
        self.bus = RedisBus(self.link, self.changes)
        self.heard: list[tuple[str, dict[str, Any]]] = []

    async def start(self) -> None:
        self.bus.start(lambda kind, data: self.heard.append((kind, data)))
        await wait_until(lambda: self.bus.subscribed and self.changes.seen is not None, limit=10)

    async def close(self) -> None:
        await self.bus.close()
        await self.link.close()


@pytest.fixture
async def pair(redis_server: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    prefix = fresh_prefix()
    one, two = Replica(redis_server.url, prefix), Replica(redis_server.url, prefix)
    try:
        await one.start()
        await two.start()
        yield one, two
    finally:
        await one.close()
        await two.close()


async def test_a_change_is_logged_once_and_heard_with_its_position(
    pair: tuple[Replica, Replica],
) -> None:
    one, two = pair
    start = two.changes.seen
    assert start is not None
    one.bus.publish("change", {"kind": "tools", "uri": None})
    one.bus.publish("change", {"kind": "resource_updated", "uri": "mem://a"})
    await wait_until(lambda: len(two.heard) == 2, limit=5)
    assert [kind for kind, _ in two.heard] == ["change", "change"]
    # Both replicas applied them (the sender hears its own back): the same newest id.
    await wait_until(lambda: one.changes.seen == two.changes.seen != start, limit=5)
    assert await two.changes.after(start) == [
        {"kind": "tools", "uri": None},
        {"kind": "resource_updated", "uri": "mem://a"},
    ]
    newest = two.changes.seen
    assert newest is not None
    assert await two.changes.after(newest) == []
    # Other kinds are not logged.
    one.bus.publish("ended", {"sid": "s1"})
    await wait_until(lambda: len(two.heard) == 3, limit=5)
    assert await two.changes.after(newest) == []


async def test_a_call_answers_only_once_its_change_is_logged_else_with_an_error(
    pair: tuple[Replica, Replica], redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 35: a touch was answered before its change went out (queued for the bus's
    # publisher); a replica SIGKILLed, or Redis lost, just then lost the notification while the
    # client held a success. Now the answer waits for the change to be logged and published.
    one, two = pair

    async def touch(uri: str) -> str:
        one.bus.publish("change", {"kind": "resource_updated", "uri": uri})
        return "touched"

    before = await redis_client.xlen(one.changes.key)
    assert await one.changes.shared(touch("mem://t")) == "touched"
    assert await redis_client.xlen(one.changes.key) == before + 1  # in the log before it answers
    await wait_until(
        lambda: (
            ("change", {"kind": "resource_updated", "uri": "mem://t"})
            in [(kind, {k: v for k, v in data.items() if k != "p"}) for kind, data in two.heard]
        ),
        limit=5,
    )

    async def nothing() -> str:
        return "read"

    assert await one.changes.shared(nothing()) == "read"  # nothing changed: nothing waited for

    async def refused(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Redis away")

    monkeypatch.setattr(one.changes, "publish", refused)
    with pytest.raises(ServiceUnavailable, match="could not be shared"):
        await one.changes.shared(touch("mem://lost"))
    assert await redis_client.xlen(one.changes.key) == before + 1


async def test_a_position_trimmed_away_or_a_change_too_big_is_unknown_not_empty(
    pair: tuple[Replica, Replica],
) -> None:
    one, _ = pair
    start = one.changes.seen
    assert start is not None
    for n in range(3):
        one.bus.publish("change", {"kind": "resource_updated", "uri": f"mem://{n}"})
    await wait_until(lambda: one.changes.seen != start, limit=5)
    assert len(await one.changes.after(start) or []) == 3
    newest = one.changes.seen
    assert newest is not None
    # A change too big to log whole (a long URI) is a mark: what came after is unknown.
    one.bus.publish("change", {"kind": "resource_updated", "uri": "mem://" + "x" * 2000})
    await wait_until(lambda: one.changes.seen != newest, limit=5)
    assert await one.changes.after(newest) is None
    assert await one.changes.after(start) is None
    await one.link.client.xtrim(one.changes.key, maxlen=1, approximate=False)
    assert await one.changes.after(start) is None  # some of what came after it is gone
    assert await one.changes.after("not an id") is None


async def test_a_log_gone_is_empty_only_when_it_may_have_expired(
    pair: tuple[Replica, Replica],
) -> None:
    # Redis restarted empty took the log with a change no replica had applied yet: read as
    # "expired, nothing since", a GET stream was never told it. A log refreshed by a change
    # newer than its lifetime cannot have expired, nor is it known after a lost bus.
    one, _ = pair
    one.bus.publish("change", {"kind": "tools", "uri": None})
    await wait_until(lambda: (one.changes.seen or "0-0") != "0-0", limit=5)
    recent = one.changes.seen
    assert recent is not None
    assert await one.changes.after(recent) == []
    await one.link.client.delete(one.changes.key)
    assert await one.changes.after(recent) is None  # lost, not expired
    long_ago = f"{int(time.time() * 1000) - 61_000}-0"  # older than the log's 60 s lifetime
    assert await one.changes.after(long_ago) == []
    assert await one.changes.after("0-0") == []
    assert await one.changes.after(long_ago, outage=True) is None


async def test_an_answer_goes_to_the_replica_that_asked_and_its_sender_learns_if_heard(
    pair: tuple[Replica, Replica],
) -> None:
    one, two = pair
    asked = f"srv-{two.link.replica}-abcdef-1"
    assert await one.bus.send("answer", {"sid": "s1", "id": asked, "result": {}}) is True
    await wait_until(lambda: any(kind == "answer" for kind, _ in two.heard), limit=5)
    assert not any(kind == "answer" for kind, _ in one.heard)
    gone = "srv-0123456789abcdef-abcdef-1"  # a replica nobody runs
    assert await one.bus.send("answer", {"sid": "s1", "id": gone, "result": {}}) is False
    # An id that names no replica goes to every replica, as before.
    assert await one.bus.send("answer", {"sid": "s1", "id": 7, "result": {}}) is True


async def test_a_lost_subscription_is_resynced_with_exactly_the_changes_it_missed(
    pair: tuple[Replica, Replica], redis_client: Any
) -> None:
    # Issue 35: a replica stalled past MCP_REDIS_TIMEOUT_S subscribes again, and what was
    # published meanwhile was lost; its GET streams were told the lists changed, never the
    # resource updates. Now the log says exactly what it missed, and what also comes on the
    # new subscription is not applied twice.
    one, two = pair
    await redis_client.client_kill_filter(_type="pubsub")  # every replica's subscription
    sent: list[dict[str, Any]] = [
        {"kind": "resource_updated", "uri": "mem://missed"},
        {"kind": "tools", "uri": None},
        {"kind": "resource_updated", "uri": "mem://missed"},
    ]
    for data in sent:
        one.bus.publish("change", data)

    def applied() -> list[dict[str, Any]]:
        changes: list[dict[str, Any]] = []
        for kind, data in two.heard:
            changes += data.get("changes", []) if kind == "resync" else []
            changes += [data] if kind == "change" else []
        return changes

    await wait_until(lambda: len(applied()) >= 3 and two.bus.subscribed, limit=10)
    assert any(kind == "resync" and "changes" in data for kind, data in two.heard)
    one.bus.publish("change", {"kind": "prompts", "uri": None})
    await wait_until(lambda: len(applied()) >= 4, limit=5)
    assert applied() == [*sent, {"kind": "prompts", "uri": None}]
