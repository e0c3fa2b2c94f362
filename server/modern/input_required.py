"""Multi-round tool requests (2026-07-28 MRTR): asking the client without server→client requests.

When a handler asks the client something it has no answer for, :class:`ReplayExchange`
suspends it by raising :class:`InputRequired`; the modern era answers with an
``input_required`` result carrying the questions and a sealed ``requestState``. The client
retries the same request with ``inputResponses`` (and the state); the handler is run again from
the start and, this time, each ``ask`` returns the recorded answer. Handlers therefore must be
deterministic up to their questions; ``Context.state`` carries anything expensive across rounds.

The state binds the answers to the method, the target and a digest of the arguments and
expires, so it cannot be replayed into another call; it is signed, not encrypted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from server.context import InputRequest
from server.errors import InvalidParams
from server.sealing import Sealer

Notify = Callable[[str, dict[str, Any]], Awaitable[None]]


class InputRequired(BaseException):
    """Suspends a handler until the client answers ``requests``.

    A BaseException so that a handler's own ``except Exception`` cannot swallow it.
    """

    def __init__(self, requests: dict[str, InputRequest]) -> None:
        super().__init__(sorted(requests))
        self.requests = requests


class ReplayExchange:
    """The modern era's exchange: answers come from the request, questions suspend the call."""

    def __init__(self, answers: Mapping[str, Any], notify: Notify) -> None:
        self._answers = dict(answers)
        self._notify = notify
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

    def __init__(self, sealer: Sealer, ttl_s: float) -> None:
        self._sealer = sealer
        self._ttl_s = ttl_s

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
        value = {"b": self._binding(method, target, arguments), "a": answers, "s": state}
        return self._sealer.seal_json("request-state", value, self._ttl_s)

    def open(
        self, token: Any, method: str, target: str, arguments: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(answers, handler state) from a genuine state for this very call; else -32602."""
        value = self._sealer.open_json("request-state", token, "requestState")
        if (
            not isinstance(value, dict)
            or value.get("b") != self._binding(method, target, arguments)
            or not isinstance(value.get("a"), dict)
            or not isinstance(value.get("s"), dict)
        ):
            raise InvalidParams("Invalid requestState: it belongs to another request")
        return value["a"], value["s"]


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
