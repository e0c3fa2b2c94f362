"""The per-client limits counted across replicas: the rate, and stream and session slots, in
Redis when ``MCP_REDIS_URL`` is set, so a client gets its limits once, not once per replica.

Each replica still counts in its own process first (:mod:`server.security.limits`); the shared
count is one store call per request, settled together with what else the request counts
there (its quota charge, its stream or session slot): :meth:`SharedLimits.settle`. A slot held
in Redis is a lease, renewed while held and given back when its stream or session ends, so a
replica that dies leaves nothing held past ``MCP_LIMITS_LEASE_S``. Where Redis cannot count,
``MCP_QUOTA_ON_REDIS_FAILURE`` says open (the per-process limits alone) or closed (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from server.errors import ServiceUnavailable
from server.jsonrpc import Message, Request
from server.protocol import TOOLS_CALL
from server.records.draft import Draft
from server.security.limits import RateLimited, Slot, client_key

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RateAsk:
    """One request's charge against its client's rate: a GCRA cell in microseconds."""

    key: str
    interval_us: int  # one request's worth of time
    tolerance_us: int  # the burst's worth
    cost: int


@dataclass(frozen=True, slots=True)
class SlotAsk:
    key: str
    member: str
    limit: int
    lease_us: int


@dataclass(frozen=True, slots=True)
class Settled:
    """What the store answered: the rate's wait (None: allowed), the quota keys' counts, and
    the index of the slot refused (None: all taken)."""

    rate_wait_s: float | None
    counts: list[int]
    refused_slot: int | None = None


class LimitStore(Protocol):
    """Where the shared counts live (:class:`server.state.redis.limits.RedisLimits`). A
    failure is :class:`~server.errors.ServiceUnavailable`."""

    @property
    def available(self) -> bool:
        """False while the store is known to be away (lost, or stalled past its pings): then
        nothing waits for it, the limits fail at once as configured."""
        ...

    async def settle(
        self, rate: RateAsk | None, quotas: Sequence[tuple[str, int]], slots: Sequence[SlotAsk]
    ) -> Settled: ...

    async def renew(self, held: Sequence[tuple[str, str]], lease_us: int) -> None: ...

    async def release(self, key: str, member: str) -> None: ...


# What the endpoint decoded: one message or a batch (None: nothing to look at).
Incoming = Message | list[Message] | None
# Methods whose request settles its rate later, with the slot or quota it takes.
_WITH_SLOT = frozenset({"subscriptions/listen", "initialize"})


class SharedLimits:
    def __init__(
        self,
        store: LimitStore,
        *,
        rate: float,
        burst: int,
        lease_s: float,
        fail_open: bool,
        quotas: bool = False,
    ) -> None:
        self.store = store
        self.rate = rate
        self.interval_us = int(1_000_000 / rate) if rate > 0 else 0
        self.tolerance_us = self.interval_us * burst
        self.lease_us = int(lease_s * 1_000_000)
        self.lease_s = lease_s
        self.fail_open = fail_open
        self.later = _WITH_SLOT | {TOOLS_CALL} if quotas else _WITH_SLOT
        self.failing = False
        # Slots held in Redis by this process: member -> key, renewed by the heartbeat.
        self.held: dict[str, str] = {}
        self._replica = secrets.token_hex(6)
        self._serial = 0
        self._beat: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Task[None]] = set()

    def settles_later(self, message: Message | list[Message]) -> bool:
        """Whether this request's rate is settled later, with its quota charge or its slot,
        in the same store call (the endpoint settles every other request's at once)."""
        return isinstance(message, Request) and message.method in self.later

    async def settle(
        self,
        draft: Draft,
        *,
        quotas: Sequence[tuple[str, int]] = (),
        slots: Sequence[Slot] = (),
        extra: int = 0,
    ) -> list[int] | None:
        """One store call for what the request owes: its rate (when due), ``quotas``' keys
        (their counts are returned) and a lease for each of ``slots`` (leases kept on the
        slots, given back with them). Raises RateLimited or the slot's 429 when over; None
        when Redis failed and the limits fail open."""
        rate = None
        if draft.rate_due:
            draft.rate_due = False
            if self.rate > 0:
                key = client_key(draft.subject, draft.client_address)
                rate = RateAsk(key, self.interval_us, self.tolerance_us, 1 + extra)
        taken = [slot for slot in slots if slot.counter.limit]  # 0: no limit to share
        asks = [
            SlotAsk(
                f"{slot.counter.what}:{slot.key}", self._member(), slot.counter.limit, self.lease_us
            )
            for slot in taken
        ]
        if rate is None and not quotas and not asks:
            return []
        try:
            if not self.store.available:  # a request waits for Redis's timeout once, not twice
                raise ServiceUnavailable("Shared state is unavailable; retry shortly")
            settled = await self.store.settle(rate, quotas, asks)
        except ServiceUnavailable:
            self._failed()
            if self.fail_open:
                return None
            raise
        if self.failing:
            self.failing = False
            log.warning("per-client limits and quotas are counted in Redis again")
        if settled.rate_wait_s is not None:
            raise RateLimited(settled.rate_wait_s)
        if settled.refused_slot is not None:
            raise taken[settled.refused_slot].counter.refusal()
        for slot, ask in zip(taken, asks, strict=True):
            self._hold(slot, ask)
        return settled.counts

    async def settle_for(
        self, draft: Draft, slots: Sequence[Slot], message: Incoming, *, late: bool = False
    ) -> None:
        """:meth:`settle` for the request's ``slots``; for its ``message``, only when it does
        not settle later (:meth:`settles_later`), with a batch's length as its cost; ``late``
        for a request that ended before it was settled (refused on the way), so that it still
        counts, whatever Redis says (nothing to tell its client any more)."""
        if late:
            with contextlib.suppress(Exception):
                await self.settle(draft)
        elif message is None:
            await self.settle(draft, slots=slots)
        elif not self.settles_later(message):
            await self.settle(draft, extra=len(message) - 1 if isinstance(message, list) else 0)

    def _member(self) -> str:
        self._serial += 1
        return f"{self._replica}:{self._serial}"

    def _failed(self) -> None:
        if not self.failing:
            self.failing = True
            log.warning(
                "per-client limits and quotas cannot be counted in Redis: %s until it answers "
                "(MCP_QUOTA_ON_REDIS_FAILURE=%s)",
                "each replica counts its own limits and quotas are not checked"
                if self.fail_open
                else "requests that need them are refused with 503",
                "open" if self.fail_open else "closed",
            )

    def _hold(self, slot: Slot, ask: SlotAsk) -> None:
        self.held[ask.member] = ask.key

        def give_back() -> None:
            if self.held.pop(ask.member, None) is None:
                return
            try:
                task = asyncio.get_running_loop().create_task(self._release(ask))
            except RuntimeError:
                return  # no loop any more: the lease runs out
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

        slot.shared = give_back
        if self._beat is None or self._beat.done():
            self._beat = asyncio.get_running_loop().create_task(self._heartbeat())

    async def _release(self, ask: SlotAsk) -> None:
        with contextlib.suppress(Exception):  # Redis away: the lease runs out
            await self.store.release(ask.key, ask.member)

    async def _heartbeat(self) -> None:
        """Renew this process's leases every third of their length while any is held."""
        while self.held:
            await asyncio.sleep(self.lease_s / 3)
            held = [(key, member) for member, key in self.held.items()]
            if held:
                with contextlib.suppress(ServiceUnavailable):
                    await self.store.renew(held, self.lease_us)

    async def close(self) -> None:
        """Stop renewing (the server is stopping): the leases still held run out."""
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(BaseException):
                await self._beat
            self._beat = None
        for task in list(self._releases):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 1.0)
