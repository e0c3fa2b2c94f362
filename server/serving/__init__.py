"""Running the app under uvicorn: the :class:`Server` and :func:`serve`
(:mod:`server.serving.server`), and what they run with (the copied uvicorn protocol, write
coalescing, the heap, the bound on stalled clients).

Re-exports only, and on first use (a module ``__getattr__``; for type checkers under
``TYPE_CHECKING``): ``from server.serving import serve`` keeps its short path, while importing
one module of this folder (``server.serving.heap``) loads neither uvicorn nor the app.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.serving.server import (
        NO_QUERY_STRING,
        VERIFIED_UVICORN,
        NoQueryString,
        Server,
        http_protocol,
        serve,
        server_for,
        shutdown_deadlines,
        tune_collector,
        uvicorn_options,
    )

__all__ = [
    "NO_QUERY_STRING",
    "VERIFIED_UVICORN",
    "NoQueryString",
    "Server",
    "http_protocol",
    "serve",
    "server_for",
    "shutdown_deadlines",
    "tune_collector",
    "uvicorn_options",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'server.serving' has no attribute {name!r}")
    import server.serving.server as module

    return getattr(module, name)
