"""A catalog's own lifespan: what its tools need from start to stop (a database pool, an HTTP
client), opened before the first request and closed after the last.

The author passes ``Catalog(lifespan=...)``: a function taking the catalog and returning an
async context manager (an ``@contextlib.asynccontextmanager`` generator, typically). The app
serving the catalog enters it in its own lifespan, however it is served (``python -m
server``, ``serve()``, ``uvicorn module:app``, gunicorn workers, mounted in a host app), and
what it yields is :attr:`CatalogLifespan.state` until it exits. Several apps serving one
catalog in one process share one entry: the first to start enters it, the last to stop exits
it, so it runs once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

# What an author passes: called with the catalog.
LifespanFunction = Callable[[Any], AbstractAsyncContextManager[Any]]


class CatalogLifespan:
    """The author's lifespan function, entered once however many apps serve the catalog."""

    def __init__(self, catalog: object, function: LifespanFunction | None) -> None:
        self._catalog = catalog
        self.function = function
        self.state: Any = None  # what the lifespan yielded, while it runs
        self._manager: AbstractAsyncContextManager[Any] | None = None
        self._users = 0
        # Created on first use and dropped when the last user leaves: an asyncio lock binds
        # to the loop it first waits on, and a process may run one loop after another.
        self._lock: asyncio.Lock | None = None

    @property
    def running(self) -> bool:
        return self._users > 0

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Held by an app from its start to its stop."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        lock = self._lock
        async with lock:
            if self._users == 0 and self.function is not None:
                manager = self.function(self._catalog)
                self.state = await manager.__aenter__()
                self._manager = manager
            self._users += 1
        try:
            yield
        finally:
            async with lock:
                self._users -= 1
                if self._users == 0:
                    ending, self._manager = self._manager, None
                    self._lock = None
                    try:
                        if ending is not None:
                            # Serving ended, whatever ended it: the resources close normally.
                            await ending.__aexit__(None, None, None)
                    finally:
                        self.state = None
