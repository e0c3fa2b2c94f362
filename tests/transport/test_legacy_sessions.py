"""server.transport.legacy_sessions: releasing a session here, and the version header.

(Finding a session from its header is exercised over HTTP in tests/transport/test_legacy.py.)
"""

from __future__ import annotations

from typing import cast

import pytest

from server.errors import InvalidRequest
from server.legacy.runtime import Runtimes
from server.security.gate import Gate
from server.transport.legacy_sessions import check_version_header, release_session


class SlotGate:
    """The one part of the gate a session's end touches: its client's session slot."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    def session_ended(self, session_id: str) -> None:
        self.ended.append(session_id)


def test_release_session_ends_the_runtime_and_frees_the_slot() -> None:
    runtimes = Runtimes(64)
    runtimes.get("s1")
    gate = SlotGate()
    release_session(runtimes, cast(Gate, gate), "s1")
    release_session(runtimes, cast(Gate, gate), "never-here")  # nothing here: the slot only
    assert runtimes.peek("s1") is None
    assert gate.ended == ["s1", "never-here"]


def test_the_version_header_names_a_legacy_version_when_sent() -> None:
    check_version_header({})
    check_version_header({b"mcp-protocol-version": b" 2025-11-25 "})
    with pytest.raises(InvalidRequest, match="Unsupported MCP-Protocol-Version"):
        check_version_header({b"mcp-protocol-version": b"2026-07-28"})
