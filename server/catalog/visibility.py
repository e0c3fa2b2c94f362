"""Which items a caller may see: ``MCP_SCOPED_ITEMS``, each item's ``visibility``, the rule.

By default (``listed``) every item is listed to everyone (a request lacking an item's scopes
gets the step-up 403). An item whose visibility is ``hidden`` (its keyword, else the setting) is
seen only by callers holding its scopes whom the catalog's rule accepts: lists leave it out, and
a request naming it answers as for a name never declared. A :class:`View` is what one caller
may see, made once per caller per catalog version (the rule is a pure function of caller and
item). Its ``keys`` (per list, the names hidden) key the cached pages; cursors carry their digest.
With nothing hidden :meth:`Views.view` is never asked (``Views.hiding`` is False).
docs/security.md#scoped-items says when to choose which.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Literal, Protocol

from server.context import Caller
from server.memo import BoundedMemo

log = logging.getLogger(__name__)

Visibility = Literal["listed", "hidden"]
VISIBILITIES: tuple[Visibility, ...] = ("listed", "hidden")
# item -> whether the caller may see it; only asked for items whose visibility is hidden.
VisibilityRule = Callable[[Caller, Any], bool]
# The snapshot field of each list, and the key that names its items in a definition.
LIST_KEYS: dict[str, str] = {
    "tools": "name",
    "prompts": "name",
    "resources": "uri",
    "templates": "uriTemplate",
}
NOTHING_HIDDEN: frozenset[str] = frozenset()
# Views kept per catalog version: a view per distinct caller (or scope set), started over
# past this many.
MAX_VIEWS = 4096


class Catalog(Protocol):
    """What views read of :class:`~server.catalog.Catalog` (which imports this module)."""

    @property
    def tools(self) -> Mapping[str, Any]: ...
    @property
    def prompts(self) -> Mapping[str, Any]: ...
    @property
    def resources(self) -> Mapping[str, Any]: ...
    @property
    def templates(self) -> Mapping[str, Any]: ...
    @property
    def visibility_rule(self) -> VisibilityRule | None: ...
    @property
    def snapshot(self) -> Any: ...

    def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]: ...

    def find_resource(self, uri: str, hidden: Callable[[object], bool] | None = None) -> Any: ...


def check_visibility(owner: str, visibility: Any) -> Visibility | None:
    """A declaration's ``visibility`` keyword: None (follow MCP_SCOPED_ITEMS) or one of
    :data:`VISIBILITIES`; ValueError naming the item otherwise."""
    if visibility is None or visibility in VISIBILITIES:
        return visibility  # type: ignore[no-any-return]
    raise ValueError(f"{owner}: visibility must be 'listed' or 'hidden', not {visibility!r}")


def item_scopes(catalog: Catalog) -> set[str]:
    """Every scope some item of ``catalog`` asks for (``scopes_supported`` lists them)."""
    kinds = (catalog.tools, catalog.prompts, catalog.resources, catalog.templates)
    return {scope for items in kinds for item in items.values() for scope in item.scopes}


class View:
    """What one caller may see: per list, the names hidden from it (``keys``), the items
    themselves (``hides``), and the tag its cursors carry (:meth:`tag`)."""

    __slots__ = ("_lists", "_tags", "hidden_items", "keys")

    def __init__(self, keys: dict[str, frozenset[str]], hidden_items: frozenset[int]) -> None:
        self.keys = keys
        self.hidden_items = hidden_items  # id() of each hidden item, alive in the catalog
        self._lists: dict[str, tuple[dict[str, Any], ...]] = {}
        self._tags: dict[str, str] = {}

    def tag(self, field: str) -> str:
        """A digest of what this view hides of list ``field``: the same for every caller
        whose cached pages (and so cursors) it shares."""
        found = self._tags.get(field)
        if found is None:
            hidden = "\0".join(sorted(self.keys.get(field, ()))).encode()
            found = self._tags[field] = hashlib.blake2b(hidden, digest_size=8).hexdigest()
        return found

    def hides(self, item: object) -> bool:
        return id(item) in self.hidden_items

    def depends(self, field: str) -> bool:
        """Whether this list may differ from caller to caller (some item in it is hidden
        from someone): its pages are then private, cached and paged per view."""
        return field in self.keys

    def items(self, field: str, everything: tuple[dict[str, Any], ...]) -> tuple[Any, ...]:
        """The list ``field`` as this caller sees it (``everything``: the catalog's)."""
        hidden = self.keys.get(field)
        if not hidden:
            return everything
        found = self._lists.get(field)
        if found is None:
            key = LIST_KEYS[field]
            found = self._lists[field] = tuple(d for d in everything if d[key] not in hidden)
        return found


class Views:
    """The views of one catalog under ``MCP_SCOPED_ITEMS`` (``default``); ``scoped``: whether
    item scopes are checked at all (with ``MCP_AUTH=none`` they are not, as for calls)."""

    def __init__(self, catalog: Catalog, default: Visibility = "listed", *, scoped: bool = True):
        self.catalog = catalog
        self.default = check_visibility("MCP_SCOPED_ITEMS", default) or "listed"
        self.scoped = scoped
        # Whether any item may be hidden from anyone: read on every request, so a plain bool.
        self.hiding = False
        self._version = -1
        self._candidates: dict[str, list[tuple[str, Any]]] = {}
        self._memo: BoundedMemo[Hashable, View] = BoundedMemo(MAX_VIEWS, max_key_bytes=4096)
        self._refresh()
        catalog.subscribe(lambda change: self._refresh())

    def _refresh(self) -> None:
        snapshot = self.catalog.snapshot
        if snapshot.version == self._version:
            return
        self._version = snapshot.version
        self._memo.clear()
        catalog = self.catalog
        candidates: dict[str, list[tuple[str, Any]]] = {}
        for field, items in (
            ("tools", catalog.tools),
            ("prompts", catalog.prompts),
            ("resources", catalog.resources),
            ("templates", catalog.templates),
        ):
            hidden = [
                (name, item)
                for name, item in items.items()
                if (getattr(item, "visibility", None) or self.default) == "hidden"
            ]
            if hidden:
                candidates[field] = hidden
        self._candidates = candidates
        self.hiding = bool(candidates)

    def view(self, caller: Caller) -> View | None:
        """What ``caller`` may see; None when nothing is hidden from anyone."""
        self._refresh()  # a rule or item changed without an event (never on the default path)
        if not self.hiding:
            return None
        rule = self.catalog.visibility_rule
        key: Hashable = (caller.scopes, caller.subject, caller.tenant) if rule else caller.scopes
        found = self._memo.get(key)
        if found is None:
            found = self._memo.remember(key, self._make(caller, rule))
        return found

    def _make(self, caller: Caller, rule: VisibilityRule | None) -> View:
        keys: dict[str, frozenset[str]] = {}
        hidden_items: set[int] = set()
        for field, candidates in self._candidates.items():
            names = []
            for name, item in candidates:
                if not self._allows(caller, item, rule):
                    names.append(name)
                    hidden_items.add(id(item))
            keys[field] = frozenset(names) if names else NOTHING_HIDDEN
        return View(keys, frozenset(hidden_items))

    def _allows(self, caller: Caller, item: Any, rule: VisibilityRule | None) -> bool:
        if self.scoped and not caller.scopes.issuperset(getattr(item, "scopes", ())):
            return False
        if rule is None:
            return True
        try:
            return bool(rule(caller, item))
        except Exception:
            # Fails closed: an item the rule cannot judge is not shown.
            log.exception("the visibility rule failed on %r: hidden", item)
            return False

    def visible(self, caller: Caller, field: str) -> tuple[dict[str, Any], ...]:
        """The list ``field`` as ``caller`` sees it now."""
        everything: tuple[dict[str, Any], ...] = getattr(self.catalog.snapshot, field)
        view = self.view(caller)
        return everything if view is None else view.items(field, everything)

    def watch(self, caller: Caller) -> ListWatch:
        """What tells ``caller``'s notification stream which changes concern it."""
        return ListWatch(self, caller)


class ListWatch:
    """Whether a catalog change changed what one caller sees, for its notification stream: a
    list change only when its list (as the caller sees it) did change, a resource update
    unless the resource is hidden from it; anything else goes through."""

    __slots__ = ("_caller", "_seen", "_views")

    def __init__(self, views: Views, caller: Caller) -> None:
        self._views, self._caller = views, caller
        self._seen = {field: views.visible(caller, field) for field in LIST_KEYS}

    def __call__(self, change: Any) -> bool:
        kind = getattr(change, "kind", None)
        if kind == "resource_updated":
            view = self._views.view(self._caller)
            if view is None:
                return True
            find = self._views.catalog.find_resource
            return find(change.uri) is None or find(change.uri, view.hides) is not None
        if kind not in ("tools", "prompts", "resources"):
            return True
        changed = False
        for field in ("resources", "templates") if kind == "resources" else (kind,):
            now, before = self._views.visible(self._caller, field), self._seen[field]
            if len(now) != len(before) or any(a is not b for a, b in zip(now, before, strict=True)):
                changed = True
            self._seen[field] = now
        return changed
