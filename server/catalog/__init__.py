"""The declaration API: what a server offers, and the change events it emits.

A server author builds a :class:`Catalog` and declares tools, resources, resource templates,
prompts and completion callbacks with decorators. The catalog keeps them in declaration order
(lists are deterministic), rebuilds the list snapshots and the capabilities once per change
(never per request), and tells its listeners about list changes and resource updates so the
eras can deliver ``list_changed`` / ``resources/updated`` notifications.

Capabilities are derived, never written by hand: a capability appears only when something
that serves it is declared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from server.catalog.completion import Completer
from server.catalog.content import Icon
from server.catalog.declaring import attach_completer, require_uri
from server.catalog.lifespan import CatalogLifespan, LifespanFunction
from server.catalog.prompts import Prompt
from server.catalog.resources import Resource, ResourceTemplate
from server.catalog.tools import Tool
from server.catalog.uritemplate import MAX_TEMPLATED_URI_CHARS

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
        self._listeners: list[Listener] = []
        self.lifespan = CatalogLifespan(self, lifespan)  # around serving, in every way of it
        self._version = 0
        self.snapshot = self._build_snapshot()

    # -- declaring -------------------------------------------------------------------------

    @overload
    def tool(self, func: F) -> F: ...

    @overload
    def tool(
        self,
        func: None = None,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        structured_output: bool | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        scopes: Sequence[str] = (),
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        func: F | None = None,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        structured_output: bool | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        scopes: Sequence[str] = (),
    ) -> Any:
        """Declare a tool: ``@catalog.tool`` or ``@catalog.tool(name=..., annotations=...)``.

        ``scopes``: OAuth scopes a caller must hold to call it (403 ``insufficient_scope``
        otherwise), on top of the endpoint's required scopes.
        """

        def register(handler: F) -> F:
            self.add_tool(
                Tool.from_function(
                    handler,
                    name=name,
                    title=title,
                    description=description,
                    input_schema=input_schema,
                    output_schema=output_schema,
                    structured_output=structured_output,
                    annotations=annotations,
                    icons=icons,
                    meta=meta,
                    scopes=scopes,
                )
            )
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
    def prompt(self, func: F) -> F: ...

    @overload
    def prompt(
        self,
        func: None = None,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]: ...

    def prompt(
        self,
        func: F | None = None,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Any:
        """Declare a prompt; its string parameters are the prompt's arguments."""

        def register(handler: F) -> F:
            prompt = Prompt(
                handler, name=name, title=title, description=description, icons=icons, meta=meta
            )
            self.add_prompt(prompt)
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

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        size: int | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        ttl_ms: int | None = None,
    ) -> Callable[[F], F]:
        """Declare a resource at a fixed URI; the function returns its contents."""
        require_uri("resource", uri, "file:///notes.txt")

        def register(handler: F) -> F:
            self.add_resource(
                Resource(
                    uri,
                    handler,
                    name=name,
                    title=title,
                    description=description,
                    mime_type=mime_type,
                    size=size,
                    annotations=annotations,
                    icons=icons,
                    meta=meta,
                    ttl_ms=ttl_ms,
                )
            )
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
        self,
        uri_template: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        ttl_ms: int | None = None,
    ) -> Callable[[F], F]:
        """Declare a resource template (RFC 6570); its variables are the function's parameters."""
        require_uri("resource_template", uri_template, "notes://{name}")

        def register(handler: F) -> F:
            template = ResourceTemplate(
                uri_template,
                handler,
                name=name,
                title=title,
                description=description,
                mime_type=mime_type,
                annotations=annotations,
                icons=icons,
                meta=meta,
                ttl_ms=ttl_ms,
            )
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

        The callback gets ``(value, context_arguments)`` and returns a list of strings or a
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

    # -- finding ---------------------------------------------------------------------------

    def find_resource(self, uri: str) -> tuple[Resource | ResourceTemplate, dict[str, str]] | None:
        """The resource serving ``uri``: an exact resource first, then templates in order
        (for a URI of at most ``MAX_TEMPLATED_URI_CHARS``)."""
        exact = self.resources.get(uri)
        if exact is not None:
            return exact, {}
        if len(uri) > MAX_TEMPLATED_URI_CHARS:
            return None
        for template in self.templates.values():
            variables = template.match(uri)
            if variables is not None:
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
        return capabilities
