"""The chaos run's raw 2024-11-05 HTTP+SSE client (``tests/chaos/run.py``): ``GET /sse`` for the
endpoint event and every answer, each call POSTed to the endpoint.

It reads the stream itself: the endpoint event is this transport's own, which the shared test
client (``tests/support/mcp_client.py``, Streamable HTTP) does not speak.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urljoin

import httpx

from tests.chaos.clients import HANG_S, Client, Failure, failure_kind, http_client, rpc_error
from tests.chaos.ledger import error_kind
from tests.support import mcp_client as mcp

# How soon a stream must be seen to close after a POST of its session got 404, for that 404 to
# be the close itself (the two race; a close takes milliseconds, this shared machine more).
CLOSE_S = 2.0


class HttpSseClient(Client):
    """2024-11-05 HTTP+SSE: ``GET /sse`` (the endpoint event, then every answer), each call
    POSTed to the endpoint. A stream that closes is a clean close (its pending calls are
    ``closed``, the client opens a new one); an answer that never comes while the stream stays
    open is a ``hang``."""

    era = "http+sse"

    async def run(self) -> None:
        async with http_client(self.ledger, self.base, read_s=60) as http:
            while not self.stop.is_set():
                start = self.ledger.now()
                try:
                    await self.session(http)
                except Exception as error:
                    self.note("sse stream", start, failure_kind(error))
                    await self.nap(0.3)

    async def session(self, http: httpx.AsyncClient) -> None:
        pending: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        async with http.stream("GET", "/sse", headers={"Accept": "text/event-stream"}) as r:
            if r.status_code != 200:
                raise Failure(error_kind(status=r.status_code, headers=r.headers))
            lines = r.aiter_lines()
            endpoint = endpoint_url(self.base, await read_endpoint(lines))
            reader = asyncio.ensure_future(read_answers(lines, pending))
            try:
                await self.handshake(http, endpoint, pending, reader)
                number = 10
                while not self.stop.is_set() and not reader.done():
                    number += 1
                    call = mcp.tool_call("echo", {"text": self.name}, id=number)
                    await self.call(http, endpoint, call, pending, reader, "call")
                    await self.nap(0.3)
            finally:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader
        self.ledger.mark(self.name, self.era, "sse closed")

    async def handshake(self, http: Any, endpoint: str, pending: Any, reader: Any) -> None:
        message = mcp.initialize(client_info=self.info, id=1)
        await self.call(http, endpoint, message, pending, reader, "initialize")
        response = await http.post(endpoint, json=mcp.notification("notifications/initialized"))
        if response.status_code != 202:
            raise Failure(error_kind(status=response.status_code))

    async def call(
        self,
        http: Any,
        endpoint: str,
        message: dict[str, Any],
        pending: Any,
        reader: Any,
        what: str,
    ) -> None:
        start = self.ledger.now()
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        pending[message["id"]] = answer
        try:
            response = await http.post(endpoint, json=message)
            if response.status_code != 202:
                refused = error_kind(status=response.status_code, headers=response.headers)
                if response.status_code == 404 and await closes(reader, CLOSE_S):
                    # Posted as its stream closed (a drain, a holder without its bus): the
                    # session ended with the stream, and the client sees both. A 404 while the
                    # stream stays open is a session lost under a live stream: "http 404".
                    refused = "closed"
                raise Failure(refused)
            done, _ = await asyncio.wait(
                {answer, reader}, timeout=HANG_S, return_when="FIRST_COMPLETED"
            )
            if answer in done:
                if (kind := rpc_error(answer.result())) is not None:
                    raise Failure(kind)
                self.note(what, start)
                return
            raise Failure("closed" if reader in done else "hang")
        except Exception as error:
            kind = failure_kind(error)
            self.note(what, start, kind)
            raise Failure(kind) from error
        finally:
            pending.pop(message["id"], None)


async def closes(reader: asyncio.Future[None], within: float) -> bool:
    """Whether the stream ``reader`` reads ends within ``within`` seconds."""
    done, _ = await asyncio.wait({reader}, timeout=within)
    return reader in done


async def read_endpoint(lines: Any) -> str:
    event = ""
    async for line in lines:
        if line.startswith("event:"):
            event = line.partition(":")[2].strip()
        elif line.startswith("data:") and event == "endpoint":
            return line.partition(":")[2].strip()
    raise Failure("closed before the endpoint event")


async def read_answers(lines: Any, pending: dict[Any, asyncio.Future[dict[str, Any]]]) -> None:
    """Hand each answer on the stream to the call waiting for it, until the stream ends."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line.partition(":")[2].strip())
        elif line == "" and data:
            message = json.loads("\n".join(data))
            data = []
            waiter = pending.get(message.get("id")) if isinstance(message, dict) else None
            if waiter is not None and not waiter.done():
                waiter.set_result(message)


def endpoint_url(base: str, endpoint: str) -> str:
    return urljoin(base, endpoint)
