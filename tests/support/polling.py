"""Waiting in tests for what another thread or task makes true, when there is no event to await.

``wait_until`` polls from a coroutine, ``wait_until_blocking`` from plain code; both fail the
test (TimeoutError, or an assertion) once ``limit`` seconds have passed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def wait_until(predicate: Callable[[], Any], limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - what is awaited sets no event
            await asyncio.sleep(0.005)


def wait_until_blocking(predicate: Callable[[], Any], limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)
