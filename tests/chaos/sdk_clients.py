"""The chaos run's clients built on the official SDK (``mcp``): an ``initialize``-era session
over Streamable HTTP (its own GET stream, progress, a subscription) and an HTTP+SSE session
through ``sse_client``.

The SDK never opens a new session by itself: once its session is lost (a 404, a stream that
ended) every call fails. These clients do what an application must then do, close the
``Client`` and make a new one, and note the error that made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError

from tests.chaos.clients import GET_OPEN_S, HANG_S, Failure, failure_kind, tls
from tests.chaos.clients import Client as ChaosClient
from tests.chaos.ledger import error_kind


class SdkSession(ChaosClient):
    """``initialize`` era through ``mcp.Client(mode="legacy")`` over Streamable HTTP, or the
    2024-11-05 HTTP+SSE transport through ``sse_client`` (``sse=True``)."""

    def __init__(self, *args: Any, touching: asyncio.Event, sse: bool = False) -> None:
        super().__init__(*args)
        self.touching = touching
        self.sse = sse
        self.era = "http+sse" if sse else "initialize"
        self.uri = f"chaos://{self.name}"
        self.failed: list[tuple[float, int]] = []  # (when, status) of every error status seen
        # Set by the run between two faults: close this Client and open a new one, so what one
        # fault did to the SDK (a GET stream it gave up) is not counted against the next.
        self.renew = asyncio.Event()
        self.sessions = 0  # Clients opened so far
        # The session's GET stream is open (its 200 came): a touch before it has no stream to
        # be told on, in any era's rules, so touches wait for it (a fresh GET starts from now).
        self.get_open = asyncio.Event()

    async def hook(self, response: httpx2.Response) -> None:
        self.ledger.response(response)
        if response.request.method == "GET" and response.status_code == 200:
            self.get_open.set()
        if response.status_code >= 400:
            self.failed.append((self.ledger.now(), response.status_code))

    def kind(self, error: BaseException, start: float) -> str:
        """What the SDK raised, named by the HTTP status behind it where the SDK hides it: a
        non-JSON error status ("Server returned an error response": nginx's 502), or a call
        that waited in vain after the SDK dropped its POST's error status (``sse_client``
        logs a 503 on ``/messages`` and leaves the call waiting)."""
        kind = sdk_kind(error)
        statuses = [status for at, status in self.failed if at >= start]
        if kind == "server error" and statuses:
            return f"http {statuses[-1]}"
        if kind == "hang" and statuses:
            return f"hang after http {statuses[-1]} (SDK)"
        return kind

    def factory(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        """The SDK's client (``create_mcp_http_client``'s defaults) on one TLS context for
        the run: a client of its own loads the CA bundle, about 50 ms of CPU on the loop that
        runs every client of the run, each time ``sse_client`` reconnects (the rollout's
        slowest requests waited for it)."""
        if timeout is None:
            timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
        client = httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, verify=tls())
        client.event_hooks["response"].append(self.hook)
        return client

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updates += 1

    def transport(self, http: httpx2.AsyncClient | None) -> Any:
        if self.sse:
            return sse_client(
                f"{self.base}/sse",
                timeout=5,
                sse_read_timeout=60,
                httpx_client_factory=self.factory,
            )
        return streamable_http_client(f"{self.base}/mcp", http_client=http)

    async def run(self) -> None:
        while not self.stop.is_set():
            self.renew.clear()
            start = self.ledger.now()
            try:
                await self.session()
            except Exception as error:
                self.note("session", start, self.kind(error, start))
                await self.nap(0.3)

    async def session(self) -> None:
        self.get_open.clear()
        http = None if self.sse else self.factory(timeout=httpx2.Timeout(5, read=60))
        async with contextlib.AsyncExitStack() as stack:
            if http is not None:
                await stack.enter_async_context(http)
            start = self.ledger.now()
            # No fail_after around the Client: its task group must close inside its own scope;
            # the initialize is bounded by read_timeout_seconds, the connect by the transport.
            client = await stack.enter_async_context(
                Client(
                    self.transport(http),
                    mode="legacy",
                    read_timeout_seconds=HANG_S,
                    message_handler=self.on_message,
                    client_info=types.Implementation(name=self.name, version="1"),
                )
            )
            if not self.sse:
                with warnings.catch_warnings(), anyio.fail_after(HANG_S):
                    warnings.simplefilter("ignore")
                    await client.subscribe_resource(self.uri)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.get_open.wait(), GET_OPEN_S)
            self.note("initialize", start)
            self.sessions += 1
            while not self.stop.is_set() and not self.renew.is_set():
                await self.step(client)
                await self.nap(0.3)

    async def step(self, client: Client) -> None:
        calls: list[tuple[str, str, dict[str, Any]]] = [("call", "echo", {"text": self.name})]
        if not self.sse:
            calls.append(("progress call", "count", {"steps": 3, "delay_ms": 20}))
            if self.touching.is_set():
                calls.append(("touch", "touch", {"uri": self.uri}))
        for what, tool, arguments in calls:
            start = self.ledger.now()
            try:
                with anyio.fail_after(HANG_S):
                    result = await client.call_tool(tool, arguments)
                if result.is_error:
                    raise Failure("tool error")
                self.note(what, start)
                if what == "touch":
                    self.touches_ok += 1
            except Exception as error:
                kind = self.kind(error, start)
                self.note(what, start, kind)
                raise Failure(kind) from error


def sdk_kind(error: BaseException) -> str:
    """The kind of an SDK failure: its HTTP status when it names one, else the class."""
    if isinstance(error, Failure):
        return str(error)
    if isinstance(error, TimeoutError):
        return "hang"
    if isinstance(error, httpx2.HTTPStatusError):
        return error_kind(status=error.response.status_code, headers=error.response.headers)
    if isinstance(error, BaseExceptionGroup):
        return sdk_kind(error.exceptions[0])
    if isinstance(error, MCPError):
        if error.message == "Connection closed":  # the SDK's own -32000, the stream gone
            return "closed"
        if error.message == "Session terminated":
            return "http 404"
        if error.message == "Server returned an error response":
            return "server error"
        return f"rpc {error.code}"
    text = str(error)
    for status in (404, 410, 502, 503, 504):
        if str(status) in text:
            return f"http {status}"
    if isinstance(error, httpx2.TransportError):
        return f"conn {type(error).__name__}"
    return failure_kind(Failure(f"{type(error).__name__}: {text[:50]}"))
