"""Cursor pagination for the list methods: signed offsets, bounded pages.

A cursor names a list and an offset and is sealed, so a forged, altered or foreign cursor
(a tools cursor sent to ``prompts/list``) is ``-32602 Invalid cursor`` and can never ask for
more than one page. Cursors stay valid across replicas sharing the key and across list
changes (a shorter list just ends sooner).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from server.errors import InvalidParams
from server.sealing import Sealer

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
