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


async def run_completer(completer: Completer, value: str, context: Mapping[str, str]) -> Completion:
    result = completer(value, context)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Completion):
        return result
    if isinstance(result, str) or not all(isinstance(item, str) for item in result):
        raise TypeError("a completer returns a list of strings or a Completion")
    return Completion(list(result))
