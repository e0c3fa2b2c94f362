"""Resumable legacy streams copied to Redis Streams (see :mod:`server.state.mirror`).

Every event of every legacy stream goes to ``<prefix>:events:<session>:<stream>`` (entry id
``0-<seq>``: the SSE sequence number is the Redis id; about ``capacity`` entries, expiring with
the session), and an end marker when the stream finishes. Copying never makes a call wait:
events queue (bounded) for one writer task; while Redis is away they are dropped and counted.
They go with their session (listed in ``<prefix>:streams:<session>``; :meth:`RedisMirror.forget`
deletes them after what was queued). Each write's newest entry of a copy names its replica
(``r``), a call's request (``i``), and for a GET stream the newest change its replica applied
(``p``, :mod:`server.state.redis.changes`; a GET stream's start too, under ``...:opened``):
a resume elsewhere replays the changes logged after it (:meth:`RedisMirror.missed`), and ends
a call whose replica is gone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from redis.typing import EncodableT, FieldT

from server.aio import next_batch, stop_task
from server.catalog import Change
from server.errors import ServiceUnavailable
from server.jsonrpc import encode_error
from server.legacy.eventstream import Copy, EventStream
from server.legacy.runtime import is_standalone_id
from server.state.messages import change_of
from server.state.mirror import events_of
from server.state.redis.bus import replica_channel
from server.state.redis.changes import ChangeLog
from server.state.redis.link import RedisLink

log = logging.getLogger(__name__)

QUEUE_LIMIT = 50_000
WRITE_BATCH = 256
TAIL_BLOCK_MS = 1000
# A GET stream's copy, opened (``seq``: no event), writes where the change log stood, under
# its key + OPENED_AT, until its first event carries the position itself.
OPENED = -1
OPENED_AT = ":opened"
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

# (copy key, the session's set of copies, seq, payload, the call's request id as JSON): an
# event (payload None: the end marker); a copy key None: forget the session.
Item = tuple[str | None, str, int, bytes | None, bytes | None]


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
        self.changes = ChangeLog(link, ttl_s=ttl_s)
        self.replica = link.replica  # its copies name it: a resume can tell it is gone

    def _key(self, session_id: str, stream_id: str) -> str:
        return self.link.key("events", session_id, stream_id)

    def _copies(self, session_id: str) -> str:
        return self.link.key("streams", session_id)

    def track(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)
        copies = self._copies(session_id)
        forgotten = self._forgotten

        # A call's copy names its request: a resume can answer it if the call's replica dies.
        request = None if stream.request_id is None else orjson.dumps(stream.request_id)

        def copy(seq: int, payload: bytes | None) -> None:
            if self._queue is None or session_id in forgotten:
                return
            try:
                self._queue.put_nowait((key, copies, seq, payload, request))
            except asyncio.QueueFull:
                self.dropped += 1

        stream.observer = copy
        if is_standalone_id(stream.id):
            # Its position from the start: a replica that dies before the stream sends an
            # event leaves a copy a resume can replay the changes after (not "all changed").
            copy(OPENED, None)

    def forget(self, session_id: str) -> None:
        self._forgotten[session_id] = None
        if len(self._forgotten) > FORGOTTEN_LIMIT:
            del self._forgotten[next(iter(self._forgotten))]
        if self._queue is None:
            return
        try:
            self._queue.put_nowait((None, self._copies(session_id), 0, None, None))
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
            # Every change applied so far was offered to the streams before this batch was
            # taken: a GET stream's copy is complete up to it.
            position = self.changes.seen
            # Each copy's newest entry of the batch says who wrote it (and how far, above):
            # a resume reads only the newest.
            newest = {item[0]: index for index, item in enumerate(batch) if item[2] != OPENED}
            try:
                async with self.link.client.pipeline(transaction=False) as pipe:
                    written: dict[str, str] = {}  # copy -> its session's set, this batch
                    for index, (key, copies, seq, payload, request) in enumerate(batch):
                        if key is not None and seq == OPENED:  # a GET stream's start
                            if position is not None:
                                pipe.set(key + OPENED_AT, position, px=self._ttl_ms)
                                pipe.sadd(copies, key + OPENED_AT)
                                pipe.pexpire(copies, self._ttl_ms)
                            continue
                        fields: dict[FieldT, EncodableT] = {}
                        if key is not None and newest[key] == index:
                            fields = self._signed(key, position, request)
                        if key is None:  # forget: what was written so far is listed first
                            self._expire(pipe, written)
                            await self._drop(keys=[copies], client=pipe)
                        elif payload is None:  # the end marker, just after the last event
                            pipe.xadd(key, {"e": b"1", **fields}, id=f"0-{seq + 1}")
                            written[key] = copies
                        else:
                            pipe.xadd(
                                key,
                                {"d": payload, **fields},
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

    def _signed(
        self, key: str, position: str | None, request: bytes | None
    ) -> dict[FieldT, EncodableT]:
        """A copy's newest fields: this replica, how far a GET stream's replica had applied
        the changes, the request a call's stream answers."""
        fields: dict[FieldT, EncodableT] = {"r": self.replica}
        if position is not None and is_standalone_id(key):
            fields["p"] = position
        if request is not None:
            fields["i"] = request
        return fields

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
            pipe.get(key + OPENED_AT)
            last, newest, opened_at = await self.link.run(pipe.execute())
        if not last:  # a GET stream that sent nothing: where it started, if known
            return None if opened_at is None else Copy([], False, _text(opened_at))
        events, finished = events_of(newest[::-1])
        # Resumed at (or past) the end: nothing follows, but the stream did finish.
        finished = finished or b"e" in last[0][1]
        newest = last[0][1]
        request = newest.get(b"i")
        return Copy(
            events,
            finished,
            _text(newest.get(b"p")),
            holder=_text(newest.get(b"r")),
            request_id=_request_id(request) if request is not None else None,
        )

    async def missed(self, copy: Copy | None) -> list[Change] | None:
        """The changes logged after the copied GET stream's position: made while no replica
        held it. None if that cannot be known (no copy, no position, or trimmed since)."""
        if copy is None or copy.position is None:
            return None
        logged = await self.changes.after(copy.position)
        if logged is None:
            return None
        return [change for data in logged if (change := change_of(data)) is not None]

    async def tail(self, session_id: str, stream: EventStream) -> None:
        key = self._key(session_id, stream.id)
        block_ms = max(10, min(TAIL_BLOCK_MS, int(self.link.timeout_s * 500)))
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while not stream.finished:
            try:
                answer: Any = await self.link.run(
                    self.link.client.xread({key: f"0-{stream.last_seq}"}, count=100, block=block_ms)
                )
                if not answer and loop.time() - checked >= self.link.timeout_s / 2:
                    checked = loop.time()
                    if await self._holder_gone(stream):
                        self._orphaned(key, stream)
                        return
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

    async def _holder_gone(self, stream: EventStream) -> bool:
        """Whether the replica that wrote ``stream``'s copy is gone: its bus subscription
        went with its connection (a crash, a kill). A stalled one is still there."""
        if stream.holder is None:
            return False
        channel = replica_channel(self.link, stream.holder)
        counts = await self.link.run(self.link.client.pubsub_numsub(channel))
        return not (counts and int(counts[0][1]) > 0)

    def _orphaned(self, key: str, stream: EventStream) -> None:
        """The call's replica died before answering: the copy ends with a JSON-RPC error for
        the request (the client sends it again), for this connection and any later resume."""
        error = None
        if stream.request_id is not None:
            error = encode_error(stream.request_id, {"code": -32000, "message": CALL_LOST})
        seq = stream.last_seq
        stream.finish(error)
        pipe = self.link.client.pipeline(transaction=False)
        if error is not None:
            pipe.xadd(key, {"d": error}, id=f"0-{seq + 1}")
        pipe.xadd(key, {"e": b"1"}, id=f"0-{stream.last_seq + 1}")
        pipe.pexpire(key, self._ttl_ms)
        # Another resume may have ended it first (its ids are taken): nothing to do then.
        task = asyncio.ensure_future(self.link.run(pipe.execute(raise_on_error=False)))
        task.add_done_callback(_quiet)


CALL_LOST = (
    "Server error: the replica running this call stopped before answering; send the request again"
)


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: Redis away, the next resume ends it again


def _text(value: bytes | None) -> str | None:
    return value.decode(errors="replace") if value is not None else None


def _request_id(value: bytes) -> str | int | None:
    try:
        request_id = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return request_id if isinstance(request_id, str | int) else None
