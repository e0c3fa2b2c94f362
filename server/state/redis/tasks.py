"""Task records in Redis, so a task started through one replica is read, answered and
cancelled through any other (:class:`~server.tasks.store.TaskStore`).

A task is one hash, ``<prefix>:task:<id>``, expired at its TTL: ``meta``, ``status``,
``message``, ``updated``, ``result`` / ``error``, and a field per question (``in:<key>``) or
answer (``ans:<key>``), so no script decodes JSON. Every change is a script that first checks
the status is still active: a terminal status is final whichever replica writes first. Beside
it: the lease ``<prefix>:task:<id>:alive`` (its replica renews it; run out, the replica died),
sorted sets for the total and per-client caps, trimmed by every create, and
``<prefix>:tasks:session:<id>`` for a 2025-11-25 session's ``tasks/list``. Every Redis
failure is :class:`~server.errors.ServiceUnavailable` (503).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from server.state.redis.link import RedisLink
from server.tasks.model import TaskRecord, TaskStatus
from server.tasks.store import TaskLimit

# KEYS: task, alive, all, client, session (or the task key again: no session)
# ARGV: now, expires, per_client, total, lease_ms, meta, created, message ('' for none), has_session
_CREATE = """
local now, expires = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return -2 end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], 'meta', ARGV[6], 'status', 'working', 'updated', ARGV[7])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'message', ARGV[8]) end
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('SET', KEYS[2], '1', 'PX', ARGV[5])
local id = ARGV[10]
redis.call('ZADD', KEYS[3], expires, id)
redis.call('ZADD', KEYS[4], expires, id)
if redis.call('PTTL', KEYS[4]) < expires - now then redis.call('PEXPIREAT', KEYS[4], expires) end
if ARGV[9] == '1' then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  redis.call('ZADD', KEYS[5], expires, id)
  if redis.call('PTTL', KEYS[5]) < expires - now then
    redis.call('PEXPIREAT', KEYS[5], expires)
  end
end
return 1
"""

_ACTIVE = "local st = redis.call('HGET', KEYS[1], 'status')\n" + (
    "if st ~= 'working' and st ~= 'input_required' then return false end\n"
)

# ARGV: status, now, message ('' keeps it), terminal ('1'), result, error, then key, json, ...
_TRANSITION = (
    _ACTIVE
    + """
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'message', ARGV[3]) end
if ARGV[4] == '1' then
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 3) == 'in:' or string.sub(field, 1, 4) == 'ans:' then
      redis.call('HDEL', KEYS[1], field)
    end
  end
  if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[5]) end
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[6]) end
end
for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[1], 'in:' .. ARGV[i], ARGV[i + 1]) end
return redis.call('HGETALL', KEYS[1])
"""
)

# ARGV: now, then key, json, ...: answers to outstanding questions move from in: to ans:.
_DELIVER = (
    _ACTIVE
    + """
local taken = {}
for i = 2, #ARGV, 2 do
  if redis.call('HDEL', KEYS[1], 'in:' .. ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], 'ans:' .. ARGV[i], ARGV[i + 1])
    table.insert(taken, ARGV[i])
  end
end
if #taken > 0 then redis.call('HSET', KEYS[1], 'updated', ARGV[1]) end
return taken
"""
)

# ARGV: keys wanted; returns key, json, ... of the answers taken.
_TAKE = """
local found = {}
for i = 1, #ARGV do
  local value = redis.call('HGET', KEYS[1], 'ans:' .. ARGV[i])
  if value then
    redis.call('HDEL', KEYS[1], 'ans:' .. ARGV[i])
    table.insert(found, ARGV[i])
    table.insert(found, value)
  end
end
return found
"""

_SET_MESSAGE = (
    _ACTIVE
    + """
redis.call('HSET', KEYS[1], 'message', ARGV[1], 'updated', ARGV[2])
return 1
"""
)

# KEYS: task, alive, task, alive, ...; ARGV: lease_ms. Renews the leases of active tasks only;
# returns index, status ('' for a record that is gone) of the others, the index 1-based.
_HEARTBEAT = """
local ended = {}
for i = 1, #KEYS, 2 do
  local st = redis.call('HGET', KEYS[i], 'status')
  if st == 'working' or st == 'input_required' then
    redis.call('SET', KEYS[i + 1], '1', 'PX', ARGV[1])
  else
    table.insert(ended, (i + 1) / 2)
    table.insert(ended, st or '')
  end
end
return ended
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def decode(fields: Mapping[bytes | str, bytes | str], alive: bool = True) -> TaskRecord | None:
    """A record from its hash; None for a half-written or foreign one."""
    data = {_text(name): value for name, value in fields.items()}
    try:
        meta = orjson.loads(data["meta"])
        record = TaskRecord(
            task_id=meta["task_id"],
            owner=meta["owner"],
            client=meta["client"],
            session=meta["session"],
            era=meta["era"],
            tool=meta["tool"],
            created_ms=meta["created_ms"],
            ttl_ms=meta["ttl_ms"],
            poll_ms=meta["poll_ms"],
            status=_text(data["status"]),  # type: ignore[arg-type]
            message=_text(data["message"]) if "message" in data else None,
            updated_ms=int(data.get("updated", meta["created_ms"])),
            result=orjson.loads(data["result"]) if "result" in data else None,
            error=orjson.loads(data["error"]) if "error" in data else None,
            alive=alive,
        )
        for name, value in data.items():
            if name.startswith("in:"):
                record.inputs[name[3:]] = orjson.loads(value)
            elif name.startswith("ans:"):
                record.answers[name[4:]] = orjson.loads(value)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError):
        return None
    return record


