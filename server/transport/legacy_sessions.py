"""The legacy era's sessions over HTTP: found from their header, and ended.

A request of a session names it in ``Mcp-Session-Id``; :meth:`LegacySessions.find` checks the
header (400 for an id that cannot be one of ours, before any store sees it), loads the session
for its owner only (another subject's session is, for that caller, one that does not exist:
404), and returns it with its live part in this process. :meth:`LegacySessions.session_ended`
releases what a session held here, the gate's slot for it included (:func:`release_session`,
also the session store's hook for sessions that end elsewhere or expire). What another replica
announces on the bus about a session (:class:`~server.state.relay.SessionEvents`), and putting
a message on a session's HTTP+SSE stream, are the sans-IO
:class:`~server.legacy.remote.RemoteSessions` this class extends.
"""

from __future__ import annotations

from dataclasses import replace

from server.asgi import Headers, header_text
from server.errors import InvalidRequest
from server.legacy.era import LegacyEra
from server.legacy.remote import RemoteSessions
from server.legacy.runtime import Runtimes, SessionRuntime
from server.legacy.sessions import Session, checked_session_id
from server.protocol import LEGACY_VERSIONS
from server.records.draft import Draft
from server.security.gate import Gate
from server.transport.retiring import Retiring


def check_version_header(headers: Headers) -> None:
    """A legacy request's ``MCP-Protocol-Version``, when sent, names a legacy version."""
    version = header_text(headers, b"mcp-protocol-version")
    if version is not None and version.strip() not in LEGACY_VERSIONS:
        raise InvalidRequest(
            f"Unsupported MCP-Protocol-Version {version.strip()!r}; supported: "
            + ", ".join(LEGACY_VERSIONS)
        )


def release_session(runtimes: Runtimes, gate: Gate, session_id: str) -> None:
    """Release what a session held here: its runtime and its client's session slot (the
    session store's ``ended`` hook, and :meth:`LegacySessions.session_ended`)."""
    runtimes.end(session_id)
    gate.session_ended(session_id)


class LegacySessions(RemoteSessions):
    """The legacy sessions over HTTP; what other replicas tell is applied by the sans-IO
    :class:`~server.legacy.remote.RemoteSessions` it extends."""

    def __init__(self, era: LegacyEra, runtimes: Runtimes, gate: Gate) -> None:
        super().__init__(era, runtimes)
        self.gate = gate
        # Set when MCP_RETIRE names something: a session's version and declared features.
        self.retiring: Retiring | None = None

    async def find(self, headers: Headers, draft: Draft) -> tuple[Session, SessionRuntime]:
        """The session the request names, for its caller, with its live part here."""
        session_id = header_text(headers, b"mcp-session-id")
        if session_id is None or not session_id.strip():
            # Both ways in: a bare curl most likely meant the modern era, which needs no session.
            raise InvalidRequest(
                "Bad Request: no session. Either send params._meta"
                " {'io.modelcontextprotocol/protocolVersion': '2026-07-28',"
                " 'io.modelcontextprotocol/clientCapabilities': {}} with the headers"
                " MCP-Protocol-Version: 2026-07-28 and Mcp-Method (protocol 2026-07-28, no"
                " session), or send initialize first and then the Mcp-Session-Id header it"
                " returns (protocol 2025-11-25 and older)"
            )
        session_id = checked_session_id(session_id)  # a 400 before any store sees it
        session = await self.era.store.get(session_id)
        if session is not None and session.owner != draft.subject:
            # Another subject's session is, for this caller, a session that does not exist.
            session = None
        elif session is None:
            self.session_ended(session_id)  # found expired just now: release it too
        if session is None:
            raise InvalidRequest(
                "Session not found: it ended or expired; send initialize again", http_status=404
            )
        runtime = self.runtimes.get(session.id)
        # What the client declared at initialize is carried on every record of its session.
        draft.session_id = session.id
        draft.set_client(session.client_info, session.client_capabilities)
        if draft.body_version is None:
            draft.body_version = session.protocol_version
        if self.retiring is not None:
            # Clients before 2025-06-18 send no version header: their session says it.
            retirement = self.retiring.check(
                draft,
                version=session.protocol_version,
                capabilities=session.client_capabilities,
            )
            if retirement is None and draft.retiring is not None:
                # Affected by what the request said itself (its method, its header version).
                retirement = self.retiring.plan.by_name.get(draft.retiring)
            if retirement is not None and retirement.notify:
                level = self.era.log_level(session, {})
                self.retiring.tell_session(retirement, runtime, level)
            declared = session.client_capabilities
            kept = self.retiring.without_retired_features(declared)
            if kept is not declared:  # for this request only: the store keeps what was declared
                session = replace(session, client_capabilities=kept)
        return session, runtime

    def session_ended(self, session_id: str) -> None:
        """Release what a session held here: its runtime and its client's session slot."""
        release_session(self.runtimes, self.gate, session_id)
