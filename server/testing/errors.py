"""What :class:`server.testing.Client` raises, all of it a :class:`ClientError`.

A server's error answer (a JSON-RPC error, or an HTTP refusal such as a 401 before any JSON-RPC
was read) is an :class:`ErrorAnswer` carrying the status and headers a test asserts on; a
handler that keeps asking questions is a :class:`TooManyQuestions` after :data:`MAX_ROUNDS`, so
a test fails instead of hanging.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Enough for any honest handler; a handler that asks forever fails the test instead of hanging.
MAX_ROUNDS = 16


class ClientError(Exception):
    """What this client raises: the server's error answer, or a call it gave up on."""


class ErrorAnswer(ClientError):
    """The server answered with a JSON-RPC error (``error``: code, message, data), or with an
    HTTP error status and no JSON-RPC answer (``code`` None, the body in ``message``)."""

    def __init__(
        self, error: Mapping[str, Any], status: int, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{error.get('message')} (code {error.get('code')}, HTTP {status})")
        self.error = dict(error)
        self.code = error.get("code")
        self.status = status
        self.headers = dict(headers or {})  # lower-cased names


class TooManyQuestions(ClientError):
    """A handler asked more than :data:`MAX_ROUNDS` questions in one call: a handler that asks
    forever fails the test instead of hanging it."""

    def __init__(self, method: str) -> None:
        super().__init__(f"{method} still asked for input after {MAX_ROUNDS} rounds")
        self.method = method


class NoAnswer(Exception):
    """The server asked something this client has no callback for (answered -32601)."""
