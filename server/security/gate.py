"""Who may use the endpoint, and how much: authentication, per-client limits, and the headers
their refusals need.

Every request on the MCP endpoint passes :meth:`Gate.enter` (or, without authentication,
:meth:`Gate.enter_anonymous`) after the Host/Origin checks and before anything else: the bearer
token is verified (both eras: sessions are never trusted for identity), the caller's subject
goes into its request record (never the token), and the caller's request rate is charged, keyed
by subject or, without one, by address. Long-lived streams and legacy sessions take a
per-client slot that is given back when they end. :meth:`Gate.headers` is the one place that
adds ``WWW-Authenticate`` and ``Retry-After`` to refusals.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from server.asgi import Headers, Scope
from server.errors import McpError, ServiceUnavailable
from server.records.draft import Draft, parse_networks
from server.security.auth import (
    ANONYMOUS,
    Authenticator,
    AuthError,
    NoAuth,
    Principal,
    build_authenticator,
    check_auth_mode,
    single_authorization,
)
from server.security.limits import (
    RateLimited,
    RateLimiter,
    SessionCounter,
    Slot,
    StreamCounter,
    client_key,
    retry_after_header,
)
from server.security.metadata import metadata_url, protected_resource_document
from server.settings import Settings

log = logging.getLogger(__name__)


class Gate:
    def __init__(self, settings: Settings, tool_scopes: Callable[[], Iterable[str]]) -> None:
        for warning in check_auth_mode(settings):
            log.warning(warning)
        self.settings = settings
        self.auth: Authenticator = build_authenticator(settings)
        # Whether callers are authenticated at all: without it every caller is ANONYMOUS
        # (nothing to await) and per-tool scopes mean nothing (nothing to check).
        self.authenticates = not isinstance(self.auth, NoAuth)
        self.limiter = RateLimiter(settings.rate_limit_rps, settings.rate_limit_burst)
        self._exempt_networks = parse_networks(settings.rate_limit_exempt)
        self.streams = StreamCounter(settings.max_streams_per_client)
        self.sessions = SessionCounter(settings.max_sessions_per_client)
        self._session_slots: dict[str, Slot] = {}
        self._tool_scopes = tool_scopes

    async def enter(self, scope: Scope, headers: Headers, draft: Draft) -> Principal:
        """The caller, or an McpError (400/401/403/429/503) to answer with. Without
        authentication, :meth:`enter_anonymous` does the same with nothing to await."""
        # Only a request that has the header pays for the scan that refuses it twice.
        authorization = (
            single_authorization(scope["headers"]) if b"authorization" in headers else None
        )
        try:
            principal = await self.auth.authenticate(authorization, scope.get("query_string", b""))
        except AuthError:
            # Failed attempts count against the address too: guessing tokens is rate-limited.
            self.limiter.check(client_key(None, draft.client_address))
            raise
        self._charge(draft, principal)
        return principal

    def enter_anonymous(self, scope: Scope, headers: Headers, draft: Draft) -> Principal:
        """:meth:`enter` when nothing is authenticated (every caller is ANONYMOUS): not a
        coroutine, since there is nothing to await, and this runs on every request."""
        if b"authorization" in headers:
            single_authorization(scope["headers"])  # sent twice is still a 400
        self._charge(draft, ANONYMOUS)
        return ANONYMOUS

    def _charge(self, draft: Draft, principal: Principal) -> None:
        """The caller's subject into its record, and its request against its rate."""
        draft.subject = None if principal is ANONYMOUS else principal.subject
        if draft.subject is not None or not self._exempt(draft.client_address):
            self.limiter.check(self.key(draft))

    def charge_more(self, draft: Draft, cost: int) -> None:
        """Charge ``cost`` more requests to a caller already admitted (the messages of a
        batch past its first), under the same exemptions as :meth:`_charge`."""
        if cost > 0 and (draft.subject is not None or not self._exempt(draft.client_address)):
            self.limiter.check(self.key(draft), cost)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one Gate per app; addresses repeat
    def _exempt(self, address: str | None) -> bool:
        """Anonymous callers from MCP_RATE_LIMIT_EXEMPT (loopback by default) are not rate
        limited: local tools and benchmarks; behind a proxy, trusted proxies make the real
        client address visible, so remote clients are still limited."""
        if address is None:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self._exempt_networks)

    @staticmethod
    def key(draft: Draft) -> str:
        return client_key(draft.subject, draft.client_address)

    def require_tool(self, principal: Principal, scopes: Sequence[str]) -> None:
        """403 ``insufficient_scope`` unless the caller holds what the tool needs."""
        if scopes:
            self.auth.require(principal, scopes)

    def stream_slot(self, draft: Draft) -> Slot:
        """A slot for one long-lived stream of this client (429 past the cap)."""
        return self.streams.acquire(self.key(draft))

    def session_slot(self, draft: Draft) -> Slot:
        """A slot for one more legacy session of this client (429 past the cap)."""
        return self.sessions.acquire(self.key(draft))

    def session_started(self, session_id: str, slot: Slot) -> None:
        self._session_slots[session_id] = slot

    def session_ended(self, session_id: str) -> None:
        slot = self._session_slots.pop(session_id, None)
        if slot is not None:
            slot.release()

    def metadata_document(self) -> dict[str, Any] | None:
        scopes = sorted(set(self._tool_scopes()))
        return protected_resource_document(self.settings, scopes)

    def headers(self, error: McpError, scope: Scope, host: str | None) -> list[tuple[bytes, bytes]]:
        """The response headers a refusal needs besides its JSON-RPC body."""
        if isinstance(error, AuthError):
            url = None
            if host and protected_resource_document(self.settings) is not None:
                url = metadata_url(
                    scope.get("scheme", "http"), host, self.settings.root_path, self.settings.path
                )
            return [(b"www-authenticate", error.www_authenticate(url).encode("latin-1"))]
        if isinstance(error, RateLimited | ServiceUnavailable):
            return [(b"retry-after", retry_after_header(error.retry_after).encode())]
        return []
