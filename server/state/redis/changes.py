"""Every catalog change kept in one Redis stream, for a GET stream no replica held for a while.

A ``change`` goes on the bus through :data:`PUBLISH_CHANGE`: one step adds it to
``<prefix>:changes`` (the newest :data:`LIMIT` entries, expiring with the sessions) and publishes
it with its entry id as ``p``. Each replica notes the newest id it applied (:attr:`ChangeLog.seen`)
and the mirror writes it on the copy of each session's GET stream as it copies, so a replica that
resumes that stream after its holder drained or crashed replays the changes after it
(:meth:`ChangeLog.after`): those made while nobody held the stream. One write per change,
whatever the number of sessions; filtering for the session happens on the resume
(docs/decisions.md#change-log says why not a log per session).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import orjson

from server.errors import ServiceUnavailable
from server.state.redis.link import RedisLink

LIMIT = 10_000
# A change's message is logged only up to this size (a resource's URI may be long): a bigger
# one is logged as a mark that makes a resume tell everything again. At most about 10 MiB.
MAX_LOGGED = 1024
TOO_BIG = b"{}"
T = TypeVar("T")
# A call whose change could not be told to the other replicas (Redis away): it ran, its answer
# is this error, and the client may call again.
UNTOLD = "The call ran but its change could not be shared (Redis unavailable); call again"

# KEYS[1]: the change log. ARGV: channel, message (a JSON object), limit, ttl (ms), what to
# log. The message is published with the entry's id first in it (``{"p":"<id>",...``).
PUBLISH_CHANGE = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('PUBLISH', ARGV[1], '{"p":"' .. id .. '",' .. string.sub(ARGV[2], 2))
"""


def position_of(value: object) -> tuple[int, int] | None:
    """A log entry id (``<ms>-<seq>``, str or bytes) as a comparable pair; None if not one."""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        return None
    ms, dash, seq = value.partition("-")
    if not dash or not ms.isdigit() or not seq.isdigit() or len(value) > 41:
        return None
    return int(ms), int(seq)


class ChangeLog:
    def __init__(self, link: RedisLink, *, ttl_s: float) -> None:
        self.link = link
        self.key = link.key("changes")
        self._ttl_ms = str(max(1000, int(ttl_s * 1000)))
        self._publish = link.client.register_script(PUBLISH_CHANGE)
        # The newest change this replica applied (its hub told every stream here).
        self._seen: tuple[int, int] = (-1, -1)
        # This replica's own changes not yet in the log: a resume waits for them first, and
        # so does the answer of a call that made one (:meth:`settle`).
        self.unlogged = 0
        self._logged = asyncio.Event()
        self._failed = 0  # changes given up on (Redis away): never logged nor published
        # The id of the newest change the last :meth:`after` returned (or its position).
        self.read_upto: str | None = None

    def saw(self, position: object) -> None:
        """A change up to ``position`` was applied here (ids only move forward)."""
        parsed = position_of(position)
        if parsed is not None and parsed > self._seen:
            self._seen = parsed

    @property
    def seen(self) -> str | None:
        """:meth:`saw`'s newest, as a log id; None before any."""
        return None if self._seen < (0, 0) else f"{self._seen[0]}-{self._seen[1]}"

    async def publish(self, pipe: Any, channel: str, message: bytes) -> None:
        """Queue ``message`` (a ``change``) on ``pipe``: logged, then published with its id."""
        logged = message if len(message) <= MAX_LOGGED else TOO_BIG
        args: list[str | bytes | int] = [channel, message, LIMIT, self._ttl_ms, logged]
        await self._publish(keys=[self.key], args=args, client=pipe)

    def queued(self) -> None:
        self.unlogged += 1
        self._logged.clear()

    def sent(self, count: int, *, ok: bool = True) -> None:
        """``count`` changes went out (``ok``) or were given up on."""
        self.unlogged = max(0, self.unlogged - count)
        if not ok:
            self._failed += count
        if not self.unlogged:
            self._logged.set()

    async def shared(self, call: Coroutine[Any, Any, T]) -> T:
        """``call`` (a tool's), answered only once the changes it made are logged and
        published (:meth:`settle`): nothing to wait for, nothing more paid."""
        result = await call
        if self.unlogged:
            await self.settle()
        return result

    async def settle(self) -> None:
        """Return once every change queued here so far is logged and published: what a call
        that made one waits for before its answer (a replica killed, or Redis lost, right
        after answering would otherwise lose the change's notification, docs/decisions.md#
        change-log). :class:`~server.errors.ServiceUnavailable` if one was given up on (Redis
        away) or is not out within ``MCP_REDIS_TIMEOUT_S``."""
        failed = self._failed
        try:
            async with asyncio.timeout(self.link.timeout_s):
                await self._logged.wait()
        except TimeoutError:
            raise ServiceUnavailable(UNTOLD) from None
        if self._failed != failed:
            raise ServiceUnavailable(UNTOLD)

    async def start(self) -> None:
        """Subscribed: changes before now were made before any stream of this replica."""
        newest: Any = await self.link.run(self.link.client.xrevrange(self.key, count=1))
        self.saw(newest[0][0] if newest else "0-0")

    async def after(self, position: str, *, outage: bool = False) -> list[dict[str, Any]] | None:
        """Each change logged after ``position`` (its message's data), oldest first; None when
        some may be gone (trimmed past the limit, the log lost, or ``position`` is not an id).
        ``outage``: asked after this replica lost the bus (a missing log is then lost)."""
        parsed = position_of(position)
        if parsed is None:
            return None
        if self.unlogged:
            # This replica's own last changes: in the log before it is read (bounded; past
            # that, what is there is read).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.link.timeout_s):
                    await self._logged.wait()
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.xinfo_stream(self.key)
            pipe.xrange(self.key, position, position, count=1)
            pipe.xrange(self.key, f"({position}", "+", count=LIMIT)
            info, kept, entries = await self.link.run(pipe.execute(raise_on_error=False))
        if isinstance(info, Exception):
            # No log at all: no change since it expired, unless it cannot have expired yet
            # (a change after ``position`` is newer than its lifetime, or this replica lost
            # the bus meanwhile): then it was lost (Redis restarted empty) with what it held.
            if outage or parsed[0] > time.time() * 1000 - int(self._ttl_ms):
                return None
            return []
        # Trimming goes oldest first: the position's own entry still there, all after it is.
        # A log begun after the position ("0-0": none when this replica started) must have
        # kept every entry it was given.
        if not kept and not (position == "0-0" and info.get("entries-added") == info.get("length")):
            return None
        changes = []
        self.read_upto = position
        for entry_id, fields in entries if isinstance(entries, list) else ():
            self.read_upto = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            try:
                message = orjson.loads(fields[b"m"])
            except (KeyError, orjson.JSONDecodeError):
                return None
            if not isinstance(message, dict) or not isinstance(data := message.get("d"), dict):
                return None  # one too big to keep: what it was is unknown
            changes.append(data)
        return changes
