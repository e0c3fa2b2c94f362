"""Multi-round tool requests (2026-07-28 MRTR): asking the client without server→client requests.

When a handler asks something it has no answer for, :class:`ReplayExchange` suspends it by
raising :class:`InputRequired`; the era answers ``input_required`` with the questions and a
sealed ``requestState``, and the client retries with ``inputResponses``: the handler runs again
from the start, each ``ask`` now returning the recorded answer (so handlers are deterministic up
to their questions; ``Context.state`` carries the expensive parts). The state binds the answers
to the method, target and arguments, expires, and is single-use: its nonce is spent (in the
state every replica shares) before the handler runs (docs/decisions.md#single-use-request-state).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import orjson

from server.context import InputRequest
from server.errors import InvalidParams
from server.sealing import Sealer

Notify = Callable[[str, dict[str, Any]], Awaitable[None]]

SPENT = "Invalid requestState: it was used already; send the request again without it"


class SpentStates(Protocol):
    """The nonces of request states already used, until they expire."""

    async def spend(self, nonce: str, expires_at: float) -> bool:
        """Mark ``nonce`` used: True the first time, False when it was already."""
        ...


class SpentInMemory:
    """:class:`SpentStates` in one process, at most ``capacity`` nonces: when full, the oldest
    is forgotten and every state that expires no later than it is refused from then on (a
    client starts that request again), so forgetting never re-opens a replay."""

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._spent: OrderedDict[str, float] = OrderedDict()
        self._floor = 0.0

    async def spend(self, nonce: str, expires_at: float) -> bool:
        now = time.time()
        spent = self._spent
        while spent and next(iter(spent.values())) < now:
            spent.popitem(last=False)
        if expires_at <= self._floor or nonce in spent:
            return False
        if len(spent) >= self.capacity:
            self._floor = max(self._floor, spent.popitem(last=False)[1])
            if expires_at <= self._floor:
                return False
        spent[nonce] = expires_at
        return True


class InputRequired(BaseException):
    """Suspends a handler until the client answers ``requests``.

    A BaseException so that a handler's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, requests: dict[str, InputRequest]) -> None:
        super().__init__(sorted(requests))
        self.requests = requests


class ReplayExchange:
    """The modern era's exchange: answers come from the request, questions suspend the call."""

    def __init__(
        self, answers: Mapping[str, Any], notify: Notify, spend: tuple[str, float] | None = None
    ) -> None:
        self._answers = dict(answers)
        self._notify = notify
        # The nonce and expiry of the requestState these answers came with, to spend.
        self.spend = spend
        # Answers the handler actually consumed: all that is worth carrying to the next round.
        self.used: dict[str, Any] = {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._notify(method, params)

    def close_stream(self) -> None:
        """2026-07-28 streams are not resumable: closing one would cancel the call."""

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        parsed: dict[str, Any] = {}
        missing: dict[str, InputRequest] = {}
        for key, request in requests.items():
            if key not in self._answers:
                missing[key] = request
                continue
            try:
                parsed[key] = request.parse(self._answers[key])
            except ValueError as malformed:
                raise InvalidParams(
                    f"Malformed input response {key!r}: {malformed}", {"inputResponse": key}
                ) from None
            self.used[key] = self._answers[key]
        if missing:
            raise InputRequired(missing)
        return parsed


class RequestStates:
    """Seals and opens ``requestState`` for one server."""

    def __init__(self, sealer: Sealer, ttl_s: float, spent: SpentStates | None = None) -> None:
        self._sealer = sealer
        self._ttl_s = ttl_s
        self.spent: SpentStates = SpentInMemory() if spent is None else spent

    @staticmethod
    def _binding(method: str, target: str, arguments: Any) -> str:
        # A missing "arguments" and an empty object are the same call.
        canonical = orjson.dumps(arguments or {}, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.sha256(canonical).hexdigest()
        return f"{method}\x00{target}\x00{digest[:32]}"

    def seal(
        self,
        method: str,
        target: str,
        arguments: Any,
        answers: dict[str, Any],
        state: dict[str, Any],
    ) -> str:
        value = {
            "b": self._binding(method, target, arguments),
            "a": answers,
            "s": state,
            "n": secrets.token_urlsafe(12),
            "x": int(time.time() + self._ttl_s) + 1,
        }
        return self._sealer.seal_json("request-state", value, self._ttl_s)

    def open(
        self, token: Any, method: str, target: str, arguments: Any
    ) -> tuple[dict[str, Any], dict[str, Any], tuple[str, float]]:
        """(answers, handler state, (nonce, expiry) to spend) from a genuine state for this
        very call; else -32602."""
        value = self._sealer.open_json("request-state", token, "requestState")
        if (
            not isinstance(value, dict)
            or value.get("b") != self._binding(method, target, arguments)
            or not isinstance(value.get("a"), dict)
            or not isinstance(value.get("s"), dict)
            or not isinstance(value.get("n"), str)
            or not isinstance(value.get("x"), int)
        ):
            raise InvalidParams("Invalid requestState: it belongs to another request")
        return value["a"], value["s"], (value["n"], float(value["x"]))

    async def spend(self, nonce: str, expires_at: float) -> None:
        """Use a state's nonce up before its answers are believed; -32602 if it was already."""
        if not await self.spent.spend(nonce, expires_at):
            raise InvalidParams(SPENT)


def read_input_responses(params: Mapping[str, Any]) -> dict[str, Any]:
    """The client's answers; present but malformed is a protocol error, not a re-ask."""
    if "inputResponses" not in params:
        return {}
    responses = params["inputResponses"]
    if not isinstance(responses, dict):
        raise InvalidParams("inputResponses must be an object keyed by input request")
    for key, response in responses.items():
        if not isinstance(response, dict):
            raise InvalidParams(
                f"inputResponses[{key!r}] must be an object", {"inputResponse": key}
            )
    return responses
