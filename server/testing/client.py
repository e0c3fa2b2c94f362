"""Test a catalog in memory: a client that drives the real app with no sockets, in either era.

::

    async with Client(catalog) as client:  # era="legacy" for 2025-11-25 sessions
        result = await client.call_tool("echo", {"text": "hi"})

It runs the app's lifespan and calls its ASGI callable directly, so a test meets what a real
client meets (headers, ``_meta``, the endpoint's checks, records) and streams arrive as sent.
Progress and logs land in :attr:`Client.notifications`; ``elicit=``, ``sample=``, ``roots=``
answer the handlers' questions; :meth:`Client.listen` opens the list-changed stream. Errors
raise :class:`ErrorAnswer` or :class:`TooManyQuestions`, both a :class:`ClientError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from pydantic import SecretStr

from server.app import Application, create_app
from server.catalog import Catalog
from server.modern.headers import header_value, modern_request
from server.protocol import TOOLS_CALL
from server.settings import Settings
from server.testing.errors import (
    MAX_ROUNDS,
    ClientError,
    ErrorAnswer,
    NoAnswer,
    TooManyQuestions,
)
from server.testing.exchange import Exchange

Answer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]] | dict[str, Any]]
LEGACY_VERSION = "2025-11-25"


class Client:
    """An in-memory MCP client for one catalog; use it as ``async with Client(catalog)``."""

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        era: Literal["modern", "legacy"] = "modern",
        settings: Settings | None = None,
        elicit: Answer | None = None,
        sample: Answer | None = None,
        roots: list[dict[str, Any]] | None = None,
        log_level: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.era = era
        settings = settings or Settings(_env_file=None, records=["none"])
        if not settings.state_secret.get_secret_value():
            # One process by construction: a key of its own, without the WARNING that says
            # replicas would need a shared one.
            secret = SecretStr(secrets.token_hex(32))
            settings = settings.model_copy(update={"state_secret": secret})
        self.app: Application = create_app(settings, catalog)
        self.answers: dict[str, Answer] = {}
        capabilities: dict[str, Any] = {}
        if elicit is not None:
            self.answers["elicitation/create"], capabilities["elicitation"] = elicit, {}
        if sample is not None:
            self.answers["sampling/createMessage"], capabilities["sampling"] = sample, {}
        if roots is not None:
            self.answers["roots/list"] = lambda _params: {"roots": list(roots)}
            capabilities["roots"] = {"listChanged": False}
        self.capabilities = capabilities
        self.log_level = log_level
        self.extra_headers = dict(headers or {})
        if token is not None:
            self.extra_headers["Authorization"] = f"Bearer {token}"
        self.session_id: str | None = None
        self.notifications: list[dict[str, Any]] = []
        self._ids = iter(range(1, 1 << 62))
        self._lifespan: asyncio.Task[None] | None = None
        self._lifespan_in: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._lifespan_out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._background: list[tuple[asyncio.Task[None], asyncio.Event]] = []

    # -- the app's lifespan ----------------------------------------------------------------

    async def __aenter__(self) -> Client:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        self._lifespan = asyncio.create_task(
            self.app(scope, self._lifespan_in.get, self._lifespan_out.put)  # type: ignore[arg-type]
        )
        await self._lifespan_in.put({"type": "lifespan.startup"})
        started = await self._lifespan_out.get()
        if started["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app did not start: {started.get('message')}")
        if self.era == "legacy":
            try:
                await self._initialize()
            except BaseException:
                await self.__aexit__(None, None, None)  # the app stops: no lifespan left running
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task, closed in self._background:
            closed.set()  # the client goes away: the stream's request sees a disconnect
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(task, 5)
        await self._lifespan_in.put({"type": "lifespan.shutdown"})
        await self._lifespan_out.get()
        if self._lifespan is not None:
            await self._lifespan

    # -- requests --------------------------------------------------------------------------

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, progress: bool = False
    ) -> dict[str, Any]:
        """The result of ``method``; questions asked on the way are answered, notifications
        kept in :attr:`notifications`."""
        params = dict(params or {})
        meta = dict(params.get("_meta") or {})
        if progress:
            meta.setdefault("progressToken", f"progress-{next(self._ids)}")
        if self.log_level is not None:
            meta.setdefault("io.modelcontextprotocol/logLevel", self.log_level)
        if meta:
            params["_meta"] = meta
        if self.era == "legacy":
            return await self._legacy(method, params)
        for _ in range(MAX_ROUNDS):
            result = await self._modern(method, params)
            if result.get("resultType") != "input_required":
                return result
            params = {
                **params,
                "inputResponses": {
                    key: await self._answer(asked["method"], asked.get("params") or {})
                    for key, asked in result.get("inputRequests", {}).items()
                },
            }
            params.pop("requestState", None)
            if "requestState" in result:
                params["requestState"] = result["requestState"]
        raise TooManyQuestions(method)

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, progress: bool = False
    ) -> dict[str, Any]:
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.request(TOOLS_CALL, params, progress=progress)

    async def list_tools(self) -> list[dict[str, Any]]:
        return await self._all("tools/list", "tools")

    async def list_prompts(self) -> list[dict[str, Any]]:
        return await self._all("prompts/list", "prompts")

    async def list_resources(self) -> list[dict[str, Any]]:
        return await self._all("resources/list", "resources")

    async def list_resource_templates(self) -> list[dict[str, Any]]:
        return await self._all("resources/templates/list", "resourceTemplates")

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return await self.request("resources/read", {"uri": uri})

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return await self.request("prompts/get", {"name": name, "arguments": dict(arguments or {})})

    async def complete(self, ref: Mapping[str, Any], argument: str, value: str = "") -> list[str]:
        """The completion values for ``argument`` of a prompt (``{"type": "ref/prompt", "name":
        ...}``) or a resource template (``{"type": "ref/resource", "uri": ...}``)."""
        params = {"ref": dict(ref), "argument": {"name": argument, "value": value}}
        result = await self.request("completion/complete", params)
        return list(result["completion"]["values"])

    async def listen(self) -> None:
        """Open the list-changed stream; what it brings lands in :attr:`notifications`."""
        ready = asyncio.Event()

        async def kept(message: dict[str, Any]) -> None:
            if "method" in message:
                self.notifications.append(message)
            ready.set()

        closed = asyncio.Event()
        if self.era == "modern":
            flags = {"toolsListChanged": True, "promptsListChanged": True}
            flags["resourcesListChanged"] = True
            message, headers = self._modern_message(
                "subscriptions/listen", {"notifications": flags}
            )
            task = self._send("POST", message, headers, kept, closed)
        else:
            # The legacy stream sends nothing until something changes: it is ready once its
            # answer starts (the session's stream is then subscribed to the changes).
            exchange = Exchange(kept)
            task = exchange.run(self.app, "GET", None, self._legacy_headers(), closed)
            ready = exchange.started
        running = asyncio.create_task(task)
        self._background.append((running, closed))
        waiting = asyncio.ensure_future(ready.wait())
        await asyncio.wait((waiting, running), return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if running.done():
            running.result()  # a stream that failed to open says why

    # -- the two eras ----------------------------------------------------------------------

    def _modern_message(
        self, method: str, params: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        message, headers = modern_request(
            method,
            params,
            request_id=next(self._ids),
            capabilities=self.capabilities,
            client_info={"name": "server.testing", "version": "1"},
        )
        return message, {**headers, **self.extra_headers}

    async def _modern(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        message, headers = self._modern_message(method, params)
        target = (
            self.app.catalog.tools.get(str(params.get("name"))) if method == TOOLS_CALL else None
        )
        for suffix, prop in getattr(target, "header_params", {}).items():
            value = (params.get("arguments") or {}).get(prop)
            if value is not None:
                headers[f"Mcp-Param-{suffix}"] = header_value(value)
        exchange = await self._exchange(message, headers)
        return self._result_of(exchange, message["id"])

    def _legacy_headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = LEGACY_VERSION
        return {**headers, **self.extra_headers}

    async def _initialize(self) -> None:
        params = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": self.capabilities,
            "clientInfo": {"name": "server.testing", "version": "1"},
        }
        message = {
            "jsonrpc": "2.0",
            "id": next(self._ids),
            "method": "initialize",
            "params": params,
        }
        exchange = await self._exchange(message, self._legacy_headers())
        self._result_of(exchange, message["id"])
        self.session_id = exchange.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self._exchange(initialized, self._legacy_headers())
        if self.log_level is not None:
            await self._legacy("logging/setLevel", {"level": self.log_level})

    async def _legacy(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        asked = 0
        gave_up = asyncio.Event()

        async def on_message(sent: dict[str, Any]) -> None:
            nonlocal asked
            if "method" not in sent or "id" not in sent:
                return
            # The server asks: answer on a POST of its own, as the modern era's rounds do, at
            # most MAX_ROUNDS times; past that, an error, and the call is cancelled.
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": sent["id"]}
            asked += 1
            if asked > MAX_ROUNDS:
                reply["error"] = {
                    "code": -32603,
                    "message": f"server.testing answers at most {MAX_ROUNDS} questions per call",
                }
            else:
                try:
                    reply["result"] = await self._answer(sent["method"], sent.get("params") or {})
                except NoAnswer as missing:
                    reply["error"] = {"code": -32601, "message": str(missing)}
                except Exception as refused:
                    reply["error"] = {"code": -32603, "message": str(refused)}
            await self._exchange(reply, self._legacy_headers())
            if asked > MAX_ROUNDS and not gave_up.is_set():
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": message["id"], "reason": "asked too many questions"},
                }
                await self._exchange(cancel, self._legacy_headers())
                gave_up.set()  # and the call's request disconnects

        exchange = await self._exchange(message, self._legacy_headers(), on_message, gave_up)
        if gave_up.is_set():
            raise TooManyQuestions(method)
        return self._result_of(exchange, message["id"])

    async def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = self.answers.get(method)
        if answer is None:
            raise NoAnswer(f"the server asked {method}, which this client cannot answer")
        value = answer(params)
        return await value if inspect.isawaitable(value) else value

    # -- the ASGI side ---------------------------------------------------------------------

    async def _exchange(
        self,
        message: Mapping[str, Any],
        headers: Mapping[str, str],
        on_message: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
        closed: asyncio.Event | None = None,
    ) -> Exchange:
        exchange = Exchange(self._noting(on_message))
        await self._send("POST", message, headers, exchange, closed)
        return exchange

    def _noting(
        self, then: Callable[[dict[str, Any]], Awaitable[None]] | None
    ) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def noted(message: dict[str, Any]) -> None:
            if "method" in message and "id" not in message:
                self.notifications.append(message)
            if then is not None:
                await then(message)

        return noted

    async def _send(
        self,
        verb: str,
        message: Mapping[str, Any] | None,
        headers: Mapping[str, str],
        into: Exchange | Callable[[dict[str, Any]], Awaitable[None]],
        closed: asyncio.Event | None,
    ) -> None:
        exchange = into if isinstance(into, Exchange) else Exchange(into)
        await exchange.run(self.app, verb, message, headers, closed)

    def _result_of(self, exchange: Exchange, request_id: Any) -> dict[str, Any]:
        refused: dict[str, Any] | None = None
        for message in exchange.messages:
            if message.get("id") == request_id and ("result" in message or "error" in message):
                if "error" in message:
                    raise ErrorAnswer(message["error"], exchange.status, exchange.headers)
                result: dict[str, Any] = message["result"]
                return result
            if message.get("id") is None and isinstance(message.get("error"), dict):
                refused = message["error"]  # refused before it was read: 401, 403, 429, ...
        if refused is not None:
            raise ErrorAnswer(refused, exchange.status, exchange.headers)
        described = {"code": None, "message": f"HTTP {exchange.status}: {exchange.body[:500]!r}"}
        if exchange.status >= 400:
            raise ErrorAnswer(described, exchange.status, exchange.headers)
        raise ClientError(f"HTTP {exchange.status} without an answer: {exchange.body[:500]!r}")

    async def _all(self, method: str, field: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        while True:
            page = await self.request(method, params)
            found += page[field]
            if not page.get("nextCursor"):
                return found
            params = {"cursor": page["nextCursor"]}
