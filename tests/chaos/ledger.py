"""What the chaos run's clients saw (``tests/chaos/run.py``): every operation with its time and
outcome, every request the server answered (by its ``X-Request-Id``), and the stream events a
promise is about (a listen stream's completion result, a GET stream resumed, an HTTP+SSE stream
closed), all on one monotonic clock so each can be laid against the fault windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

ERAS = ("2026-07-28", "initialize", "http+sse")
# Requests that answer at once (the others are streams, tasks and calls silent on purpose).
STALL_S = 0.05  # a late wake-up of the clients' loop worth noting
QUICK = frozenset({"call", "list", "progress call", "touch", "initialize"})


@dataclass
class Op:
    """One client operation: a request and its answer, or a stream's life."""

    client: str
    era: str
    what: str
    start: float
    end: float
    error: str | None = None  # the kind of error the client saw; None: it got what it asked

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def at(self) -> float:
        return self.start if self.what in QUICK else self.end


@dataclass
class Mark:
    """Something a stream did that a promise counts (``listen completed``, ``GET resumed``)."""

    client: str
    era: str
    what: str
    at: float


@dataclass
class Ledger:
    ops: list[Op] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    answered: list[tuple[float, str]] = field(default_factory=list)  # (when, X-Request-Id)
    # X-Request-Id -> what the client sent and got ("POST /api/mcp tools/call -> 200"): what a
    # request without exactly one record was, when the verdict names it.
    described: dict[str, str] = field(default_factory=dict)
    # (when, seconds): moments the clients' own event loop ran late (this process busy or
    # starved), which every request in flight then counts as latency (:func:`watch_loop`).
    stalls: list[tuple[float, float]] = field(default_factory=list)

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def op(self, client: str, era: str, what: str, start: float, error: str | None) -> Op:
        entry = Op(client, era, what, start, self.now(), error)
        self.ops.append(entry)
        return entry

    def mark(self, client: str, era: str, what: str) -> None:
        self.marks.append(Mark(client, era, what, self.now()))

    def response(self, response: Any) -> None:
        """Note a response's ``X-Request-Id``: the app answered it, so a record must exist
        (nginx's own 502/504 carry none)."""
        request_id = response.headers.get("x-request-id")
        if request_id:
            self.answered.append((self.now(), request_id))
            self.described[request_id] = describe(response)

    def in_window(self, start: float, end: float) -> list[Op]:
        """The operations of the window: a stream's life or a task where it ended (where its
        client saw what happened), a request where it started (a request that waited in vain
        belongs to the moment it was sent)."""
        return [op for op in self.ops if start <= op.at <= end]

    def marks_in(self, start: float, end: float) -> list[Mark]:
        return [mark for mark in self.marks if start <= mark.at <= end]


async def watch_loop(ledger: Ledger, stop: asyncio.Event, tick: float = 0.01) -> None:
    """Note each time the clients' event loop wakes more than ``STALL_S`` late."""
    while not stop.is_set():
        before = ledger.now()
        await asyncio.sleep(tick)
        late = ledger.now() - before - tick
        if late > STALL_S:
            ledger.stalls.append((before, late))


def describe(response: Any) -> str:
    """``POST /api/mcp tools/call -> 200 text/event-stream``: the request line, its JSON-RPC
    method (when its body was a JSON object the client still holds), the status and type."""
    request = response.request
    method = ""
    with contextlib.suppress(Exception):
        body = json.loads(request.content)
        method = f" {body.get('method') or 'answer'}" if isinstance(body, dict) else " batch"
    kind = response.headers.get("content-type", "").split(";")[0]
    return f"{request.method} {request.url.path}{method} -> {response.status_code} {kind}"


def error_kind(error: BaseException | None = None, status: int | None = None, **more: Any) -> str:
    """A short, stable name for what a client saw: ``http 503 retry-after``, ``rpc -32000``,
    ``conn ReadError``, ``hang``..."""
    if status is not None:
        kind = f"http {status}"
        headers = more.get("headers")
        if status == 503 and headers is not None and "retry-after" in headers:
            kind += " retry-after"
        return kind
    if "rpc" in more:
        return f"rpc {more['rpc']}"
    if error is None:
        return "unknown"
    if isinstance(error, (TimeoutError, httpx.TimeoutException)):
        return "hang"
    text = str(error)
    for status_code in (404, 410, 502, 503, 504):
        if str(status_code) in text:
            return f"http {status_code}"
    if isinstance(error, (httpx.TransportError, ConnectionError, OSError)):
        return f"conn {type(error).__name__}"
    return f"{type(error).__name__}: {text[:60]}"


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def errors_by_kind(ops: list[Op]) -> Counter[str]:
    return Counter(f"{op.era}:{op.error}" for op in ops if op.error is not None)
