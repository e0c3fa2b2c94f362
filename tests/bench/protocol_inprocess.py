"""Benchmark: the HTTP protocol layer's time per request, in process, without sockets.

    python tests/bench/protocol_inprocess.py [--protocol this|uvicorn] [--app bare|server]
                                             [--requests 20000] [--rounds 3]

Feeds raw HTTP/1.1 requests (the modern ``tools/call`` of ``echo`` that the HTTP benchmark sends) to
one connection's protocol object on a uvloop loop, with a transport that only counts what is
written, and waits for each answer: uvicorn's httptools protocol as it comes (``uvicorn``) or this
server's (``this``: :mod:`server.serving.uvicorn_protocol`, with coalesced writes). ``--app bare``
answers with a fixed result (the HTTP benchmark's limit app), so the numbers are the protocol's own
(parsing, the request's task, the response's head and writes, keep-alive) plus this harness; ``--app
server`` puts this server's app behind it. Compare the protocols at the same app; the absolute
numbers include the harness's own loop turns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from uvicorn.server import ServerState

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app_inprocess import BASE_HEADERS, modern_request  # noqa: E402  (this directory)
from http_bench import call_params  # noqa: E402

HEAD = b'{"jsonrpc":"2.0","id":'
RESULT = orjson.dumps({"content": [{"type": "text", "text": "hello"}], "isError": False})


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The HTTP benchmark's limit app: read the body, answer a fixed result with its id."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    payload = HEAD + orjson.dumps(orjson.loads(body)["id"]) + b',"result":' + RESULT + b"}"
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class CountingTransport(asyncio.Transport):
    """Counts writes; wakes the harness at each one (the answer, or its last piece)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.answered: asyncio.Future[None] | None = None

    def write(self, data: Any) -> None:
        self.writes += 1
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def writelines(self, pieces: Any) -> None:
        self.write(b"".join(pieces))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def raw_request() -> bytes:
    body, extra = modern_request("tools/call", call_params("echo"), "echo")
    headers = [*BASE_HEADERS, (b"content-length", b"%d" % len(body)), *extra]
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return b"POST /mcp HTTP/1.1\r\n" + lines + b"\r\n" + body


async def measure(args: argparse.Namespace) -> None:
    async with contextlib.AsyncExitStack() as stack:
        await measure_in(args, stack)


async def measure_in(args: argparse.Namespace, stack: contextlib.AsyncExitStack) -> None:
    if args.app == "bare":
        app: Any = bare_app
    else:
        from server.app import Application
        from server.builtin.probe import catalog
        from server.settings import Settings

        settings = Settings(
            _env_file=None, records=["none"], rate_limit_rps=1e9, rate_limit_burst=10**9
        )
        application = Application(settings, catalog)
        app = application.entry
        # Within its lifespan, as a server runs it (it answers 503 until started).
        await stack.enter_async_context(application.lifespan())
    if args.protocol == "this":
        from server.serving.uvicorn_protocol import HttpProtocol

        protocol_class: Any = HttpProtocol
    else:
        protocol_class = "httptools"
    config = uvicorn.Config(
        app, http=protocol_class, lifespan="off", ws="none", log_config=None, interface="asgi3"
    )
    config.load()
    loop = asyncio.get_running_loop()
    protocol_factory: Any = config.http_protocol_class
    protocol = protocol_factory(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    transport = CountingTransport()
    protocol.connection_made(transport)
    request = raw_request()

    async def one() -> None:
        transport.answered = loop.create_future()
        protocol.data_received(request)
        await transport.answered
        await asyncio.sleep(0)  # the rest of the turn: the response's end, a flush
        await asyncio.sleep(0)

    for _ in range(2000):
        await one()
    rounds = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        for _ in range(args.requests):
            await one()
        rounds.append((time.perf_counter() - started) / args.requests * 1e6)
    rounds.sort()
    total = 2000 + args.rounds * args.requests
    print(
        f"protocol {args.protocol}, app {args.app}: {rounds[len(rounds) // 2]:.1f} us per request"
        f" (median of {args.rounds} rounds of {args.requests}; min {rounds[0]:.1f}, max "
        f"{rounds[-1]:.1f}); {transport.writes / total:.1f} writes per response"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=["this", "uvicorn"], default="this")
    parser.add_argument("--app", choices=["bare", "server"], default="bare")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import uvloop

    uvloop.new_event_loop().run_until_complete(measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
