"""The declaration API: what a server offers, and the change events it emits.

A server author builds a :class:`Catalog` and declares tools, resources, templates, prompts
and completions with decorators. It keeps them in declaration order, rebuilds list snapshots
and capabilities once per change (never per request), and tells its listeners of list changes
and resource updates. Capabilities are derived, never written by hand: one appears only when
something that serves it is declared (skills and task-capable tools declare their
extensions). Each kind's keywords are a ``TypedDict`` beside the kind (``ToolOptions``), taken
with ``Unpack``, so editors see every keyword with its type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Unpack, overload

from server.catalog.completion import Completer
from server.catalog.content import Icon
from server.catalog.declaring import attach_completer, require_uri
from server.catalog.extensions import (
    RESERVED_METHODS,
    SKILLS_EXTENSION,
    TASKS_EXTENSION,
    Extension,
    ExtensionHandler,
    extension_methods,
)
from server.catalog.lifespan import CatalogLifespan, LifespanFunction
from server.catalog.prompts import Prompt, PromptOptions
from server.catalog.resources import (
    Resource,
    ResourceOptions,
    ResourceTemplate,
    TemplateOptions,
)
from server.catalog.skills import SkillSet, load_skills, skill_resource
from server.catalog.tools import Tool, ToolOptions
from server.catalog.uritemplate import MAX_TEMPLATED_URI_CHARS
from server.catalog.visibility import VisibilityRule

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
ChangeKind = Literal["tools", "prompts", "resources", "resource_updated"]


@dataclass(frozen=True, slots=True)
class Change:
    """A list change (``uri`` None) or an update of one resource."""

    kind: ChangeKind
    uri: str | None = None


Listener = Callable[[Change], None]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything list methods and capabilities need, rebuilt once per catalog change."""

    version: int
    tools: tuple[dict[str, Any], ...]
    prompts: tuple[dict[str, Any], ...]
    resources: tuple[dict[str, Any], ...]
    templates: tuple[dict[str, Any], ...]
    capabilities: dict[str, Any]
    # Each method a declared extension adds, with its extension.
    extension_methods: dict[str, Extension]


