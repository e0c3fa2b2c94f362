"""The 2026-07-28 era's extension methods: what a declared extension adds, and tasks.

:class:`ModernExtensions` is what :class:`~server.modern.era.ModernEra` asks about any method it
does not serve itself: the methods of the catalog's declared extensions (skills: ``skills/list``,
``skills/get``, ``resources/directory/read``) and, when the tasks extension is advertised, the
tasks surface (:class:`~server.modern.tasks.ModernTasks`: ``tasks/get|update|cancel`` and
``tools/call`` of a tool that can run as a task). A method is served exactly while its extension
is declared; otherwise the era answers -32601 (404) as for any unknown method.

Results get the era's envelope; the methods an extension marks cacheable also carry ``ttlMs``
and ``cacheScope``, as the base list methods do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.catalog import Catalog
from server.catalog.extensions import TASKS_EXTENSION, Paginate
from server.context import Context
from server.errors import MethodNotFound
from server.modern.tasks import TASK_METHODS, ModernTasks, TaskCall
from server.protocol import TOOLS_CALL

Envelope = Callable[[str, dict[str, Any]], dict[str, Any]]


class ModernExtensions:
    def __init__(
        self,
        catalog: Catalog,
        paginate: Paginate,
        envelope: Envelope,
        *,
        ttl_ms: int,
        cache_scope: str,
        tasks: ModernTasks | None = None,
    ) -> None:
        self.catalog = catalog
        self.paginate = paginate
        self.envelope = envelope
        self.ttl_ms = ttl_ms
        self.cache_scope = cache_scope
        self.tasks = tasks

    def tasks_advertised(self) -> bool:
        return self.tasks is not None and TASKS_EXTENSION in self.catalog.snapshot.capabilities.get(
            "extensions", {}
        )

    def methods(self) -> list[str]:
        """The extension methods a client can call right now."""
        found = list(self.catalog.snapshot.extension_methods)
        if self.tasks_advertised():
            found.extend(TASK_METHODS)
        return found

    def serves(self, method: str) -> bool:
        return method in self.catalog.snapshot.extension_methods or (
            method in TASK_METHODS and self.tasks_advertised()
        )

    def handles(self, call: TaskCall) -> bool:
        """Whether this answers ``call`` rather than the era's dispatcher."""
        method = call.request.method
        if method in self.catalog.snapshot.extension_methods:
            return True
        if self.tasks is None:
            return False
        if method == TOOLS_CALL:
            # Asked on every call: a tool that never runs as a task (most) rules it out here.
            if getattr(call.target, "task_support", "forbidden") == "forbidden":
                return False
            return self.tasks.routes(call) and self.tasks_advertised()
        return method in TASK_METHODS and self.tasks_advertised()

    async def handle(self, call: TaskCall, context: Context) -> dict[str, Any]:
        """The result of ``call`` (a :class:`~server.modern.era.ModernCall` that
        :meth:`handles`)."""
        method = call.request.method
        extension = self.catalog.snapshot.extension_methods.get(method)
        if extension is None:
            if self.tasks is None:
                raise MethodNotFound(method)
            return await self.tasks.handle(call, context)
        try:
            result = await extension.methods[method](call.request.params, context, self.paginate)
        finally:
            context.finish()
        result = self.envelope(method, result)
        if method in extension.cacheable:
            result["ttlMs"] = self.ttl_ms
            result["cacheScope"] = self.cache_scope
        return result
