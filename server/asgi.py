"""The ASGI contract, as the HTTP shell types it: scope, message, receive, send.

One definition for every module that speaks ASGI (the shell, the stream writers, the request
record's observers), so they agree on what they pass each other.

May import: the standard library only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]
Send = Callable[[ASGIMessage], Awaitable[None]]
