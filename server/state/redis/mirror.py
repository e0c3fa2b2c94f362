"""Resumable legacy streams copied to Redis Streams (see :mod:`server.state.mirror`).

Every event of every legacy stream goes to ``<prefix>:events:<session>:<stream>`` (entry id
``0-<seq>``: the SSE sequence number is the Redis id; about ``capacity`` entries, expiring with
the session), and an end marker when the stream finishes. Copying never makes a call wait:
events queue (bounded) for one writer task; while Redis is away they are dropped and counted.
The copies go with their session: each session's are listed in ``<prefix>:streams:<session>``
(a set, same expiry), and :meth:`RedisMirror.forget` (the session deleted, closed or expired,
told to every replica that held a stream of it) deletes them all after whatever was queued, and
copies nothing more of that session.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from server.aio import next_batch, stop_task
from server.errors import ServiceUnavailable
from server.legacy.eventstream import Copy, EventStream
from server.state.mirror import events_of
from server.state.redis.link import RedisLink

log = logging.getLogger(__name__)

QUEUE_LIMIT = 50_000
WRITE_BATCH = 256
TAIL_BLOCK_MS = 1000
# Sessions forgotten lately, whose events are no longer copied (a call still running when its
# session went): the newest this many.
FORGOTTEN_LIMIT = 10_000

# KEYS[1]: a session's set of copies. Deletes them and the set.
DROP = """
local copies = redis.call('SMEMBERS', KEYS[1])
for i = 1, #copies do redis.call('DEL', copies[i]) end
redis.call('DEL', KEYS[1])
return #copies
"""

# (copy key, the session's set of copies, seq, payload): an event (payload None: the end
# marker); a copy key None: forget the session.
Item = tuple[str | None, str, int, bytes | None]


class RedisMirror:
    def __init__(self, link: RedisLink, *, capacity: int, ttl_s: float) -> None:
        self.link = link
        self.capacity = capacity
        self._ttl_ms = max(1000, int(ttl_s * 1000))
        self._queue: asyncio.Queue[Item] | None = None
        self._writer: asyncio.Task[None] | None = None
        self.dropped = 0
        self._forgotten: dict[str, None] = {}
        self._drop = link.client.register_script(DROP)

    def _key(self, session_id: str, stream_id: str) -> str:
        return self.link.key("events", session_id, stream_id)

    def _copies(self, session_id: str) -> str:
        return self.link.key("streams", session_id)

    def track(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)
        copies = self._copies(session_id)
        forgotten = self._forgotten

        def copy(seq: int, payload: bytes | None) -> None:
            if self._queue is None or session_id in forgotten:
                return
            try:
                self._queue.put_nowait((key, copies, seq, payload))
            except asyncio.QueueFull:
                self.dropped += 1

        stream.observer = copy

    def forget(self, session_id: str) -> None:
        self._forgotten[session_id] = None
        if len(self._forgotten) > FORGOTTEN_LIMIT:
            del self._forgotten[next(iter(self._forgotten))]
        if self._queue is None:
            return
        try:
            self._queue.put_nowait((None, self._copies(session_id), 0, None))
        except asyncio.QueueFull:  # they expire by themselves, at the session's idle timeout
            self.dropped += 1

    def start(self) -> None:
        self._queue = asyncio.Queue(QUEUE_LIMIT)
        self._writer = asyncio.create_task(self._write(), name="stream-mirror")

    async def close(self) -> None:
        if self._writer is not None:
            await stop_task(self._writer)
            self._writer = None

    async def _write(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            batch = await next_batch(queue, WRITE_BATCH)
            try:
                async with self.link.client.pipeline(transaction=False) as pipe:
                    written: dict[str, str] = {}  # copy -> its session's set, this batch
                    for key, copies, seq, payload in batch:
                        if key is None:  # forget: what was written so far is listed first
                            self._expire(pipe, written)
                            await self._drop(keys=[copies], client=pipe)
                        elif payload is None:  # the end marker, just after the last event
                            pipe.xadd(key, {"e": b"1"}, id=f"0-{seq + 1}")
                            written[key] = copies
                        else:
                            pipe.xadd(
                                key,
                                {"d": payload},
                                id=f"0-{seq}",
                                maxlen=self.capacity,
                                approximate=True,
                            )
                            written[key] = copies
                    self._expire(pipe, written)
                    await self.link.run(pipe.execute(raise_on_error=False))
            except ServiceUnavailable:
                self.dropped += len(batch)
            except Exception:
                log.exception("copying stream events to Redis failed")
                self.dropped += len(batch)

    def _expire(self, pipe: Any, written: dict[str, str]) -> None:
        """Each copy written, listed in its session's set; both expire with the session."""
        for key, copies in written.items():
            pipe.pexpire(key, self._ttl_ms)
            pipe.sadd(copies, key)
            pipe.pexpire(copies, self._ttl_ms)
        written.clear()

    async def open(self, session_id: str, stream_id: str, after: int) -> Copy | None:
        key = self._key(session_id, stream_id)
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.xrevrange(key, "+", "-", count=1)
            # The newest events after ``after`` (and the end marker), as a stream's own buffer
            # keeps its newest: the oldest ones would leave out the call's final result.
            pipe.xrevrange(key, "+", f"(0-{after}", count=self.capacity + 1)
            last, newest = await self.link.run(pipe.execute())
        if not last:
            return None
        events, finished = events_of(newest[::-1])
        # Resumed at (or past) the end: nothing follows, but the stream did finish.
        finished = finished or b"e" in last[0][1]
        return Copy(events, finished)

    async def tail(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)
        block_ms = max(10, min(TAIL_BLOCK_MS, int(self.link.timeout_s * 500)))
        while not stream.finished:
            try:
                answer: Any = await self.link.run(
                    self.link.client.xread({key: f"0-{stream.last_seq}"}, count=100, block=block_ms)
                )
            except ServiceUnavailable:
                # The client reconnects (its Last-Event-ID still names this stream).
                stream.end_connections("shared_state_lost")
                return
            for _, entries in answer or ():
                events, finished = events_of(entries)
                for seq, payload in events:
                    stream.skip_to(seq - 1)
                    stream.publish(payload)
                if finished:
                    stream.finish()
