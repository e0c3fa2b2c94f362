"""The legacy era (2025-11-25 and older): ``initialize``, sessions, and what they carry.

``LegacyEra`` negotiates the version, answers ``initialize`` with that version's capability
shape, and serves the session methods (``ping``, ``logging/setLevel``, ``resources/subscribe``)
plus every shared method through the :class:`~server.dispatch.Dispatcher` the modern era uses,
list pages as cached bytes. Asking the client is :class:`~server.legacy.exchange.LegacyExchange`,
answered by a later POST that :meth:`LegacyEra.accept_response` matches by id. Log messages go
out from the level in the request's ``_meta``, else ``logging/setLevel``, else
``default_log_level`` (every level, as the official SDKs' servers send). What ``initialize``
declares is bounded in size and depth (:func:`server.jsonrpc.declared_problem`). No HTTP here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson

from server.call_note import noted
from server.catalog import Catalog
from server.catalog.visibility import View
from server.context import Caller, Context, Recorded
from server.dispatch import LIST_METHODS, Dispatcher, Handling, Target
from server.errors import InvalidParams, MethodNotFound
from server.hub import MAX_URI_LENGTH
from server.jsonrpc import (
    Request,
    Response,
    declared_problem,
    is_valid_id,
)
from server.legacy.calls import LegacyCall
from server.legacy.exchange import LegacyExchange, Outbox
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session, SessionStore
from server.legacy.tasks import TASKS_CAPABILITY, LegacyTasks
from server.pagination import EncodedResults
from server.protocol import (
    LEGACY_METHODS,
    LEGACY_TASK_METHODS,
    LEGACY_VERSIONS,
    LOG_LEVEL_RANK,
    META_LOG_LEVEL,
    PRIMING_SINCE,
    TOOLS_CALL,
)
from server.tasks.service import TaskService

log = logging.getLogger(__name__)

# Capabilities a version did not know yet are left out of its initialize result.
_INTRODUCED = {"completions": "2025-03-26"}

OwnHandler = Callable[
    [Session, SessionRuntime, str, Mapping[str, Any]], Coroutine[Any, Any, dict[str, Any]]
]


class LegacyEra:
    def __init__(
        self,
        catalog: Catalog,
        dispatcher: Dispatcher,
        store: SessionStore,
        *,
        client_request_timeout_s: float,
        supported_versions: tuple[str, ...] = LEGACY_VERSIONS,
        default_log_level: str | None = "debug",
        tasks: TaskService | None = None,
        on_subscriptions: Callable[[str, str, bool], None] | None = None,
        versions_now: Callable[[], tuple[str, ...]] | None = None,
    ) -> None:
        # The versions not retired right now (server.retirement), when any is being retired.
        self.versions_now = versions_now
        # Told (session id, uri, subscribed) when a session's resource subscriptions change,
        # so a GET stream held by another replica can follow them.
        self.on_subscriptions = on_subscriptions
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.store = store
        self.client_request_timeout_s = client_request_timeout_s
        self.supported_versions = supported_versions
        if default_log_level is not None and default_log_level not in LOG_LEVEL_RANK:
            raise ValueError(f"default_log_level {default_log_level!r} is not a log level")
        # The lowest level sent until the session sets one; None: nothing until then.
        self.default_log_level = default_log_level
        # List pages, encoded once per catalog version (every legacy version lists the same).
        self._pages = EncodedResults(catalog)
        # 2025-11-25's tasks, run by the same service as the tasks extension.
        self.tasks = LegacyTasks(tasks, catalog, dispatcher.pager) if tasks is not None else None
        # The handlers of the methods only this era serves (protocol.METHODS has their rows).
        self._own: dict[str, OwnHandler] = {
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._subscribe,
        }

    # -- initialize ------------------------------------------------------------------------

    def negotiate(self, requested: Any) -> str:
        """The requested version when served, else the newest legacy version (never an error)."""
        supported = self.offered_versions()
        if isinstance(requested, str) and requested in supported:
            return requested
        return supported[0]

    def offered_versions(self) -> tuple[str, ...]:
        """The versions ``initialize`` offers now: retired ones never (server.retirement)."""
        supported = self.supported_versions
        if self.versions_now is None:
            return supported
        offered = set(self.versions_now())
        return tuple(v for v in supported if v in offered) or supported

    def capabilities(self, version: str) -> dict[str, Any]:
        capabilities = dict(self.catalog.snapshot.capabilities)
        capabilities.pop("extensions", None)
        if self.tasks is not None and self.tasks.available(version):
            capabilities["tasks"] = TASKS_CAPABILITY
        for name, since in _INTRODUCED.items():
            if version < since:
                capabilities.pop(name, None)
        return capabilities

    async def initialize(
        self, request: Request, owner: str | None = None
    ) -> tuple[Session, dict[str, Any]]:
        """The new session (opened by ``owner``, the authenticated subject, in the same store
        write) and the ``initialize`` result."""
        version, client_info, capabilities = self._declared(request)
        session = await self.store.create(version, client_info, capabilities, owner=owner)
        return session, self._initialize_result(version)

    async def initialize_opened(self, session: Session, request: Request) -> dict[str, Any]:
        """``initialize`` for a session its transport opened first (the HTTP+SSE transport
        opens it with its stream): what the client declares is saved into it; the result."""
        version, client_info, capabilities = self._declared(request)
        session.protocol_version = version
        session.client_info = client_info
        session.client_capabilities = capabilities
        await self.store.save(session)
        return self._initialize_result(version)

    def _declared(self, request: Request) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The negotiated version and what ``initialize`` declares, checked and bounded."""
        params = request.params
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise InvalidParams("initialize needs params.protocolVersion (a string)")
        capabilities = params.get("capabilities", {})
        client_info = params.get("clientInfo", {})
        if not isinstance(capabilities, dict) or not isinstance(client_info, dict):
            raise InvalidParams(
                "initialize needs params.capabilities and params.clientInfo objects"
            )
        # The session keeps both for as long as it lives (and a shared store holds them):
        # bounded before any session exists.
        for name, declared in (("capabilities", capabilities), ("clientInfo", client_info)):
            problem = declared_problem(f"initialize params.{name}", declared)
            if problem is not None:
                raise InvalidParams(problem)
        return self.negotiate(requested), client_info, capabilities

    def _initialize_result(self, version: str) -> dict[str, Any]:
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.capabilities(version),
            "serverInfo": self.catalog.server_info,
        }
        if self.catalog.instructions:
            result["instructions"] = self.catalog.instructions
        return result

    # -- requests in a session -------------------------------------------------------------

    def advertised(self, version: str) -> list[str]:
        """The methods a session of ``version`` can call (what its capabilities promise)."""
        capabilities = self.capabilities(version)
        served = [
            method for method in LEGACY_METHODS if method == "initialize" or self.serves(method)
        ]
        if "completions" not in capabilities:
            served = [method for method in served if method != "completion/complete"]
        if "tasks" in capabilities:
            served.extend(LEGACY_TASK_METHODS)
        return served

    def serves(self, method: str, version: str = "") -> bool:
        if method == "ping":
            return True
        if method in LEGACY_TASK_METHODS:
            return self.tasks is not None and self.tasks.available(version)
        if method == "logging/setLevel":
            return "logging" in self.catalog.snapshot.capabilities
        if method in ("resources/subscribe", "resources/unsubscribe"):
            resources = self.catalog.snapshot.capabilities.get("resources", {})
            return bool(resources.get("subscribe"))
        return self.dispatcher.serves(method)

    def context(
        self,
        session: Session,
        request: Request,
        exchange: LegacyExchange,
        *,
        caller: Caller | None = None,
        headers: Mapping[bytes, bytes] | None = None,
        record: Recorded | None = None,
        client_key: str | None = None,
    ) -> Context:
        meta = request.params.get("_meta")
        if not isinstance(meta, dict):
            meta = {}
        token = meta.get("progressToken")
        return Context(
            exchange=exchange,
            method=request.method,
            request_id=request.id,
            era="legacy",
            protocol_version=session.protocol_version,
            client_capabilities=session.client_capabilities,
            client_info=session.client_info,
            log_level=self.log_level(session, meta),
            progress_token=token if is_valid_id(token) else None,
            caller=caller,
            session_id=session.id,
            client_key=client_key,
            record=record,
            raw_headers=headers,
        )

    def log_level(self, session: Session, meta: Mapping[str, Any]) -> str | None:
        """The lowest level of log message a call sends; None: none.

        A level in the request's ``_meta`` wins, then the session's ``logging/setLevel``, then
        the default. A malformed ``_meta`` level is ignored, as a malformed progress token is:
        the key is not defined in this era, so it cannot make a call fail that worked before."""
        requested = meta.get(META_LOG_LEVEL)
        if isinstance(requested, str) and requested in LOG_LEVEL_RANK:
            return requested
        if session.log_level is not None:
            return session.log_level
        return self.default_log_level

    def resolve(self, request: Request, view: View | None = None) -> Target:
        """What the request names (its tool, prompt or resource), looked up once: the HTTP side
        checks its item's scopes with it and :meth:`handle` calls it. What ``view`` hides is not
        found."""
        return self.dispatcher.resolve(request.method, request.params, view)

    def start(self, call: LegacyCall, outbox: Outbox) -> Handling[dict[str, Any] | orjson.Fragment]:
        """``call`` started: answered already, or to be awaited within the handler timeout
        (:class:`~server.dispatch.Handling`). What it sends before its result goes to
        ``outbox``; the task it made or showed is left on ``call.task``."""
        request = call.request
        handling: Coroutine[Any, Any, dict[str, Any] | orjson.Fragment]
        if self.dispatcher.plain_tool(call.target, request.params):
            handling = self._call_plain(call)  # most tools: no Context to make
        else:
            handling = self._handle_in_context(call, outbox)
        return Handling(self.dispatcher, request.method, handling)

    async def _call_plain(self, call: LegacyCall) -> dict[str, Any]:
        """A ``tools/call`` with no Context (:meth:`~server.dispatch.Dispatcher.plain_tool`):
        such a tool sends nothing and asks nothing, as in the modern era."""
        return noted(await self.dispatcher.call_tool(call.request.params, None, call.target))

    async def _handle_in_context(
        self, call: LegacyCall, outbox: Outbox
    ) -> dict[str, Any] | orjson.Fragment:
        session = call.session
        exchange = LegacyExchange(
            call.runtime,
            outbox,
            self.client_request_timeout_s,
            resumable=session.protocol_version >= PRIMING_SINCE,
        )
        context = self.context(
            session,
            call.request,
            exchange,
            caller=call.caller,
            headers=call.headers,
            record=call.record,
            client_key=call.client_key,
        )
        try:
            return await self.handle(
                session, call.runtime, call.request, context, call.target, call.view
            )
        finally:
            context.finish()
            call.task = context.task_outcome

    async def handle(
        self,
        session: Session,
        runtime: SessionRuntime,
        request: Request,
        context: Context,
        target: Target,
        view: View | None = None,
    ) -> dict[str, Any] | orjson.Fragment:
        """The result of a request in a session; ``target`` is what :meth:`resolve` found,
        ``view`` what the caller may see."""
        method, params = request.method, request.params
        if not self.serves(method, session.protocol_version):
            raise MethodNotFound(method)
        # A tool hidden from the caller (not found) is not a task either.
        tasks = self.tasks
        if (
            tasks is not None
            and (method != TOOLS_CALL or target is not None)
            and tasks.routes(session, request)
        ):
            return await tasks.handle(session, request, context, runtime.standalone)
        own = self._own.get(method)
        if own is not None:
            return await own(session, runtime, method, params)
        if method in LIST_METHODS:
            return self.dispatcher.cached_page(method, params.get("cursor"), self._pages, view=view)
        return noted(await self.dispatcher.call(method, params, context, target))

    # -- the methods only this era serves (initialize aside: its transport opens a session) --

    async def _ping(
        self, session: Session, runtime: SessionRuntime, method: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        return {}

    async def _set_level(
        self, session: Session, runtime: SessionRuntime, method: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        level = params.get("level")
        if not isinstance(level, str) or level not in LOG_LEVEL_RANK:
            raise InvalidParams(
                f"Unknown log level {level!r}; use one of {', '.join(LOG_LEVEL_RANK)}"
            )
        session.log_level = level
        await self.store.save(session)
        return {}

    async def _subscribe(
        self, session: Session, runtime: SessionRuntime, method: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str) or ":" not in uri or len(uri) > MAX_URI_LENGTH:
            raise InvalidParams("params.uri must be a URI")
        # One URI stored and announced, never the whole set (the store caps it).
        subscribed = method == "resources/subscribe"
        if subscribed:
            changed = await self.store.subscribe(session.id, uri)
        else:
            changed = await self.store.unsubscribe(session.id, uri)
        runtime.subscriptions.apply(uri, subscribed)
        if changed and self.on_subscriptions is not None:
            self.on_subscriptions(session.id, uri, subscribed)
        return {}

    async def initialized(self, session: Session) -> None:
        session.initialized = True
        await self.store.save(session)

    # -- messages that are not requests -----------------------------------------------------

    @staticmethod
    def accept_response(runtime: SessionRuntime, response: Response) -> bool:
        """Hand a client's answer to the handler waiting for it; False if none waits."""
        future = runtime.pending.get(str(response.id))
        if future is None or future.done():
            return False
        if response.error is not None:
            future.set_result({"error": response.error})
        else:
            future.set_result({"result": response.result})
        return True

    @staticmethod
    def cancel(runtime: SessionRuntime, params: Mapping[str, Any]) -> bool:
        """``notifications/cancelled``: stop the named call; malformed or unknown is ignored."""
        request_id = params.get("requestId")
        if not isinstance(request_id, (str, int)) or not is_valid_id(request_id):
            return False
        task = runtime.inflight.get(request_id)
        if task is None or task.done():
            return False
        reason = params.get("reason")
        # The reason is the client's: the log line gets a short piece of it (server.logs
        # escapes what it keeps).
        said = f": {str(reason)[:200]}" if reason else ""
        log.info("client cancelled request %r%s", request_id, said)
        task.cancel()
        return True
