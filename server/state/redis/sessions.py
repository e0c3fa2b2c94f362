"""Legacy sessions in Redis, so any replica serves any session (no sticky load balancing).

A session is one hash (``<prefix>:session:<id>``) whose TTL is the idle timeout, restarted on
every use; a sorted set (``<prefix>:sessions``) counts them for the cap, checked by ``create``
in one script. ``save`` only updates a session that still exists, so a request finishing
after a ``DELETE`` elsewhere cannot bring it back. Resource subscriptions are a set beside it
(``<prefix>:subs:<id>``, same TTL): one ``SADD`` or ``SREM`` each, read whole only when a GET
stream opens. What a replica holds in memory for a session is not here: ``expire`` keeps
sessions busy here alive and releases those that ended elsewhere. Every Redis failure is
:class:`~server.errors.ServiceUnavailable` (503).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from server.hub import MAX_RESOURCE_SUBSCRIPTIONS
from server.legacy.sessions import (
    Session,
    SessionLimit,
    SubscriptionLimit,
    is_session_id,
    new_session_id,
)
from server.state.redis.link import RedisLink

# One round trip for a new session: drop the expired from the index, count, and write the
# session (hash, TTL, index entry) only under the cap; atomic, so replicas creating at once
# cannot pass the cap together. Returns {created (0 or 1), sessions counted}.
_CREATE_UNDER_CAP = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
if count >= tonumber(ARGV[2]) then
  return {0, count}
end
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[5], ARGV[4])
return {1, count + 1}
"""

