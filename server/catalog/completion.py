"""Completion callbacks: the type a server author writes, and how one is run.

A completer gets the partial ``value`` of one prompt argument or template variable and the
other arguments already filled in, and returns a list of strings or a
:class:`~server.catalog.content.Completion`; it may be sync or async.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from server.catalog.content import Completion

Completer = Callable[[str, Mapping[str, str]], Any]


async def run_completer(
    completer: Completer, value: str, arguments: Mapping[str, str]
) -> Completion:
    """The completion ``completer`` gives for ``value``, the other ``arguments`` already filled in.

    Both are passed by position, so a completer may name its parameters as it likes
    (``context`` works as well as ``arguments``)."""
    result = completer(value, arguments)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Completion):
        return result
    if isinstance(result, str) or not all(isinstance(item, str) for item in result):
        raise TypeError("a completer returns a list of strings or a Completion")
    return Completion(list(result))
