"""Cursor pagination for the list methods: signed offsets, bounded pages.

A cursor names a list and an offset and is sealed, so a forged, altered or foreign cursor
(a tools cursor sent to ``prompts/list``) is ``-32602 Invalid cursor`` and can never ask for
more than one page. Cursors stay valid across replicas sharing the key and across list
changes (a shorter list just ends sooner). :class:`EncodedResults` keeps the pages (and
``server/discover``) encoded per catalog version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from server.errors import InvalidParams
from server.sealing import Sealer

if TYPE_CHECKING:
    from server.catalog import Catalog

T = TypeVar("T")


class Pager:
    def __init__(self, sealer: Sealer, page_size: int) -> None:
        if page_size < 1:
            raise ValueError("page size must be at least 1")
        self._sealer = sealer
        self.page_size = page_size

    def cursor(self, kind: str, offset: int) -> str:
        return self._sealer.seal("cursor", f"{kind}:{offset}".encode())

    def offset(self, kind: str, cursor: Any) -> int:
        """Where a page starts; None or "" is the first page."""
        if cursor is None or cursor == "":
            return 0
        payload = self._sealer.open("cursor", cursor) if isinstance(cursor, str) else None
        if payload is None:
            raise InvalidParams("Invalid cursor")
        named, _, offset = payload.decode(errors="replace").partition(":")
        if named != kind or not offset.isdigit():
            raise InvalidParams("Invalid cursor")
        return int(offset)

    def page(self, kind: str, items: Sequence[T], cursor: Any) -> tuple[Sequence[T], str | None]:
        return self.page_at(kind, items, self.offset(kind, cursor))

    def page_at(self, kind: str, items: Sequence[T], start: int) -> tuple[Sequence[T], str | None]:
        end = start + self.page_size
        return items[start:end], (self.cursor(kind, end) if end < len(items) else None)


class EncodedResults:
    """Results that change only with the catalog, encoded once and spliced into answers as
    ``orjson.Fragment``, until the catalog's version moves on. Keys are what the server
    verified (a method and a page's offset), never client text, so this holds at most one entry
    per page the server itself issued a cursor for (per view, for a private list: at most
    ``MAX_ENTRIES`` in all, started over past that)."""

    MAX_ENTRIES = 4096

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._version = -1
        self._encoded: dict[tuple[Any, ...], orjson.Fragment] = {}

    def __len__(self) -> int:
        return len(self._encoded)

    def get(self, key: tuple[Any, ...]) -> orjson.Fragment | None:
        """What is kept for ``key`` at the catalog's current version, if anything."""
        version = self._catalog.snapshot.version
        if version != self._version:
            self._encoded = {}
            self._version = version
        return self._encoded.get(key)

    def put(self, key: tuple[Any, ...], result: dict[str, Any]) -> orjson.Fragment:
        """``result`` encoded and kept for ``key`` (built after :meth:`get` found nothing)."""
        encoded = orjson.Fragment(orjson.dumps(result))
        if len(self._encoded) >= self.MAX_ENTRIES:
            self._encoded = {}
        self._encoded[key] = encoded
        return encoded