# HSET only while the hash exists: a save racing a DELETE must not resurrect the session.
_SAVE_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
"""

# SADD one URI to a live session's set, under the cap: 1 added, 0 there already or no session,
# -1 the cap is reached. The set's TTL is the session's.
_SUBSCRIBE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SISMEMBER', KEYS[2], ARGV[3]) == 1 then
  return 0
end
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[2]) then
  return -1
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""


def _encode(session: Session) -> dict[str, bytes]:
    return {
        "version": session.protocol_version.encode(),
        "client_info": orjson.dumps(session.client_info),
        "capabilities": orjson.dumps(session.client_capabilities),
        "initialized": b"1" if session.initialized else b"0",
        "log_level": orjson.dumps(session.log_level),
        "owner": orjson.dumps(session.owner),
    }


def _decode(session_id: str, fields: dict[bytes, bytes]) -> Session | None:
    try:
        session = Session(
            session_id,
            fields[b"version"].decode(),
            orjson.loads(fields[b"client_info"]),
            orjson.loads(fields[b"capabilities"]),
        )
        session.initialized = fields.get(b"initialized") == b"1"
        session.log_level = orjson.loads(fields.get(b"log_level", b"null"))
        session.owner = orjson.loads(fields.get(b"owner", b"null"))
    except (KeyError, UnicodeDecodeError, orjson.JSONDecodeError, TypeError):
        return None  # half-written or foreign data: as good as no session
    return session


class RedisSessionStore:
    def __init__(
        self,
        link: RedisLink,
        *,
        max_sessions: int,
        idle_timeout_s: float,
        local: Callable[[], Iterable[str]],
        busy: Callable[[str], bool],
        ended: Callable[[str], None],
        max_subscriptions: int = MAX_RESOURCE_SUBSCRIPTIONS,
    ) -> None:
        self.link = link
        self.max_sessions = max_sessions
        self.max_subscriptions = max_subscriptions
        self.idle_timeout_s = idle_timeout_s
        self._ttl_ms = max(1, int(idle_timeout_s * 1000))
        self._local = local
        self._busy = busy
        self._ended = ended
        self._index = link.key("sessions")
        self._count = 0
        self._create = link.client.register_script(_CREATE_UNDER_CAP)
        self._save = link.client.register_script(_SAVE_IF_EXISTS)
        self._subscribe = link.client.register_script(_SUBSCRIBE)

    def _key(self, session_id: str) -> str:
        return self.link.key("session", session_id)

    def _subs_key(self, session_id: str) -> str:
        return self.link.key("subs", session_id)

    def _deadline(self) -> float:
        return time.time() + self.idle_timeout_s

    async def create(
        self,
        protocol_version: str,
        client_info: dict[str, Any],
        capabilities: dict[str, Any],
        *,
        owner: str | None = None,
    ) -> Session:
        session = Session(new_session_id(), protocol_version, client_info, capabilities)
        session.owner = owner
        args: list[Any] = [time.time(), self.max_sessions, self._ttl_ms, session.id]
        args.append(self._deadline())
        for name, value in _encode(session).items():
            args += [name, value]
        created, count = await self.link.run(
            self._create(keys=[self._index, self._key(session.id)], args=args)
        )
        self._count = int(count)
        if not created:
            raise SessionLimit(
                f"Too many sessions ({self.max_sessions}); end unused sessions or retry later"
            )
        return session

    async def get(self, session_id: str) -> Session | None:
        if not is_session_id(session_id):
            return None
        key = self._key(session_id)
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(key)
            pipe.pexpire(key, self._ttl_ms)
            pipe.pexpire(self._subs_key(session_id), self._ttl_ms)
            pipe.zadd(self._index, {session_id: self._deadline()}, xx=True)
            fields, _, _, _ = await self.link.run(pipe.execute())
        if not fields:
            return None
        return _decode(session_id, fields)

    async def save(self, session: Session) -> None:
        values: list[Any] = [self._ttl_ms]  # the same TTL as create and get
        for name, value in _encode(session).items():
            values += [name, value]
        await self.link.run(self._save(keys=[self._key(session.id)], args=values))

    async def subscribe(self, session_id: str, uri: str) -> bool:
        keys = [self._key(session_id), self._subs_key(session_id)]
        args: list[Any] = [self._ttl_ms, self.max_subscriptions, uri]
        added = int(await self.link.run(self._subscribe(keys=keys, args=args)))
        if added < 0:
            raise SubscriptionLimit(self.max_subscriptions)
        return added == 1

    async def unsubscribe(self, session_id: str, uri: str) -> bool:
        return bool(await self.link.run(self.link.client.srem(self._subs_key(session_id), uri)))

    async def subscriptions(self, session_id: str) -> set[str]:
        members = await self.link.run(self.link.client.smembers(self._subs_key(session_id)))
        return {member.decode() if isinstance(member, bytes) else member for member in members}

    async def delete(self, session_id: str) -> bool:
        if not is_session_id(session_id):
            return False
        async with self.link.client.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(session_id))
            pipe.delete(self._subs_key(session_id))
            pipe.zrem(self._index, session_id)
            deleted, _, _ = await self.link.run(pipe.execute())
        return bool(deleted)

    async def expire(self) -> list[str]:
        """Keep this process's busy sessions alive; release the local part of sessions that
        ended (expired, or deleted on another replica) — the ids released."""
        local = [(session_id, self._busy(session_id)) for session_id in self._local()]
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(self._index, "-inf", time.time())
            pipe.zcard(self._index)
            for session_id, busy in local:
                if busy:
                    pipe.pexpire(self._key(session_id), self._ttl_ms)
                    pipe.pexpire(self._subs_key(session_id), self._ttl_ms)
                    pipe.zadd(self._index, {session_id: self._deadline()}, xx=True)
                else:
                    pipe.exists(self._key(session_id))
            _, count, *answers = await self.link.run(pipe.execute())
        self._count = int(count)
        ended = []
        answers_iter = iter(answers)
        for session_id, busy in local:
            alive = bool(next(answers_iter))  # pexpire and exists both say 1 if the key is there
            if busy:
                next(answers_iter)  # the subscriptions' pexpire
                next(answers_iter)  # the zadd
            if not alive:
                ended.append(session_id)
                self._ended(session_id)
        return ended

    def count(self) -> int:
        """Sessions across every replica, as of the last create or sweep."""
        return self._count
