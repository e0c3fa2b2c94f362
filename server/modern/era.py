"""The 2026-07-28 era: stateless requests that carry their version and capabilities.

``ModernEra.validate`` applies the per-request rules in the order the spec's errors imply
(``_meta`` -32602/400, header against body -32020, version -32022, ``Mcp-*`` headers -32020,
method -32601/404) and returns a :class:`ModernCall` carrying what the request names, looked
up once. Lists and ``server/discover`` are :meth:`ModernEra.cached_result` (built once per
catalog version, spliced as ``orjson.Fragment``); every other request is ``ModernEra.handle``,
with the modern envelope (``resultType``, serverInfo in ``_meta``, ``ttlMs``/``cacheScope``,
input-required results). Headers arrive as a plain mapping, so nothing here knows HTTP; the
mirrored headers are :mod:`server.modern.headers`, the extensions :mod:`server.modern.extensions`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from server.call_note import INPUT_REQUIRED, note_outcome, noted
from server.catalog import Catalog
from server.catalog.tools import Tool
from server.catalog.visibility import View
from server.context import Caller, Context, Recorded
from server.dispatch import LIST_METHODS, Dispatcher, Handling, Target
from server.errors import (
    MalformedMeta,
    MethodNotFound,
    UnsupportedProtocolVersion,
)
from server.hub import Event
from server.jsonrpc import Request, encode_notification, encode_result, is_valid_id
from server.modern.extensions import ModernExtensions
from server.modern.headers import HeaderMirror
from server.modern.input_required import (
    InputRequired,
    ReplayExchange,
    RequestStates,
    read_input_responses,
)
from server.modern.listen import ListenFilter, ListenFrames
from server.modern.tasks import ModernTasks
from server.pagination import EncodedResults
from server.protocol import (
    CACHEABLE_METHODS,
    INPUT_REQUIRED_METHODS,
    LOG_LEVEL_RANK,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    MODERN_METHODS,
    MODERN_ONLY_METHODS,
    MODERN_VERSIONS,
    NAME_FIELD_BY_METHOD,
)
from server.tasks.service import TaskService

Send = Callable[[bytes], Awaitable[None]]
CACHED_METHODS = frozenset({"server/discover", *LIST_METHODS})  # ModernEra.cached_result's
CacheScope = Literal["public", "private"]


@dataclass(slots=True)  # not frozen, for the cost on every request (see server.jsonrpc)
class ModernCall:
    """A request that passed every per-request rule, with what it names already looked up
    (:meth:`~server.dispatch.Dispatcher.resolve`), so nothing looks it up again."""

    request: Request
    version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any] | None
    log_level: str | None
    progress_token: str | int | None
    target: Target
    # Who calls (the HTTP side sets both): tasks are bound to the subject, capped per client.
    subject: str | None = None
    # The client's key for its caps, computed only if asked (tasks): most calls never need it.
    key_of: Callable[[], str] | None = None
    # The task the answer created or showed ({"id", "status"}), for the request's record.
    task: dict[str, str] | None = None
    # What the caller may see, when some item is hidden from someone (None: everything).
    view: View | None = None
    # Run with no Context (Dispatcher.plain_tool): sends nothing before its result.
    plain: bool = False

    @property
    def client_key(self) -> str:
        return "" if self.key_of is None else self.key_of()


class ModernEra:
    def __init__(
        self,
        catalog: Catalog,
        dispatcher: Dispatcher,
        states: RequestStates,
        *,
        list_ttl_ms: int,
        discover_ttl_ms: int,
        cache_scope: CacheScope,
        supported_versions: tuple[str, ...] = MODERN_VERSIONS,
        tasks: TaskService | None = None,
    ) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.states = states
        self.list_ttl_ms = list_ttl_ms
        self.discover_ttl_ms = discover_ttl_ms
        self.cache_scope = cache_scope
        self.supported_versions = list(supported_versions)
        self._server_meta = {META_SERVER_INFO: catalog.server_info}
        # Discover and list pages, enveloped for this era and encoded.
        self._encoded = EncodedResults(catalog)
        # The headers that mirror the body (MCP-Protocol-Version, Mcp-Method, Mcp-Name...).
        self.mirror = HeaderMirror()
        # Declared extensions' methods (skills) and the tasks surface.
        self.extensions = ModernExtensions(
            catalog,
            dispatcher.pager.page,
            self._envelope,
            ttl_ms=list_ttl_ms,
            cache_scope=cache_scope,
            tasks=ModernTasks(
                tasks,
                catalog,
                envelope=self._envelope,
                input_required=self._input_required,
                server_meta=self._server_meta,
            )
            if tasks is not None
            else None,
        )

    # -- validation ------------------------------------------------------------------------

    def validate(
        self, request: Request, headers: Mapping[bytes, bytes], view: View | None = None
    ) -> ModernCall:
        meta = request.params.get("_meta")
        if not isinstance(meta, dict):
            raise MalformedMeta("params._meta is required in protocol version 2026-07-28")
        version = meta.get(META_PROTOCOL_VERSION)
        if not isinstance(version, str) or not version:
            raise MalformedMeta(f"params._meta[{META_PROTOCOL_VERSION!r}] is required")
        # Shape only: nothing of these outlives the answer (unlike initialize's), the body cap
        # bounds them; measuring them would cost every request an encoding.
        capabilities = meta.get(META_CLIENT_CAPABILITIES)
        if not isinstance(capabilities, dict):
            raise MalformedMeta(f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object")
        client_info = meta.get(META_CLIENT_INFO)
        if client_info is not None and not isinstance(client_info, dict):
            raise MalformedMeta(f"params._meta[{META_CLIENT_INFO!r}] must be an object")
        log_level = meta.get(META_LOG_LEVEL)
        if log_level is not None and (
            not isinstance(log_level, str) or log_level not in LOG_LEVEL_RANK
        ):
            raise MalformedMeta(f"params._meta[{META_LOG_LEVEL!r}] is not a log level")
        progress_token = meta.get("progressToken")
        if progress_token is not None and not is_valid_id(progress_token):
            raise MalformedMeta("params._meta.progressToken must be a string or an integer")
        method = request.method
        name_field = NAME_FIELD_BY_METHOD.get(method)
        name = None if name_field is None else request.params.get(name_field)
        # The mirrored headers with the body values they mirror: a client repeats them, and a
        # set that matched before is one lookup (HeaderMirror.agreed), no call.
        get = headers.get
        named = None if name_field is None else get(b"mcp-name")
        mirrored = (get(b"mcp-protocol-version"), version, get(b"mcp-method"), method, named, name)
        if (name is not None and type(name) is not str) or mirrored not in self.mirror.agreed:
            self.mirror.check_all(headers, mirrored, name_field, self.supported_versions)
        elif version not in self.supported_versions:
            raise UnsupportedProtocolVersion(version, self.supported_versions)
        # What names something is looked up (lists do not; completions' refs may be hidden or
        # scoped). resolve never raises, and a tool it finds is served.
        target = (
            self.dispatcher.resolve(method, request.params, view)
            if name_field or view is not None or method == "completion/complete"
            else None
        )
        if type(target) is not Tool and not self.serves(method):
            raise MethodNotFound(method)
        call = ModernCall(
            request, version, capabilities, client_info, log_level, progress_token, target
        )
        if isinstance(target, Tool):
            call.plain = self.dispatcher.plain_tool(target, request.params)
            if target.header_params:
                self.mirror.check_params(target, request.params, headers)
        if view is not None:
            call.view = view
        return call

    def serves(self, method: str) -> bool:
        return (
            self.dispatcher.serves(method)  # tools/call, lists: the most, asked first
            or method in MODERN_ONLY_METHODS
            or self.extensions.serves(method)
        )

    def advertised(self) -> list[str]:
        """The methods a client can call right now (what discover's capabilities promise)."""
        served = [method for method in MODERN_METHODS if self.serves(method)]
        return served + self.extensions.methods()

    # -- answering -------------------------------------------------------------------------

    def start(
        self,
        call: ModernCall,
        send: Send,
        caller: Caller | None = None,
        headers: Mapping[bytes, bytes] | None = None,
        record: Recorded | None = None,
    ) -> Handling[dict[str, Any]]:
        """A validated request that :meth:`cached_result` does not answer (nor is it
        ``subscriptions/listen``), started: answered already, or to be awaited within the
        handler timeout (a tool that runs past it fails with a result in this era's envelope).
        ``caller``, ``headers`` and ``record`` are what the handler's Context says of the
        request; ``send`` takes what the call sends before its result."""
        handling = self.handle(call, send, caller, headers, record)
        return Handling(self.dispatcher, call.request.method, handling, self._envelope)

    async def handle(
        self,
        call: ModernCall,
        send: Send,
        caller: Caller | None = None,
        headers: Mapping[bytes, bytes] | None = None,
        record: Recorded | None = None,
    ) -> dict[str, Any]:
        """The result of the request :meth:`start` runs."""
        method = call.request.method
        target, params = call.target, call.request.params
        if call.plain:
            # A tool that takes no Context asks nothing: none is made (a tenth of such a call).
            try:
                result = await self.dispatcher.call_tool(params, None, target)
            except InputRequired as suspended:  # raised by the tool itself: a first round
                note_outcome(INPUT_REQUIRED)
                return self._input_required(call, self._context(call, send), suspended)
            return self._envelope(method, noted(result))
        context = self._context(call, send)
        exchange = context.exchange
        if isinstance(exchange, ReplayExchange) and exchange.spend is not None:
            # A later round: its state is single-use (docs/decisions.md#single-use-request-state).
            await self.states.spend(*exchange.spend)
        context.caller, context.raw_headers, context.record = caller, headers, record
        context.client_key = call.client_key or None
        if self.extensions.handles(call):
            return await self.extensions.handle(call, context)
        try:
            result = await self.dispatcher.call(method, call.request.params, context, call.target)
        except InputRequired as suspended:
            if method not in INPUT_REQUIRED_METHODS:
                raise
            note_outcome(INPUT_REQUIRED)
            return self._input_required(call, context, suspended)
        finally:
            context.finish()
        noted(result)
        if isinstance(call.target, tuple):
            # A read: its resource's own hints (it was found by validate, and read).
            result = self._envelope(method, result)
            result["ttlMs"], result["cacheScope"] = call.target[0].cache_hints(self.cache_scope)
            return result
        return self._envelope(method, result)

    def _context(self, call: ModernCall, send: Send) -> Context:
        async def notify(method: str, params: dict[str, Any]) -> None:
            await send(encode_notification(method, params))

        params = call.request.params
        answers: dict[str, Any] = {}
        state: dict[str, Any] = {}
        spend = None
        if call.request.method in INPUT_REQUIRED_METHODS:
            # Most calls are first rounds: no state to open, no answers to read.
            if params.get("requestState") is not None:
                target, arguments = self._target(call.request)
                answers, state, spend = self.states.open(
                    params["requestState"], call.request.method, target, arguments
                )
            if "inputResponses" in params:
                answers.update(read_input_responses(params))
        return Context(
            exchange=ReplayExchange(answers, notify, spend),
            method=call.request.method,
            request_id=call.request.id,
            era="modern",
            protocol_version=call.version,
            client_capabilities=call.client_capabilities,
            client_info=call.client_info,
            log_level=call.log_level,
            progress_token=call.progress_token,
            state=state,
        )

    @staticmethod
    def _target(request: Request) -> tuple[str, Any]:
        field = NAME_FIELD_BY_METHOD[request.method]
        return str(request.params.get(field)), request.params.get("arguments")

    def _input_required(
        self, call: ModernCall, context: Context, suspended: InputRequired
    ) -> dict[str, Any]:
        """The input-required result: what to ask, and the sealed state to come back with."""
        target, arguments = self._target(call.request)
        exchange = context.exchange
        assert isinstance(exchange, ReplayExchange)
        return {
            "resultType": "input_required",
            "inputRequests": {key: ask.to_wire() for key, ask in suspended.requests.items()},
            "requestState": self.states.seal(
                call.request.method, target, arguments, exchange.used, context.state
            ),
            "_meta": self._server_meta,
        }

    def _envelope(
        self, method: str, result: dict[str, Any], ttl_ms: int | None = None
    ) -> dict[str, Any]:
        result["resultType"] = "complete"
        meta = result.get("_meta")
        result["_meta"] = (
            {**meta, **self._server_meta} if isinstance(meta, dict) else self._server_meta
        )
        if method in CACHEABLE_METHODS:
            result["ttlMs"] = self.list_ttl_ms if ttl_ms is None else ttl_ms
            result["cacheScope"] = self.cache_scope
        return result

    def cached_result(self, call: ModernCall) -> orjson.Fragment | None:
        """The result of a list or ``server/discover`` request, a page kept as bytes, ready
        without waiting or sending anything first; None for any other method."""
        method = call.request.method
        if method == "server/discover" or method in LIST_METHODS:
            return self._cached(method, call.request.params.get("cursor"), call.view)
        return None

    def _cached(self, method: str, cursor: Any, view: View | None = None) -> orjson.Fragment:
        if method == "server/discover":
            found = self._encoded.get((method, 0))
            if found is None:
                found = self._encoded.put((method, 0), self.discover_result())
            return found
        if view is None:  # the default: as before views
            return self.dispatcher.cached_page(method, cursor, self._encoded, self._envelope)
        private = view.depends(LIST_METHODS[method][0])
        envelope = self._private_envelope if private else self._envelope
        return self.dispatcher.cached_page(method, cursor, self._encoded, envelope, view)

    def _private_envelope(self, method: str, result: dict[str, Any]) -> dict[str, Any]:
        """A list page that depends on who asks: no shared cache may keep it for others."""
        result = self._envelope(method, result)
        result["cacheScope"] = "private"
        return result

    def discover_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": self.supported_versions,
            "capabilities": self.catalog.snapshot.capabilities,
        }
        if self.catalog.instructions:
            result["instructions"] = self.catalog.instructions
        result["ttlMs"] = self.discover_ttl_ms
        result["cacheScope"] = self.cache_scope
        result["_meta"] = self._server_meta
        return result

    # -- subscriptions/listen --------------------------------------------------------------

    def listen(self, call: ModernCall) -> tuple[ListenFilter, bytes]:
        """The granted filter and the acknowledgement frame for a listen request."""
        granted = ListenFilter.grant(
            call.request.params.get("notifications"),
            self.catalog.snapshot.capabilities,
            client_capabilities=call.client_capabilities,
            owner=call.subject,
        )
        ack = encode_notification(
            "notifications/subscriptions/acknowledged",
            {"_meta": {META_SUBSCRIPTION_ID: call.request.id}, "notifications": granted.to_wire()},
        )
        return granted, ack

    @staticmethod
    def listen_frame(
        granted: ListenFilter, subscription_id: Any
    ) -> Callable[[Event], bytes | None]:
        return ListenFrames(granted, subscription_id)

    def listen_closing(self, subscription_id: Any) -> bytes:
        """The graceful result that ends a listen stream the server closes (shutdown)."""
        meta = {META_SUBSCRIPTION_ID: subscription_id, **self._server_meta}
        return encode_result(subscription_id, {"resultType": "complete", "_meta": meta})
