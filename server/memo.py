"""One kind of cache for everything the server remembers about request values: bounded in
count *and* in bytes by construction.

A client repeats the same few values (hosts, Accept values, addresses, header lines), so each is
judged once and remembered; but a client chooses them, and a cache bounded only in count holds
whatever size they have (1,000 distinct 1 MB Hosts pinned a gigabyte in an ``lru_cache``).
:class:`BoundedMemo` remembers a key only when it is small (``max_key_bytes``), holds at most
``max_entries``, and starts over when full: a client cycling fresh values costs recomputation,
never memory. It is a ``dict``, so hot-path lookups stay the C ``dict.get``; writes go through
:meth:`BoundedMemo.remember`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

SMALL_KEY_BYTES = 256
_SCALAR_BYTES = 8


def key_bytes(key: object) -> int:
    """What a key holds, in bytes: strings and bytes by length, tuples by their parts, numbers
    and None as a word; anything else by its shallow size."""
    if isinstance(key, str | bytes | bytearray):
        return len(key)
    if isinstance(key, tuple):
        total = 0
        for part in key:
            total += key_bytes(part)
        return total
    if key is None or isinstance(key, int | float):
        return _SCALAR_BYTES
    return sys.getsizeof(key)


class BoundedMemo(dict[K, V]):
    """Values by key, for keys of at most ``max_key_bytes``; at most ``max_entries`` of them."""

    __slots__ = ("max_entries", "max_key_bytes")

    def __init__(self, max_entries: int = 1024, max_key_bytes: int = SMALL_KEY_BYTES) -> None:
        if max_entries < 1 or max_key_bytes < 0:
            raise ValueError("max_entries >= 1 and max_key_bytes >= 0 are required")
        super().__init__()
        self.max_entries = max_entries
        self.max_key_bytes = max_key_bytes

    def remember(self, key: K, value: V, size: int | None = None) -> V:
        """``value`` under ``key`` if the key is small enough (``size``: its bytes, when the
        caller knows better than :func:`key_bytes`), and ``value`` back either way."""
        if (key_bytes(key) if size is None else size) > self.max_key_bytes:
            return value
        if len(self) >= self.max_entries and key not in self:
            self.clear()
        dict.__setitem__(self, key, value)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self.remember(key, value)

    def setdefault(self, key: K, default: Any = None) -> Any:  # keep every write bounded
        if key in self:
            return self[key]
        return self.remember(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self.remember(key, value)


_MISSING: Any = object()


def memoized(
    max_entries: int = 1024, max_key_bytes: int = SMALL_KEY_BYTES
) -> Callable[[Callable[[K], R]], Callable[[K], R]]:
    """A one-argument function's results in a :class:`BoundedMemo` (an ``lru_cache`` bounded
    in bytes). Exceptions are not remembered: a refused value is judged again each time."""

    def wrap(function: Callable[[K], R]) -> Callable[[K], R]:
        memo: BoundedMemo[K, R] = BoundedMemo(max_entries, max_key_bytes)
        get = memo.get

        def cached(argument: K) -> R:
            found = get(argument, _MISSING)
            if found is _MISSING:
                found = memo.remember(argument, function(argument))
            return found  # type: ignore[no-any-return]

        cached.__doc__ = function.__doc__
        cached.__name__ = function.__name__
        cached.__wrapped__ = function  # type: ignore[attr-defined]
        cached.memo = memo  # type: ignore[attr-defined]
        return cached

    return wrap
