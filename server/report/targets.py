"""Counting tool calls, prompt gets and resource reads by what they named, for the report.

A target is ``(kind, name)``: ``tool``, ``prompt``, ``resource`` or ``template``, from the
record's ``target`` (older records: ``params.name`` / ``params.uri``); a call refused before it
named anything counts under ``(unresolved)``. Each target counts, per client, calls, outcomes,
error codes and latency; a streamed answer is ``unknown`` until its stream record ends it.
Names come from clients, so they are cut to :data:`MAX_TARGET_CHARS`, past
:data:`MAX_TARGETS` counted as ``(other)``, and clients past ``max_clients`` as
``(other clients)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.report.measures import CALL_METHODS, OUTCOMES, Histogram, bucket

MAX_TARGETS = 2_000
OTHER_TARGET = "(other)"
UNKNOWN_TARGET = "(unresolved)"
_ABSENT = object()
MAX_TARGET_CHARS = 200
# Index of each outcome in a target's counters (index 0 counts calls).
OUTCOME_INDEX = {outcome: index for index, outcome in enumerate(OUTCOMES, 1)}
_UNKNOWN = OUTCOME_INDEX["unknown"]
_ERROR = OUTCOME_INDEX["error"]
_CRASH = OUTCOME_INDEX["crash"]
# What a handler that raised unexpectedly answers (prompts and resources; a tool's crash is
# an isError result).
INTERNAL_ERROR = -32603

TargetKey = tuple[str, str]


class TargetStats:
    """One target: counters per client (``[calls, then one per outcome]``, keyed by the
    client's counters object), JSON-RPC error codes and a latency histogram."""

    __slots__ = ("by_client", "codes", "latency")

    def __init__(self) -> None:
        self.by_client: dict[Any, list[int]] = {}
        self.codes: dict[int, int] = {}
        self.latency: Histogram = {}


class Targets:
    """Every target seen, bounded."""

    def __init__(self, max_clients: int, overflow: Callable[[], Any]) -> None:
        self.stats: dict[TargetKey, TargetStats] = {}
        self.max_clients = max_clients
        self.overflow = overflow

    def _counters(self, target: TargetStats, client: Any) -> list[int]:
        """A new client's counters on ``target``, or the overflow client's past the cap."""
        if len(target.by_client) >= self.max_clients:
            client = self.overflow()
            found = target.by_client.get(client)
            if found is not None:
                return found
        counters = target.by_client[client] = [0] * (len(OUTCOMES) + 1)
        return counters

    def call(
        self,
        client: Any,
        record: dict[str, Any],
        method: str,
        code: int | None,
        streaming: bool,
        duration: float | None,
    ) -> bool:
        """A request record of a call counted into its target; whether the call failed as a
        call (``is_error`` or ``crash``)."""
        target = self.target(record, method)
        counters = target.by_client.get(client)
        if counters is None:
            counters = self._counters(target, client)
        counters[0] += 1
        outcome = record.get("outcome")
        index = OUTCOME_INDEX.get(outcome) if type(outcome) is str else None
        if index is None:
            # A record written before outcomes were (or a streamed answer, whose stream record
            # will say): only a JSON-RPC error is known, and -32603 is what a crash gets.
            if code is None or streaming:
                index = _UNKNOWN
            else:
                index = _CRASH if code == INTERNAL_ERROR else _ERROR
        counters[index] += 1
        if code is not None:
            target.codes[code] = target.codes.get(code, 0) + 1
        if duration is not None:
            slot = bucket(duration)
            target.latency[slot] = target.latency.get(slot, 0) + 1
        return index == _CRASH or outcome == "is_error"

    def settle(
        self,
        client: Any,
        record: dict[str, Any],
        method: str,
        outcome: str,
        code: int | None,
        lasted: float | None,
    ) -> bool:
        """A streamed call's outcome, from its stream record, in place of the ``unknown`` its
        request record counted; whether it failed as a call."""
        failed = outcome in ("is_error", "crash")
        index = OUTCOME_INDEX.get(outcome)
        if index is None or type(record.get("target")) is not str:
            return failed
        target = self.target(record, method)
        counters = target.by_client.get(client)
        if counters is None and len(target.by_client) >= self.max_clients:
            counters = target.by_client.get(self.overflow())
        if counters is None or not counters[_UNKNOWN]:
            return failed  # its request record was not counted (filtered out, or missing)
        counters[_UNKNOWN] -= 1
        counters[index] += 1
        if code is not None:
            target.codes[code] = target.codes.get(code, 0) + 1
        if lasted is not None:
            slot = bucket(lasted)
            target.latency[slot] = target.latency.get(slot, 0) + 1
        return failed

    def target(self, record: dict[str, Any], method: str) -> TargetStats:
        kind = CALL_METHODS[method]
        name = record.get("target", _ABSENT)
        if name is _ABSENT:
            # A record from before the field: named by its params.
            params = record.get("params")
            field = "uri" if kind == "resource" else "name"
            name = params.get(field) if type(params) is dict else None
        if type(name) is not str:
            # Refused before it was resolved (a resource not found, a bad header): one target,
            # however many names clients tried.
            name = UNKNOWN_TARGET
        if kind == "resource" and "{" in name:
            kind = "template"
        key = (kind, name)
        found = self.stats.get(key)
        if found is None:
            if len(name) > MAX_TARGET_CHARS:
                key = (kind, name[: MAX_TARGET_CHARS - 3] + "...")
            if len(self.stats) >= MAX_TARGETS and key not in self.stats:
                key = (kind, OTHER_TARGET)
            found = self.stats.get(key)
            if found is None:
                found = self.stats[key] = TargetStats()
        return found
