"""Declared extensions: an identifier, its settings, and the methods it adds.

An extension (SEP-2133) is advertised under ``capabilities.extensions`` in the 2026-07-28 era
only (``server/discover``; the ``initialize`` era has no such field), keyed by its identifier
(``io.modelcontextprotocol/skills``) with its settings inline. The server serves exactly what it
advertises: an extension's methods are routed while it is declared, and are -32601 (404) for a
server that does not declare it.

An extension's methods are handlers ``(params, context, paginate)`` returning a result dict;
``paginate`` is the server's cursor paging (``paginate(kind, items, cursor)``), so an extension's
lists page the way ``tools/list`` does. Methods listed in ``cacheable`` carry ``ttlMs`` and
``cacheScope`` like the base list methods.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from server.context import Context
from server.protocol import METHOD_NAMES

T = TypeVar("T")

# reverse-DNS prefix, a slash, a name: io.modelcontextprotocol/tasks, com.example/feature
EXTENSION_ID = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
METHOD_NAME = re.compile(r"^[a-z][A-Za-z0-9_]*(/[a-z][A-Za-z0-9_]*)+$")

# Methods the base protocol and the tasks extension define: no declared extension may take one.
RESERVED_METHODS = METHOD_NAMES
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"


class Paginate(Protocol):
    def __call__(
        self, kind: str, items: Sequence[T], cursor: Any
    ) -> tuple[Sequence[T], str | None]: ...


ExtensionHandler = Callable[[Mapping[str, Any], Context, Paginate], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Extension:
    """One declared extension."""

    identifier: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    methods: Mapping[str, ExtensionHandler] = field(default_factory=dict)
    cacheable: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not EXTENSION_ID.match(self.identifier):
            raise ValueError(
                f"extension identifier {self.identifier!r} must be a reverse-DNS prefix and a "
                "name, such as com.example/feature"
            )
        if not isinstance(self.settings, Mapping):
            raise TypeError(f"{self.identifier}: settings must be a mapping")
        for method in self.methods:
            if not METHOD_NAME.match(method):
                raise ValueError(f"{self.identifier}: {method!r} is not a method name")
        unknown = self.cacheable - set(self.methods)
        if unknown:
            raise ValueError(f"{self.identifier}: cacheable names no method of it: {unknown}")


def extension_methods(extensions: Mapping[str, Extension]) -> dict[str, Extension]:
    """Each method of the declared extensions, with the extension serving it."""
    found: dict[str, Extension] = {}
    for extension in extensions.values():
        for method in extension.methods:
            found[method] = extension
    return found
