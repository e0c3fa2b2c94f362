"""What a tool call, prompt get or resource read came to, noted for its request record.

Only the code that runs a call knows what it named (a tool, a prompt, the URI template a read
matched) and how it ended (a result, an ``isError`` result, a handler that crashed, an
input-required round); the record belongs to the HTTP request around it. The endpoint puts the
request's note (its :class:`~server.records.draft.Draft`) in :data:`CALL_NOTE` for the task
that serves it, which the tasks it starts inherit (a legacy call runs in its own task), and
the dispatcher and the tools write to it with :func:`note_target` and :func:`note_outcome`.
Without a note (a call run outside the endpoint, a unit test) they do nothing. The same context
variable is the one :mod:`server.logs` reads to name the request on its log lines: one binding
per request, for both. Pure data: this module imports nothing of the server.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Protocol

# The outcomes written here; "error" (a JSON-RPC error) is the record's to derive.
OK = "ok"
IS_ERROR = "is_error"
CRASH = "crash"
ERROR = "error"
INPUT_REQUIRED = "input_required"
# Names come from clients (an unknown tool is named too): a record keeps this much of one.
MAX_TARGET_CHARS = 200


class CallNote(Protocol):
    """The request being served (a record draft): what its call came to is written here, and
    its log lines read the rest."""

    target: str | None
    outcome: str | None

    @property
    def request_id(self) -> str: ...
    @property
    def era(self) -> str | None: ...
    @property
    def method(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def client_name(self) -> str | None: ...


CALL_NOTE: ContextVar[CallNote | None] = ContextVar("mcp_request", default=None)


def note_target(target: str) -> None:
    note = CALL_NOTE.get()
    if note is not None:
        note.target = target[:MAX_TARGET_CHARS]


def note_outcome(outcome: str) -> None:
    """The call's outcome, unless one was noted already (a crash noted by the tool stays a
    crash when its ``isError`` result comes back)."""
    note = CALL_NOTE.get()
    if note is not None and note.outcome is None:
        note.outcome = outcome


def noted(result: dict[str, Any]) -> dict[str, Any]:
    """``result``, its outcome noted: ``ok``, or ``is_error`` for a tool's ``isError``."""
    note = CALL_NOTE.get()
    if note is not None and note.outcome is None:
        note.outcome = IS_ERROR if result.get("isError") is True else OK
    return result
