"""The notification bus over Redis pub/sub (see :mod:`server.state.bus` for what travels on it).

:class:`RedisBus` publishes on one Redis channel and delivers what other replicas publish (its
own messages come back too and are skipped). Publishing never blocks the caller: messages queue
(bounded) for one publisher task that keeps their order. Pub/sub keeps nothing for a subscriber
that is away, so losing the subscription is told locally at once (``away``: what other replicas
send meanwhile is lost), and ``resync`` once subscribed again. A stalled Redis closes no socket,
so the listener pings on its own connection when the channel is quiet: silence for
``MCP_REDIS_TIMEOUT_S`` past a ping is a lost subscription too. A message for a session's
stream that did not go out (Redis failed, or nobody was subscribed) comes back locally as
``unsent``, so the replica that ran the call learns its answer was lost. A ``change`` is also
kept in the change log (:mod:`server.state.redis.changes`) as it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from redis.asyncio.client import PubSub

from server.aio import next_batch, stop_task
from server.errors import ServiceUnavailable
from server.legacy.runtime import asked_by
from server.state.bus import Deliver
from server.state.redis.changes import ChangeLog, position_of
from server.state.redis.link import PING_LOST_S, RedisLink, command_refused, redis_failure

log = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000
PUBLISH_BATCH = 256

# (channel, message, whether it is a change to log, what waits to learn if it was heard)
Queued = tuple[str, bytes, bool, "asyncio.Future[bool] | None"]


def replica_channel(link: RedisLink, origin: str) -> str:
    """The channel a replica stays subscribed to while it runs: Redis drops the subscription
    with its connection, so another replica can tell it is gone (PUBSUB NUMSUB)."""
    return f"{link.key('bus')}:r:{origin}"


class RedisBus:
    def __init__(self, link: RedisLink, changes: ChangeLog | None = None) -> None:
        self.link = link
        self.channel = link.key("bus")
        self.origin = link.replica
        self.changes = changes
        self._queue: asyncio.Queue[Queued] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._local: Deliver | None = None
        # The channels of the HTTP+SSE streams held here, each with its SUBSCRIBE confirmed.
        self._held: dict[str, asyncio.Future[None]] = {}
        self._pubsub: PubSub | None = None
        self._releases: set[asyncio.Task[None]] = set()
        self._missed = False  # the subscription was lost: resync once it is back
        # The newest change a resync replayed from the log: not applied again when it comes.
        self._replayed: tuple[int, int] | None = None
        # How often a quiet subscription is checked with a ping, and how long it may stay
        # silent past one before it counts as lost.
        self.check_s = min(1.0, link.timeout_s / 2)
        self.published = 0
        self.delivered = 0
        self.dropped = 0  # not published: queue full or Redis away
        self.subscribed = False
        # From publishing a message to hearing it back, the last time (the sender's own clock:
        # no skew between replicas); None until one came back.
        self.lag_s: float | None = None

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        self._enqueue(kind, data, None)

    async def send(self, kind: str, data: dict[str, Any]) -> bool | None:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if not self._enqueue(kind, data, future):
            raise _bus_away()
        try:
            async with asyncio.timeout(self.link.timeout_s):
                return await future
        except TimeoutError:
            raise _bus_away() from None

    def _enqueue(self, kind: str, data: dict[str, Any], heard: asyncio.Future[bool] | None) -> bool:
        if self._queue is None:
            self.dropped += 1
            return False
        message = orjson.dumps({"o": self.origin, "k": kind, "d": data, "t": time.monotonic()})
        session_id = data.get("sid")
        channel = self.channel
        if kind == "sse" and isinstance(session_id, str):
            channel = self._stream_channel(session_id)  # only the replica holding it hears it
        elif kind == "answer" and (asker := asked_by(data.get("id"))) is not None:
            channel = replica_channel(self.link, asker)  # only the replica that asked
        logged = kind == "change" and self.changes is not None
        try:
            self._queue.put_nowait((channel, message, logged, heard))
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        if logged and self.changes is not None:
            self.changes.queued()
        return True

    def start(self, deliver: Deliver) -> None:
        self._local = deliver
        self._queue = asyncio.Queue(QUEUE_LIMIT)
        self._tasks = [
            asyncio.create_task(self._publisher(), name="bus-publisher"),
            asyncio.create_task(self._listener(deliver), name="bus-listener"),
        ]

    async def close(self) -> None:
        queue = self._queue
        if queue is not None and self.link.connected:
            # Give what is queued (a last change, a session ending) a moment to go out.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.link.timeout_s):
                    await queue.join()
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []

    def status(self) -> dict[str, Any]:
        return {
            "kind": "redis",
            "subscribed": self.subscribed,
            "published": self.published,
            "delivered": self.delivered,
            "dropped": self.dropped,
        }

    async def _publisher(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            batch = await next_batch(queue, PUBLISH_BATCH)
            try:
                await self._publish(batch)
            finally:
                for _ in batch:
                    queue.task_done()

    async def _publish(self, batch: list[Queued]) -> None:
        changes = self.changes
        ok = True
        try:
            async with self.link.client.pipeline(transaction=False) as pipe:
                for channel, message, logged, _ in batch:
                    if logged and changes is not None:
                        await changes.publish(pipe, channel, message)
                    else:
                        pipe.publish(channel, message)
                receivers = await self.link.run(pipe.execute())
            self.published += len(batch)
            # A change no replica heard (not even this one: every subscription gone, as Redis
            # shuts down) reaches a stream only by a resync from the log, which may be lost too.
            heard = zip(batch, receivers, strict=True)
            ok = all(int(n) > 0 for (_, _, logged, _), n in heard if logged)
        except Exception:
            # Redis away (ServiceUnavailable, logged by the link) or a bug: either way
            # these are gone; subscribers resync when Redis is back.
            ok = False
            if self.link.connected:
                log.exception("publishing on the bus failed")
            self.dropped += len(batch)
            self._tell(batch, None)
            self._unsent([message for _, message, _, _ in batch])
            return
        finally:
            if changes is not None:
                changes.sent(sum(logged for _, _, logged, _ in batch), ok=ok)
        self._tell(batch, receivers)
        # Nobody subscribed: for a stream's message, no replica holds that stream any more.
        heard = zip(batch, receivers, strict=True)
        self._unsent([message for (_, message, _, _), count in heard if count == 0])

    @staticmethod
    def _tell(batch: list[Queued], receivers: list[Any] | None) -> None:
        """Tell those waiting whether their message was heard (None: it did not go out)."""
        for index, (_, _, _, heard) in enumerate(batch):
            if heard is None or heard.done():
                continue
            if receivers is None:
                heard.set_exception(_bus_away())
            else:
                heard.set_result(int(receivers[index]) > 0)

    def _unsent(self, messages: list[bytes]) -> None:
        """Tell this replica which sessions' stream messages did not go out (once each)."""
        if self._local is None or not messages:
            return
        sessions: dict[str, None] = {}
        for message in messages:
            event = orjson.loads(message)
            if event["k"] == "sse":
                sessions[event["d"]["sid"]] = None
        for session_id in sessions:
            try:
                self._local("unsent", {"k": "sse", "sid": session_id})
            except Exception:
                log.exception("handling an unsent bus message failed")

    async def _listener(self, deliver: Deliver) -> None:
        while True:
            # Subscribe confirmations come through: only one proves the subscription works.
            pubsub: PubSub = self.link.client.pubsub()
            try:
                channels = list(self._held)
                await pubsub.subscribe(
                    self.channel, replica_channel(self.link, self.origin), *channels
                )
                self._pubsub = pubsub  # from now on hold() subscribes on it itself
                if missing := [channel for channel in self._held if channel not in channels]:
                    await pubsub.subscribe(*missing)  # held while this one subscribed
                await self._listen(pubsub, deliver)
            except asyncio.CancelledError:
                raise
            except Exception as failure:
                if command_refused(failure):
                    # Redis answers (e.g. an ACL refusing SUBSCRIBE): not an outage.
                    self.link.command_failed(failure)
                else:
                    if not redis_failure(failure):
                        log.exception("the bus listener failed; resubscribing")
                    self.link.lost(failure)
                self._away(deliver)
            finally:
                self.subscribed = False
                self._pubsub = None
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
            await asyncio.sleep(1.0)

    async def _listen(self, pubsub: PubSub, deliver: Deliver) -> None:
        """Deliver what comes on the channel until the subscription is lost (raises)."""
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while True:
            message = await pubsub.get_message(timeout=self.check_s)
            now = loop.time()
            if message is not None:
                heard = now
                kind = message.get("type")
                channel = message.get("channel")
                if isinstance(channel, bytes):
                    channel = channel.decode()
                if kind == "subscribe" and channel != self.channel:
                    confirmed = self._held.get(channel)
                    if confirmed is not None and not confirmed.done():
                        confirmed.set_result(None)
                elif kind == "subscribe":
                    if self.subscribed:
                        # The client reconnected by itself and subscribed again: whatever
                        # was published in between is lost.
                        self._away(deliver)
                    self.subscribed = True
                    self.link.seen()
                    if self.changes is not None and self.changes.seen is None:
                        with contextlib.suppress(Exception):  # then copies carry no position
                            await self.changes.start()
                    if self._missed:
                        self._missed = False
                        deliver("resync", await self._missed_changes())
                elif kind == "message":
                    self._deliver(message, deliver)
                continue
            if self.subscribed and not self.link.connected:
                # The monitor saw Redis go; this socket may not know yet.
                raise ConnectionError("Redis lost")
            if now - heard > self.link.timeout_s + self.check_s:
                raise ConnectionError("Redis does not answer on the bus's connection")
            if now - pinged >= self.check_s:
                pinged = now
                await pubsub.ping()

    # -- the streams held here --------------------------------------------------------------

    def _stream_channel(self, session_id: str) -> str:
        return f"{self.channel}:sse:{session_id}"

    async def hold(self, session_id: str) -> None:
        channel = self._stream_channel(session_id)
        confirmed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held[channel] = confirmed
        try:
            pubsub = self._pubsub
            if pubsub is not None:
                await pubsub.subscribe(channel)
            # Else the listener subscribes to it with the bus's channel, once it can.
            async with asyncio.timeout(self.link.timeout_s):
                await confirmed
        except BaseException as failure:
            self.release(session_id)
            if not redis_failure(failure):
                raise
            raise ServiceUnavailable(
                "The bus between replicas does not answer; retry shortly",
                retry_after=PING_LOST_S,
            ) from None

    def release(self, session_id: str) -> None:
        channel = self._stream_channel(session_id)
        if self._held.pop(channel, None) is None or self._pubsub is None:
            return
        task = asyncio.ensure_future(self._unsubscribe(self._pubsub, channel))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    @staticmethod
    async def _unsubscribe(pubsub: PubSub, channel: str) -> None:
        with contextlib.suppress(Exception):  # gone with its connection anyway
            await pubsub.unsubscribe(channel)

    async def stream_held(self, session_id: str) -> bool:
        channel = self._stream_channel(session_id)
        if channel in self._held:
            return True
        counts = await self.link.run(self.link.client.pubsub_numsub(channel))
        return bool(counts) and int(counts[0][1]) > 0

    def _away(self, deliver: Deliver) -> None:
        """The subscription is lost: told once per outage, and ``resync`` once it is back."""
        if self._missed:
            return
        self._missed = True
        try:
            deliver("away", {})
        except Exception:
            log.exception("handling the bus's lost subscription failed")

    async def _missed_changes(self) -> dict[str, Any]:
        """For ``resync``: the changes logged since the last one applied here (``changes``),
        read once subscribed again; nothing when they cannot be known."""
        changes = self.changes
        if changes is None or changes.seen is None:
            return {}
        try:
            logged = await changes.after(changes.seen, outage=True)
        except Exception:  # Redis went again: every list and subscription is re-read
            return {}
        if logged is None:
            return {}
        # What comes on the new subscription and was in the log is applied once.
        changes.saw(changes.read_upto)
        self._replayed = position_of(changes.read_upto)
        return {"changes": logged}

    def _deliver(self, message: dict[str, Any], deliver: Deliver) -> None:
        if message.get("type") != "message":
            return
        try:
            event = orjson.loads(message["data"])
            if self.changes is not None and "p" in event:
                position = position_of(event["p"])
                if self._replayed is not None and position is not None:
                    if position <= self._replayed:
                        return  # replayed from the log after a lost subscription
                    self._replayed = None
                self.changes.saw(event["p"])  # applied below (or where it was made)
            if event["o"] == self.origin:
                sent = event.get("t")
                if type(sent) is float:
                    self.lag_s = max(0.0, time.monotonic() - sent)
                return
            kind, data = event["k"], event["d"]
            if not isinstance(kind, str) or not isinstance(data, dict):
                raise TypeError("kind must be a string and data an object")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            log.warning("ignored a malformed bus message")
            return
        self.delivered += 1
        try:
            deliver(kind, data)
        except Exception:
            log.exception("handling a %r bus event failed", kind)


def _bus_away() -> ServiceUnavailable:
    return ServiceUnavailable(
        "The bus between replicas does not answer; retry shortly", retry_after=PING_LOST_S
    )
