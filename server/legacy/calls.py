"""One request of a legacy session on its way through the era: :class:`LegacyCall`.

The HTTP side finds the session and what the request names, and hands the era one
:class:`LegacyCall`; :meth:`server.legacy.era.LegacyEra.start` runs it and leaves on it what the
record wants to know afterwards (the task it made or showed). It is data, with no I/O: where
the call runs (inline in its request's task, or in a task of its own) and how its answer is
written are the HTTP side's (:mod:`server.transport.legacy_calls`), as in the modern era, whose
:class:`~server.modern.era.ModernCall` plays the same part.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from server.catalog.visibility import View
from server.context import Caller, Recorded
from server.dispatch import Target
from server.jsonrpc import Request
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session


@dataclass(slots=True)
class LegacyCall:
    """A request in a session, with what it names (``target``, as the era resolved it) and
    what its Context says of the HTTP request that carried it."""

    request: Request
    target: Target
    session: Session
    runtime: SessionRuntime
    caller: Caller | None = None
    headers: Mapping[bytes, bytes] | None = None
    record: Recorded | None = None
    client_key: str | None = None
    # Set by the era once the call has run: the task it created or showed, for its record.
    task: dict[str, str] | None = None
    # What the caller may see, when some item is hidden from someone (None: everything).
    view: View | None = None