class Catalog:
    """Tools, resources, templates and prompts a server offers."""

    def __init__(
        self,
        name: str = "mcp-http-server",
        version: str = "0.1.0",
        *,
        title: str | None = None,
        description: str | None = None,
        instructions: str | None = None,
        website_url: str | None = None,
        icons: Sequence[Icon] | None = None,
        lifespan: LifespanFunction | None = None,
    ) -> None:
        info: dict[str, Any] = {"name": name, "version": version}
        if title:
            info["title"] = title
        if description:
            info["description"] = description
        if website_url:
            info["websiteUrl"] = website_url
        if icons:
            info["icons"] = [icon.to_wire() for icon in icons]
        self.server_info = info
        self.instructions = instructions
        self.tools: dict[str, Tool] = {}
        self.prompts: dict[str, Prompt] = {}
        self.resources: dict[str, Resource] = {}
        self.templates: dict[str, ResourceTemplate] = {}
        self.extensions: dict[str, Extension] = {}
        self.skills = SkillSet()
        self.visibility_rule: VisibilityRule | None = None
        self._listeners: list[Listener] = []
        self.lifespan = CatalogLifespan(self, lifespan)  # around serving, in every way of it
        self._version = 0
        self.snapshot = self._build_snapshot()

    # -- declaring -------------------------------------------------------------------------

    # The function itself, alone or with keywords (``catalog.tool(fn, name="x")``), or only
    # keywords, as a decorator (``@catalog.tool(name="x")``).
    @overload
    def tool(self, func: F, **options: Unpack[ToolOptions]) -> F: ...

    @overload
    def tool(self, func: None = None, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...

    def tool(self, func: F | None = None, **options: Unpack[ToolOptions]) -> Any:
        """Declare a tool: ``@catalog.tool`` or ``@catalog.tool(name=..., annotations=...)``.

        ``scopes``: OAuth scopes a caller must hold to call it (403 ``insufficient_scope``
        otherwise), on top of the endpoint's required scopes. ``visibility``: ``"hidden"`` or
        ``"listed"``, else ``MCP_SCOPED_ITEMS`` decides (docs/security.md#scoped-items).

        ``task_support``: ``"optional"`` or ``"required"`` lets a call run as a task (the
        client polls for its result instead of holding the request open): for a client that
        declared the tasks extension (2026-07-28) or asked for a task (2025-11-25), the call
        answers at once with a task handle and the handler runs on. ``"required"`` refuses
        other clients (-32021). ``defer_task``: the task starts when the handler calls
        ``await ctx.start_task()``, so questions it asks first are answered in the request
        (input-required rounds) rather than by the task.

        ``blocking``: a sync (``def``) handler runs in a worker thread (at most
        ``MCP_TOOL_THREADS`` of them; more calls wait their turn), so one that blocks (I/O, a
        sleep, long CPU work) cannot stall the server. ``blocking=False`` is the author's
        promise that it never does: it then runs on the event loop, which is cheaper than
        the hop to a thread, and anything slow in it delays every other request. An
        ``async def`` handler always runs on the loop.
        """

        def register(handler: F) -> F:
            self.add_tool(Tool.from_function(handler, **options))
            return handler

        return register(func) if func is not None else register

    def add_tool(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"a tool named {tool.name!r} is already declared")
        self.tools[tool.name] = tool
        self._changed("tools")

    def remove_tool(self, name: str) -> bool:
        if self.tools.pop(name, None) is None:
            return False
        self._changed("tools")
        return True

    @overload
    def prompt(self, func: F, **options: Unpack[PromptOptions]) -> F: ...

    @overload
    def prompt(self, func: None = None, **options: Unpack[PromptOptions]) -> Callable[[F], F]: ...

    def prompt(self, func: F | None = None, **options: Unpack[PromptOptions]) -> Any:
        """Declare a prompt (its string parameters are its arguments); ``blocking``, ``scopes``
        (needed to get or complete it) and ``visibility`` as for :meth:`tool`."""

        def register(handler: F) -> F:
            self.add_prompt(Prompt(handler, **options))
            return handler

        return register(func) if func is not None else register

    def add_prompt(self, prompt: Prompt) -> None:
        if prompt.name in self.prompts:
            raise ValueError(f"a prompt named {prompt.name!r} is already declared")
        self.prompts[prompt.name] = prompt
        self._changed("prompts")

    def remove_prompt(self, name: str) -> bool:
        if self.prompts.pop(name, None) is None:
            return False
        self._changed("prompts")
        return True

    def resource(self, uri: str, **options: Unpack[ResourceOptions]) -> Callable[[F], F]:
        """Declare a resource at a fixed URI; the function returns its contents. ``blocking``,
        ``scopes`` (needed to read it) and ``visibility`` as for :meth:`tool`."""
        require_uri("resource", uri, "file:///notes.txt")

        def register(handler: F) -> F:
            self.add_resource(Resource(uri, handler, **options))
            return handler

        return register

    def add_resource(self, resource: Resource) -> None:
        if resource.uri in self.resources:
            raise ValueError(f"a resource at {resource.uri!r} is already declared")
        self.resources[resource.uri] = resource
        self._changed("resources")

    def remove_resource(self, uri: str) -> bool:
        if self.resources.pop(uri, None) is None:
            return False
        self._changed("resources")
        return True

    def resource_template(
        self, uri_template: str, **options: Unpack[TemplateOptions]
    ) -> Callable[[F], F]:
        """Declare a resource template (RFC 6570; its variables are the function's parameters);
        ``blocking``, ``scopes`` (to read or complete it) and ``visibility`` as for :meth:`tool`."""
        require_uri("resource_template", uri_template, "notes://{name}")

        def register(handler: F) -> F:
            template = ResourceTemplate(uri_template, handler, **options)
            if uri_template in self.templates:
                raise ValueError(f"a template {uri_template!r} is already declared")
            self.templates[uri_template] = template
            self._changed("resources")
            return handler

        return register

    def completion(
        self, *, argument: str, prompt: str | None = None, template: str | None = None
    ) -> Callable[[Completer], Completer]:
        """Declare the completion callback of one prompt argument or template variable.

        The callback gets ``(value, arguments)`` and returns a list of strings or a
        :class:`~server.catalog.content.Completion`; it may be async.
        """
        if (prompt is None) == (template is None):
            raise ValueError("completion() needs exactly one of prompt= or template=")

        def register(completer: Completer) -> Completer:
            attach_completer(
                self.prompts,
                self.templates,
                argument=argument,
                prompt=prompt,
                template=template,
                completer=completer,
            )
            self._rebuild()
            return completer

        return register

    def extension(
        self,
        identifier: str,
        settings: Mapping[str, Any] | None = None,
        *,
        methods: Mapping[str, ExtensionHandler] | None = None,
        cacheable: Sequence[str] = (),
    ) -> None:
        """Declare an extension: advertised under ``capabilities.extensions`` (2026-07-28) with
        ``settings``; ``methods`` are served while it is declared (``-32601`` otherwise)."""
        self.add_extension(
            Extension(identifier, dict(settings or {}), dict(methods or {}), frozenset(cacheable))
        )

    def add_extension(self, extension: Extension) -> None:
        if extension.identifier in self.extensions or extension.identifier == TASKS_EXTENSION:
            raise ValueError(f"the extension {extension.identifier!r} is already declared")
        taken = set(extension_methods(self.extensions)) | RESERVED_METHODS
        clash = sorted(taken & set(extension.methods))
        if clash:
            raise ValueError(f"{extension.identifier}: methods already served: {clash}")
        self.extensions[extension.identifier] = extension
        self._rebuild()  # what discover advertises; no list changed

    def remove_extension(self, identifier: str) -> bool:
        if self.extensions.pop(identifier, None) is None:
            return False
        self._rebuild()
        return True

    def add_skills(self, folder: str | Path, *, directory_read: bool = True) -> None:
        """Serve every skill in ``folder`` (SEP-2640): each file a ``skill://`` resource, and the
        skills extension with ``skills/list``, ``skills/get`` and (``directory_read``)
        ``resources/directory/read``. Invalid skills raise :class:`SkillError` naming the file."""
        loaded = load_skills(folder)
        merged = self.skills.merge(loaded)
        taken = [uri for uri in loaded.files if uri in self.resources]
        if taken:
            raise ValueError(f"resources already declared at {', '.join(taken[:5])}")
        for uri in loaded.files:
            self.resources[uri] = skill_resource(loaded, uri)
        self.skills = merged
        self.extensions[SKILLS_EXTENSION] = merged.extension(directory_read=directory_read)
        self._changed("resources")

    def set_visibility_rule(self, rule: VisibilityRule | None) -> VisibilityRule | None:
        """Who sees each hidden item besides its scopes: ``rule(caller, item) -> bool``, a pure
        function of both (asked once per caller per catalog version). Usable as a decorator."""
        self.visibility_rule = rule
        self.visibility_changed()
        return rule

    def visibility_changed(self) -> None:
        """What the rule reads has changed: views are made again and every list announced."""
        self._rebuild()
        for kind in ("tools", "prompts", "resources"):
            self._emit(Change(kind))

    # -- finding ---------------------------------------------------------------------------

    def find_resource(
        self, uri: str, hidden: Callable[[object], bool] | None = None
    ) -> tuple[Resource | ResourceTemplate, dict[str, str]] | None:
        """The resource serving ``uri``: an exact resource first, then templates in order
        (for a URI of at most ``MAX_TEMPLATED_URI_CHARS``), skipping what ``hidden`` says."""
        exact = self.resources.get(uri)
        if exact is not None and (hidden is None or not hidden(exact)):
            return exact, {}
        if len(uri) > MAX_TEMPLATED_URI_CHARS:
            return None
        for template in self.templates.values():
            variables = template.match(uri)
            if variables is not None and (hidden is None or not hidden(template)):
                return template, variables
        return None

    # -- change events ---------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every change; returns the function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def notify_resource_updated(self, uri: str) -> None:
        """Tell subscribed clients that the resource at ``uri`` (or below it) changed."""
        self._emit(Change("resource_updated", uri))

    def _changed(self, kind: ChangeKind) -> None:
        self._rebuild()
        self._emit(Change(kind))

    def _emit(self, change: Change) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("catalog listener failed on %s", change)

    def _rebuild(self) -> None:
        self._version += 1
        self.snapshot = self._build_snapshot()

    def _build_snapshot(self) -> Snapshot:
        return Snapshot(
            version=self._version,
            tools=tuple(tool.definition for tool in self.tools.values()),
            prompts=tuple(prompt.definition for prompt in self.prompts.values()),
            resources=tuple(resource.definition for resource in self.resources.values()),
            templates=tuple(template.definition for template in self.templates.values()),
            capabilities=self._derive_capabilities(),
            extension_methods=extension_methods(self.extensions),
        )

    def _derive_capabilities(self) -> dict[str, Any]:
        capabilities: dict[str, Any] = {}
        # listChanged is honest for every list: any runtime add/remove emits the notification.
        if self.tools:
            capabilities["tools"] = {"listChanged": True}
        if self.prompts:
            capabilities["prompts"] = {"listChanged": True}
        if self.resources or self.templates:
            capabilities["resources"] = {"subscribe": True, "listChanged": True}
        if self.tools or self.prompts or self.resources or self.templates:
            # Handlers can always log through their Context, so logging is really served.
            capabilities["logging"] = {}
        completable = any(p.completers for p in self.prompts.values()) or any(
            t.completers for t in self.templates.values()
        )
        if completable:
            capabilities["completions"] = {}
        extensions = {
            identifier: dict(extension.settings)
            for identifier, extension in self.extensions.items()
        }
        if self.task_tools():
            extensions[TASKS_EXTENSION] = {}
        if extensions:
            capabilities["extensions"] = extensions
        return capabilities

    def task_tools(self) -> list[Tool]:
        """The tools a call may run as a task."""
        return [tool for tool in self.tools.values() if tool.task_support != "forbidden"]
