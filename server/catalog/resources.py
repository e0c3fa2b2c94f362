"""Declared resources and resource templates, and how ``resources/read`` renders them.

A resource is a fixed URI; a template is an RFC 6570 pattern whose variables become the handler's
parameters (validated and converted by their type hints). A handler returns text (``str``), bytes,
or :class:`~server.catalog.content.TextContents` / ``BlobContents`` (one or a list); the declared
MIME type is applied to the simple forms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict

from server.catalog.completion import Completer
from server.catalog.content import BlobContents, Icon, TextContents
from server.catalog.offload import Invoke, invoker
from server.catalog.signatures import ArgumentsInvalid, description_from_doc, read_parameters
from server.catalog.uritemplate import UriTemplate
from server.catalog.visibility import Visibility, check_visibility
from server.context import Context
from server.errors import ResourceNotFound

CacheScope = Literal["public", "private"]


def _cache_hints(ttl_ms: int | None, cache_scope: CacheScope | None, where: str) -> None:
    if ttl_ms is not None and (type(ttl_ms) is not int or ttl_ms < 0):
        raise ValueError(f"{where}: ttl_ms must be an int >= 0 (milliseconds), not {ttl_ms!r}")
    if cache_scope not in (None, "public", "private"):
        raise ValueError(f"{where}: cache_scope must be 'public' or 'private', not {cache_scope!r}")


def _definition(
    key: str,
    value: str,
    *,
    name: str,
    title: str | None,
    description: str | None,
    mime_type: str | None,
    annotations: Mapping[str, Any] | None,
    icons: Sequence[Icon] | None,
    meta: Mapping[str, Any] | None,
    size: int | None = None,
) -> dict[str, Any]:
    definition: dict[str, Any] = {key: value, "name": name}
    for field, field_value in (
        ("title", title),
        ("description", description),
        ("mimeType", mime_type),
        ("size", size),
    ):
        if field_value is not None:
            definition[field] = field_value
    if annotations:
        definition["annotations"] = dict(annotations)
    if icons:
        definition["icons"] = [icon.to_wire() for icon in icons]
    if meta:
        definition["_meta"] = dict(meta)
    return definition


class TemplateOptions(TypedDict, total=False):
    """The keywords of ``Catalog.resource_template``, each as :class:`ResourceTemplate` takes
    it."""

    name: str | None
    title: str | None
    description: str | None
    mime_type: str | None
    annotations: Mapping[str, Any] | None
    icons: Sequence[Icon] | None
    meta: Mapping[str, Any] | None
    ttl_ms: int | None
    cache_scope: CacheScope | None
    blocking: bool
    scopes: Sequence[str]
    visibility: Visibility | None


class ResourceOptions(TemplateOptions, total=False):
    """The keywords of ``Catalog.resource``: a template's, and the contents' ``size``."""

    size: int | None


class _Readable:
    scopes: tuple[str, ...]
    handler: Callable[..., Any]
    invoke: Invoke
    mime_type: str | None
    context_param: str | None
    ttl_ms: int | None
    cache_scope: CacheScope | None

    def cache_hints(self, server_scope: CacheScope) -> tuple[int, CacheScope]:
        """``ttlMs`` and ``cacheScope`` of a read: what the author declared, else not cached
        (contents change when tools write; see decisions.md#resource-cache-hints) and private
        when the server's scope is, or when the handler takes a Context (it may answer each
        caller differently)."""
        ttl = 0 if self.ttl_ms is None else self.ttl_ms
        if self.cache_scope is not None:
            return ttl, self.cache_scope
        private = server_scope == "private" or self.context_param is not None
        return ttl, "private" if private else "public"

    async def _run(
        self, uri: str, kwargs: dict[str, Any], context: Context
    ) -> list[dict[str, Any]]:
        if self.context_param:
            kwargs[self.context_param] = context
        value = await self.invoke(kwargs)
        return [contents.to_wire() for contents in to_contents(uri, value, self.mime_type)]


class Resource(_Readable):
    def __init__(
        self,
        uri: str,
        func: Callable[..., Any],
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
        cache_scope: CacheScope | None = None,
        blocking: bool = True,
        scopes: Sequence[str] = (),
        visibility: Visibility | None = None,
    ) -> None:
        self.uri = uri
        self.scopes = tuple(scopes)
        self.visibility = check_visibility(f"resource {uri}", visibility)
        self.handler = func
        self.invoke = invoker(func, blocking=blocking)
        self.mime_type = mime_type
        _cache_hints(ttl_ms, cache_scope, f"resource {uri}")
        self.ttl_ms = ttl_ms
        self.cache_scope = cache_scope
        parameters = read_parameters(func, name=name or uri)
        if parameters.names:
            raise TypeError(f"resource {uri}: a fixed resource takes no parameters but a Context")
        self.context_param = parameters.context_param
        self.definition = _definition(
            "uri",
            uri,
            name=name or func.__name__,
            title=title,
            description=description or description_from_doc(func.__doc__),
            mime_type=mime_type,
            annotations=annotations,
            icons=icons,
            meta=meta,
            size=size,
        )

    async def read(self, context: Context) -> list[dict[str, Any]]:
        return await self._run(self.uri, {}, context)


class ResourceTemplate(_Readable):
    def __init__(
        self,
        uri_template: str,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        ttl_ms: int | None = None,
        cache_scope: CacheScope | None = None,
        blocking: bool = True,
        scopes: Sequence[str] = (),
        visibility: Visibility | None = None,
    ) -> None:
        self.template = UriTemplate(uri_template)
        self.scopes = tuple(scopes)
        self.visibility = check_visibility(f"template {uri_template}", visibility)
        self.handler = func
        self.invoke = invoker(func, blocking=blocking)
        self.mime_type = mime_type
        _cache_hints(ttl_ms, cache_scope, f"template {uri_template}")
        self.ttl_ms = ttl_ms
        self.cache_scope = cache_scope
        self.parameters = read_parameters(func, name=name or uri_template, json_values=False)
        if set(self.parameters.names) != set(self.template.variables):
            raise TypeError(
                f"template {uri_template}: parameters {sorted(self.parameters.names)} must be "
                f"exactly the template variables {sorted(self.template.variables)}"
            )
        self.context_param = self.parameters.context_param
        self.completers: dict[str, Completer] = {}
        self.definition = _definition(
            "uriTemplate",
            uri_template,
            name=name or func.__name__,
            title=title,
            description=description or description_from_doc(func.__doc__),
            mime_type=mime_type,
            annotations=annotations,
            icons=icons,
            meta=meta,
        )

    def match(self, uri: str) -> dict[str, str] | None:
        return self.template.match(uri)

    async def read(
        self, uri: str, variables: dict[str, str], context: Context
    ) -> list[dict[str, Any]]:
        try:
            kwargs = self.parameters.bind(variables)
        except ArgumentsInvalid:
            # The URI has the template's shape but names nothing this template serves.
            raise ResourceNotFound(uri) from None
        return await self._run(uri, kwargs, context)


def to_contents(uri: str, value: Any, mime_type: str | None) -> list[TextContents | BlobContents]:
    if isinstance(value, (TextContents, BlobContents)):
        return [value]
    if isinstance(value, str):
        return [TextContents(uri, value, mime_type or "text/plain")]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return [BlobContents(uri, bytes(value), mime_type or "application/octet-stream")]
    if isinstance(value, (list, tuple)):
        out: list[TextContents | BlobContents] = []
        for item in value:
            out.extend(to_contents(uri, item, mime_type))
        return out
    raise TypeError(
        f"resource {uri} returned {type(value).__name__}; return str, bytes or contents"
    )
