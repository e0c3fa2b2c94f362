"""The ASGI contract, as the HTTP shell types it: scope, message, receive, send.

One definition for every module that speaks ASGI (the shell, the stream writers, the request
record's observers), so they agree on what they pass each other; and the request's headers as
the shell reads them once per request: :data:`Headers`, raw bytes by lower-case name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]
Send = Callable[[ASGIMessage], Awaitable[None]]
Headers = Mapping[bytes, bytes]


# A scope key this server's own HTTP protocol sets: at most how many bytes the request's head
# took (request line and headers), known while it arrived. The endpoint's header-size check
# needs nothing more when it is small; under any other server it counts the headers itself.
HEAD_BYTES = "mcp.head_bytes"


def read_headers(scope: Scope) -> dict[bytes, bytes]:
    """The request headers by name, built once per request without decoding anything: values
    are decoded only where they are read (:func:`header_text`), which is a handful of the
    headers a client sends. ASGI servers lower-case header names (uvicorn, hypercorn, the
    test clients); a repeated header keeps its last value."""
    return dict(scope["headers"])


def path_of(scope: Scope) -> str:
    """The request's path below the app's mount prefix (``root_path``: ``MCP_ROOT_PATH``,
    uvicorn's ``--root-path``, a forwarded prefix, a host app's mount), which the path arrives
    with: what the app's own routes are matched against."""
    path: str = scope.get("path", "")
    root = scope.get("root_path") or ""
    if root and path.startswith(root):
        path = path[len(root) :]
    return path


def header_text(headers: Headers, name: bytes) -> str | None:
    """A header's value as text (Latin-1 keeps every byte; checks that need visible ASCII make
    them themselves)."""
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")
