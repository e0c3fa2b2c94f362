"""Benchmark: what framing one SSE event costs, this server's ``sse_frame`` against sse-starlette.

    python tests/bench/sse_frames_bench.py [--frames 100000] [--payload 200]

For each kind of frame a stream writes (a message, a resumable message with an id, a priming
event with ``retry``, a keep-alive comment), the best of five ``timeit`` runs of ``--frames``
frames, in microseconds per frame: ``server.transport.sse.sse_frame`` and sse-starlette's
``ServerSentEvent(...).encode()`` for the same fields (its data is text, so the payload is
decoded first, as a caller holding orjson's bytes would have to). Checks first that both write
the same bytes. The payload is a JSON-RPC notification padded to about ``--payload`` bytes.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import orjson
from sse_starlette import ServerSentEvent

from server.transport.sse import sse_frame

EVENT_ID = "3f2a9c1e7b4d4e0a9c552b1f3e8d9a10_17"


def payload_of(size: int) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"}, "pad": ""},
    }
    pad = max(0, size - len(orjson.dumps(message)))
    message["params"]["pad"] = "x" * pad  # type: ignore[index]
    return orjson.dumps(message)


def cases(payload: bytes) -> list[tuple[str, Callable[[], bytes], Callable[[], bytes]]]:
    return [
        (
            "message",
            lambda: sse_frame(payload),
            lambda: ServerSentEvent(payload.decode(), event="message").encode(),
        ),
        (
            "message with id",
            lambda: sse_frame(payload, event_id=EVENT_ID),
            lambda: ServerSentEvent(payload.decode(), id=EVENT_ID, event="message").encode(),
        ),
        (
            "priming (id, retry)",
            lambda: sse_frame(b"", event_id=EVENT_ID, retry_ms=1000),
            lambda: ServerSentEvent("", id=EVENT_ID, retry=1000).encode(),
        ),
        (
            "keep-alive comment",
            lambda: sse_frame(comment=""),
            lambda: ServerSentEvent(comment="").encode(),
        ),
    ]


def per_frame_us(build: Callable[[], bytes], frames: int) -> float:
    return min(timeit.repeat(build, number=frames, repeat=5)) / frames * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames per timed run")
    parser.add_argument("--payload", type=int, default=200, help="JSON payload size (bytes)")
    args = parser.parse_args()
    payload = payload_of(args.payload)
    print(f"{args.frames} frames per run, best of 5; payload {len(payload)} bytes")
    print(f"{'frame':22s} {'sse_frame':>10s} {'sse-starlette':>14s} {'ratio':>6s}")
    for name, ours, theirs in cases(payload):
        if ours() != theirs():
            print(f"{name}: the bytes differ: {ours()!r} != {theirs()!r}")
            return 1
        mine, library = per_frame_us(ours, args.frames), per_frame_us(theirs, args.frames)
        print(f"{name:22s} {mine:8.3f} us {library:11.3f} us {library / mine:5.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