class RedisTaskStore:
    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self._all = link.key("tasks")
        client = link.client
        self._create = client.register_script(_CREATE)
        self._transition = client.register_script(_TRANSITION)
        self._deliver = client.register_script(_DELIVER)
        self._take = client.register_script(_TAKE)
        self._set_message = client.register_script(_SET_MESSAGE)
        self._heartbeat = client.register_script(_HEARTBEAT)

    def _key(self, task_id: str) -> str:
        return self.link.key("task", task_id)

    def _alive(self, task_id: str) -> str:
        return self.link.key("task", task_id, "alive")

    def _client_key(self, client: str) -> str:
        # Any text may name a client (a subject); the key holds a digest of bounded length.
        return self.link.key("tasks", "client", hashlib.sha256(client.encode()).hexdigest()[:32])

    def _session_key(self, session: str) -> str:
        return self.link.key("tasks", "session", session)

    async def create(
        self, record: TaskRecord, *, per_client: int, total: int, lease_ms: int
    ) -> None:
        meta = {
            name: getattr(record, name)
            for name in (
                "task_id",
                "owner",
                "client",
                "session",
                "era",
                "tool",
                "created_ms",
                "ttl_ms",
                "poll_ms",
            )
        }
        key = self._key(record.task_id)
        keys = [
            key,
            self._alive(record.task_id),
            self._all,
            self._client_key(record.client),
            self._session_key(record.session) if record.session else key,
        ]
        args: list[Any] = [
            int(time.time() * 1000),
            record.expires_ms,
            per_client,
            total,
            lease_ms,
            orjson.dumps(meta),
            record.created_ms,
            record.message or "",
            "1" if record.session else "0",
            record.task_id,
        ]
        created = int(await self.link.run(self._create(keys=keys, args=args)))
        if created == -2:
            raise TaskLimit(f"This server keeps at most {total} tasks; try again later")
        if created == -1:
            raise TaskLimit(
                f"At most {per_client} tasks are kept per client until they expire; try again later"
            )

    async def get(self, task_id: str) -> TaskRecord | None:
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(self._key(task_id))
            pipe.exists(self._alive(task_id))
            fields, alive = await self.link.run(pipe.execute())
        if not fields:
            return None
        return decode(fields, bool(alive))

    async def transition(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        now_ms: int,
        message: str | None = None,
        result: Mapping[str, Any] | None = None,
        error: Mapping[str, Any] | None = None,
        inputs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> TaskRecord | None:
        terminal = status in ("completed", "failed", "cancelled")
        args: list[Any] = [
            status,
            now_ms,
            message or "",
            "1" if terminal else "0",
            orjson.dumps(result) if result is not None else "",
            orjson.dumps(error) if error is not None else "",
        ]
        for key, question in (inputs or {}).items():
            args += [key, orjson.dumps(question)]
        flat = await self.link.run(self._transition(keys=[self._key(task_id)], args=args))
        if not flat:
            return None
        return decode(dict(zip(flat[::2], flat[1::2], strict=True)))

    async def deliver(
        self, task_id: str, responses: Mapping[str, Mapping[str, Any]], *, now_ms: int
    ) -> list[str]:
        args: list[Any] = [now_ms]
        for key, response in responses.items():
            args += [key, orjson.dumps(response)]
        taken = await self.link.run(self._deliver(keys=[self._key(task_id)], args=args))
        return [_text(key) for key in taken or []]

    async def take_answers(self, task_id: str, keys: Iterable[str]) -> dict[str, Any]:
        wanted = list(keys)
        if not wanted:
            return {}
        flat = await self.link.run(self._take(keys=[self._key(task_id)], args=wanted))
        return {
            _text(key): orjson.loads(value)
            for key, value in zip(flat[::2], flat[1::2], strict=True)
        }

    async def set_message(self, task_id: str, message: str, *, now_ms: int) -> None:
        await self.link.run(self._set_message(keys=[self._key(task_id)], args=[message, now_ms]))

    async def heartbeat(
        self, task_ids: Iterable[str], *, lease_ms: int
    ) -> dict[str, TaskStatus | None]:
        ids = list(task_ids)
        if not ids:
            return {}
        keys = [key for task_id in ids for key in (self._key(task_id), self._alive(task_id))]
        flat = await self.link.run(self._heartbeat(keys=keys, args=[lease_ms]))
        return {
            ids[int(index) - 1]: (_text(status) or None)  # type: ignore[misc]
            for index, status in zip(flat[::2], flat[1::2], strict=True)
        }

    async def release(self, task_id: str) -> None:
        await self.link.run(self.link.client.delete(self._alive(task_id)))

    async def session_tasks(
        self, session: str, offset: int, limit: int
    ) -> tuple[list[TaskRecord], bool]:
        key = self._session_key(session)
        now = int(time.time() * 1000)
        async with self.link.client.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zrange(key, offset, offset + limit)  # one more than the page: is there more?
            _, members = await self.link.run(pipe.execute())
        ids = [_text(member) for member in members]
        async with self.link.client.pipeline(transaction=False) as pipe:
            for task_id in ids[:limit]:
                pipe.hgetall(self._key(task_id))
            found = await self.link.run(pipe.execute()) if ids else []
        records = [record for fields in found if fields and (record := decode(fields))]
        return records, len(ids) > limit

    async def drop(self, records: Iterable[TaskRecord]) -> None:
        records = list(records)
        if not records:
            return
        async with self.link.client.pipeline(transaction=False) as pipe:
            for record in records:
                task_id = record.task_id
                pipe.delete(self._key(task_id), self._alive(task_id))
                pipe.zrem(self._all, task_id)
                pipe.zrem(self._client_key(record.client), task_id)
                if record.session is not None:
                    pipe.zrem(self._session_key(record.session), task_id)
            await self.link.run(pipe.execute())
