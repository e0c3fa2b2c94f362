"""The methods both eras share, and which of them the catalog really serves.

``Dispatcher.call`` routes ``tools/*``, ``resources/*``, ``prompts/*`` and
``completion/complete`` to the catalog and returns era-neutral results; each era adds its
envelope. A method is routed exactly when it is advertised (:meth:`Dispatcher.serves`, from
the catalog's derived capabilities); what a call names is looked up once
(:meth:`Dispatcher.resolve`). Both eras run a call as a :class:`Handling`, started eagerly,
with a handler timer only for a call that waits, and no :class:`~server.context.Context` for a
plain tool (:meth:`Dispatcher.plain_tool`). Waiting handlers are known until they end, so the
drain can stop them (:meth:`Dispatcher.stop_waiting`). What a caller's
:class:`~server.catalog.visibility.View` hides is absent: left out of its list pages (kept
encoded per view) and resolved as a name never declared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import Any, TypeVar

import orjson

from server.aio import Started, coarse_timers, running_loop
from server.call_note import CALL_NOTE, ERROR, MAX_TARGET_CHARS, note_outcome, note_target, noted
from server.catalog import Catalog
from server.catalog.completion import run_completer
from server.catalog.prompts import Prompt
from server.catalog.resources import Resource, ResourceTemplate
from server.catalog.tools import Tool, error_result
from server.catalog.visibility import View, Views
from server.context import Context
from server.errors import InternalError, InvalidParams, ResourceNotFound, ServiceUnavailable
from server.hub import Durable
from server.jsonrpc import optional_object, require_str
from server.pagination import EncodedResults, Pager
from server.protocol import METHOD_CAPABILITY, TOOLS_CALL

# What a call names, looked up once (Dispatcher.resolve): a tool, a prompt, or the resource a
# URI finds with the template's variables; None for a name the catalog does not hold (the
# handler says which error) or a method that names nothing.
Target = Tool | Prompt | tuple[Resource | ResourceTemplate, dict[str, str]] | None
Handler = Callable[[Mapping[str, Any], Context, Target], Coroutine[Any, Any, dict[str, Any]]]
Envelope = Callable[[str, dict[str, Any]], dict[str, Any]]
R = TypeVar("R")

NO_SCOPES: tuple[str, ...] = ()


def target_scopes(target: Target) -> tuple[str, ...]:
    """The scopes a caller must hold to use what a request names (its item's ``scopes``)."""
    if target is None:
        return NO_SCOPES
    item = target[0] if isinstance(target, tuple) else target
    return item.scopes


def target_name(target: Target) -> str | None:
    """What a request names, as its record's ``target`` says (a refusal's record too)."""
    if isinstance(target, tuple):
        item = target[0]
        return item.template.template if isinstance(item, ResourceTemplate) else item.uri
    return None if target is None else target.name


LIST_METHODS: dict[str, tuple[str, str]] = {
    # method -> (snapshot field, result key)
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("templates", "resourceTemplates"),
}


class Dispatcher:
    def __init__(
        self,
        catalog: Catalog,
        pager: Pager,
        *,
        handler_timeout_s: float = 0,
        views: Views | None = None,
        durable: Durable | None = None,
    ) -> None:
        self.catalog = catalog
        self.pager = pager
        self.views = Views(catalog) if views is None else views
        self.handler_timeout_s = handler_timeout_s
        self.durable = durable  # where changes are shared (Redis), if anywhere
        # The tasks whose handler is waiting, with why the server stopped it (None: running).
        self._waiting: dict[asyncio.Task[Any], str | None] = {}
        self._handlers: dict[str, Handler] = {
            TOOLS_CALL: self.call_tool,
            "prompts/get": self.get_prompt,
            "resources/read": self.read_resource,
            "completion/complete": self.complete,
        }

    def serves(self, method: str) -> bool:
        capability = METHOD_CAPABILITY.get(method)
        return capability is not None and capability in self.catalog.snapshot.capabilities

    def resolve(self, method: str, params: Mapping[str, Any], view: View | None = None) -> Target:
        """What a ``tools/call``, ``prompts/get``, ``resources/read`` (or ``subscribe``) or
        ``completion/complete`` names, looked up once so the era's checks (header params,
        scopes) and the handler share it; what ``view`` hides is not found. Never raises: a
        missing or unknown name is the handler's error to report, in its order."""
        found: Target
        if method == TOOLS_CALL:  # the hottest: first, as before views
            name = params.get("name")
            found = self.catalog.tools.get(name) if isinstance(name, str) else None
        elif method == "prompts/get":
            name = params.get("name")
            found = self.catalog.prompts.get(name) if isinstance(name, str) else None
        elif method in ("resources/read", "resources/subscribe"):
            uri = params.get("uri")
            hidden = None if view is None else view.hides
            return self.catalog.find_resource(uri, hidden) if isinstance(uri, str) and uri else None
        elif method == "completion/complete":
            found = self._completed(params.get("ref"))
        else:
            return None
        if view is None or found is None:
            return found
        return None if view.hides(found[0] if isinstance(found, tuple) else found) else found

    def _completed(self, ref: Any) -> Target:
        """The prompt or template a completion's ``ref`` names, if declared."""
        if not isinstance(ref, dict):
            return None
        if ref.get("type") == "ref/prompt" and isinstance(name := ref.get("name"), str):
            return self.catalog.prompts.get(name)
        if ref.get("type") == "ref/resource" and isinstance(uri := ref.get("uri"), str):
            template = self.catalog.templates.get(uri)
            return None if template is None else (template, {})
        return None

    def call(
        self, method: str, params: Mapping[str, Any], context: Context, target: Target
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """The handler's coroutine for a method the era found served (not asked again here),
        with what :meth:`resolve` found for it."""
        if method in LIST_METHODS:
            return self._list_page(method, params.get("cursor"))
        return self._handlers[method](params, context, target)

    async def _list_page(self, method: str, cursor: Any) -> dict[str, Any]:
        return self.list_page(method, cursor)

    def plain_tool(self, target: Target, params: Mapping[str, Any]) -> bool:
        """Whether a ``tools/call`` runs with no :class:`~server.context.Context` made for it,
        in either era: its tool takes none (so it sends nothing and asks nothing), may not run
        as a task, and the call is no later round of an input-required exchange. Most tools
        are such (docs/decisions.md#one-way-to-run-a-call)."""
        return (
            type(target) is Tool
            and target.plain
            and "task" not in params
            and "requestState" not in params
            and "inputResponses" not in params
        )

    def _finish(
        self, method: str, rest: Generator[Any, Any, R], envelope: Envelope | None
    ) -> Generator[Any, Any, R | dict[str, Any]]:
        """The rest of a :class:`Handling` that waits (``rest``), within the handler timeout,
        known to :meth:`stop_waiting` meanwhile (see :class:`Handling`)."""
        task = asyncio.current_task(running_loop())
        assert task is not None
        self._waiting[task] = None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        # A coarse timer rather than asyncio.timeout(): the same cancellation at a fraction of
        # the cost (a dict entry, see server.aio), and this runs on every call that waits.
        timers = coarse_timers()
        timer = (
            timers.call_later(self.handler_timeout_s, expire) if self.handler_timeout_s else None
        )
        try:
            return (yield from rest)
        except asyncio.CancelledError:
            stopped = self._waiting.get(task)
            if stopped is not None:
                task.uncancel()
                raise ServiceUnavailable(stopped) from None
            if not expired:
                raise
            task.uncancel()
            # Named, and the setting too: the author reading this wants the tool and the knob.
            note = CALL_NOTE.get()
            what = f"{method} {note.target}" if note is not None and note.target else method
            message = (
                f"{what} took longer than {self.handler_timeout_s:g} s and was stopped "
                "(the server's time limit per call, MCP_HANDLER_TIMEOUT_S)"
            )
            if method == TOOLS_CALL:
                result = noted(error_result(message))
                return result if envelope is None else envelope(method, result)
            note_outcome(ERROR)  # a time limit, not a crash
            raise InternalError(message) from None
        finally:
            self._waiting.pop(task, None)
            if timer is not None:
                timers.cancel(timer)

    def stop_waiting(self, reason: str) -> int:
        """Stop every handler that is waiting (in either era): each of those calls ends with
        :class:`~server.errors.ServiceUnavailable` (-32000, 503 unless its response already
        streams) saying ``reason``, an error the client may retry, here later or elsewhere.
        Returns how many were stopped."""
        stopped = 0
        for task, already in self._waiting.items():
            if already is None and not task.done():
                self._waiting[task] = reason
                task.cancel()
                stopped += 1
        return stopped

    @staticmethod
    def _kind(method: str, view: View | None) -> str:
        """What a list's cursors name: the list, and the view's tag when it is private."""
        field = LIST_METHODS[method][0]
        return field if view is None or not view.depends(field) else f"{field}~{view.tag(field)}"

    def page_offset(self, method: str, cursor: Any, view: View | None = None) -> int:
        """Where the page a cursor names starts (-32602 for a cursor this list never issued,
        or issued to a caller with another view)."""
        return self.pager.offset(self._kind(method, view), cursor)

    def list_page(self, method: str, cursor: Any, view: View | None = None) -> dict[str, Any]:
        return self.list_page_at(method, self.page_offset(method, cursor, view), view)

    def list_page_at(self, method: str, offset: int, view: View | None = None) -> dict[str, Any]:
        field, key = LIST_METHODS[method]
        items = getattr(self.catalog.snapshot, field)
        if view is not None:
            items = view.items(field, items)
        page, next_cursor = self.pager.page_at(self._kind(method, view), items, offset)
        result: dict[str, Any] = {key: list(page)}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    def cached_page(
        self,
        method: str,
        cursor: Any,
        cache: EncodedResults,
        envelope: Envelope | None = None,
        view: View | None = None,
    ) -> orjson.Fragment:
        """A list page from ``cache``, encoded in the era's ``envelope`` (none: the page as
        it is) when first asked for; -32602 for a cursor this list never issued. A private
        list's pages are kept per view: callers who see the same items share them."""
        key: tuple[Any, ...]
        if view is None:  # the default, as before views (the fast path of every list)
            key = (method, self.pager.offset(LIST_METHODS[method][0], cursor))
        else:
            field = LIST_METHODS[method][0]
            offset = self.page_offset(method, cursor, view)
            key = (method, offset, view.keys[field]) if view.depends(field) else (method, offset)
        found = cache.get(key)
        if found is None:
            page = self.list_page_at(method, key[1], view)
            found = cache.put(key, page if envelope is None else envelope(method, page))
        return found

    def call_tool(
        self, params: Mapping[str, Any], context: Context | None, tool: Target
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        # Not a coroutine function: the tool's own call is the coroutine (the hottest method
        # here, one coroutine fewer); a bad name raises from here, where ``call`` starts it.
        if not isinstance(tool, Tool):
            name = require_str(params, "name")
            note_target(name)
            raise InvalidParams(f"Unknown tool: {name}")
        # note_target and optional_object written out: the hottest method, two calls fewer.
        note = CALL_NOTE.get()
        if note is not None:
            note.target = tool.name[:MAX_TARGET_CHARS]
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParams("params.arguments must be an object")
        call = tool.call(arguments, context)
        # With replicas, what it changed is shared before it answers (docs/decisions.md#change-log).
        return call if self.durable is None else self.durable.shared(call)

    async def get_prompt(
        self, params: Mapping[str, Any], context: Context, prompt: Target
    ) -> dict[str, Any]:
        if not isinstance(prompt, Prompt):
            name = require_str(params, "name")
            note_target(name)
            raise InvalidParams(f"Unknown prompt: {name}")
        note_target(prompt.name)
        arguments = optional_object(params, "arguments")
        if not all(isinstance(value, str) for value in arguments.values()):
            raise InvalidParams("prompt arguments must be strings")
        return await prompt.get(arguments, context)

    async def read_resource(
        self, params: Mapping[str, Any], context: Context, found: Target
    ) -> dict[str, Any]:
        uri = require_str(params, "uri")
        if not isinstance(found, tuple):
            raise ResourceNotFound(uri)
        resource, variables = found
        note_target(target_name(found) or uri)
        if isinstance(resource, ResourceTemplate):
            contents = await resource.read(uri, variables, context)
        else:
            contents = await resource.read(context)
        if not contents:
            # An empty contents array is forbidden; a resource that produced nothing is absent.
            raise ResourceNotFound(uri)
        return {"contents": contents}

    async def complete(
        self, params: Mapping[str, Any], context: Context, target: Target = None
    ) -> dict[str, Any]:
        ref = optional_object(params, "ref")
        argument = optional_object(params, "argument")
        name, value = argument.get("name"), argument.get("value")
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParams("params.argument needs string name and value")
        supplied = optional_object(optional_object(params, "context"), "arguments")
        kind = ref.get("type")
        # What resolve found; while items may be hidden the era always resolves (with the
        # caller's view), so nothing found is nothing this caller may complete.
        found = target if target is not None or self.views.hiding else self._completed(ref)
        if kind == "ref/prompt":
            require_str(ref, "name")
            if not isinstance(prompt := found, Prompt):
                raise InvalidParams(f"Unknown prompt: {ref.get('name')}")
            if name not in prompt.parameters.names:
                raise InvalidParams(f"Prompt {prompt.name} has no argument {name!r}")
            completer = prompt.completers.get(name)
        elif kind == "ref/resource":
            uri = require_str(ref, "uri")
            template = found[0] if isinstance(found, tuple) else None
            if not isinstance(template, ResourceTemplate):
                raise InvalidParams(f"Unknown resource template: {uri}")
            if name not in template.template.variables:
                raise InvalidParams(f"Template {uri} has no variable {name!r}")
            completer = template.completers.get(name)
        else:
            raise InvalidParams('params.ref.type must be "ref/prompt" or "ref/resource"')
        if completer is None:
            return {"completion": {"values": []}}
        completion = await run_completer(completer, value, supplied)
        return {"completion": completion.to_wire()}


class Handling(Started[R]):
    """How both eras run a call: its handler's coroutine started eagerly, in the caller's task.

    ``done`` tells that it answered without waiting (``result`` holds the answer, and nothing
    more was paid: no timer, no watch). Otherwise awaiting it runs the rest within
    ``MCP_HANDLER_TIMEOUT_S``: past it the call is cancelled, and a tool fails with a result
    the model can read (in the era's ``envelope``), any other method with -32603. While it
    waits the dispatcher knows it, so the drain deadline can stop it
    (:meth:`Dispatcher.stop_waiting`). The era makes it (``start``); the HTTP side only looks at
    ``done`` and, for a call that waits, arms what watches the client around the ``await``.
    """

    __slots__ = ("_dispatcher", "_envelope", "_method")

    def __init__(
        self,
        dispatcher: Dispatcher,
        method: str,
        coroutine: Coroutine[Any, Any, R],
        envelope: Envelope | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._method = method
        self._envelope = envelope
        # Started.__init__ written out (every request makes one: a call fewer each).
        self._coroutine = coroutine
        self.done = False
        try:
            self._pending = coroutine.send(None)
        except StopIteration as finished:
            self.done = True
            self.result = finished.value

    def __await__(self) -> Generator[Any, Any, R]:
        if self.done:
            return self.result
        rest = Started.__await__(self)
        # An R, or a tool's timeout result in the era's envelope (a dict, as a tool's R is).
        return (yield from self._dispatcher._finish(self._method, rest, self._envelope))  # type: ignore[return-value]
