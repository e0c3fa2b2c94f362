"""Who may use the endpoint, and how much: authentication, per-client limits, and the headers
their refusals need.

Every request on the MCP endpoint passes :meth:`Gate.enter` (or :meth:`Gate.enter_anonymous`)
after the Host/Origin checks: the bearer token is verified in both eras (sessions never stand
for identity), the subject goes into the record (never the token), and the caller's rate is
charged, keyed by subject or else address. Streams and legacy sessions take a per-client slot,
given back when they end. :meth:`Gate.headers` adds ``WWW-Authenticate`` and ``Retry-After``.
The only module here that reads the security settings: :func:`check_auth_mode`,
:func:`build_authenticator` and :func:`protected_resource_document`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from server.asgi import Headers, Scope
from server.errors import ConfigurationError, McpError, retry_headers
from server.memo import BoundedMemo
from server.records.draft import Draft
from server.records.schema import clip
from server.security.auth import (
    ANONYMOUS,
    Authenticator,
    AuthError,
    NoAuth,
    Principal,
    StaticTokens,
    check_scope_tokens,
    single_authorization,
    with_tokens_file,
)
from server.security.limits import (
    RateLimiter,
    SessionCounter,
    Slot,
    StreamCounter,
    client_key,
)
from server.security.metadata import metadata_url, resource_metadata
from server.security.networks import in_networks, is_loopback, parse_networks
from server.security.shared_limits import Incoming, SharedLimits
from server.settings import Settings
from server.settings_checks import TokenEntry

log = logging.getLogger(__name__)

# Settings that mean something only when callers authenticate (with MCP_AUTH=none set too, the
# start is refused rather than serving openly). MCP_AUTH_ALGORITHMS has a default, so no.
AUTH_ONLY = (
    "auth_tokens",
    "auth_tokens_file",
    "auth_token_scopes",
    "auth_tenant_claim",
    "auth_required_scopes",
    "auth_issuer",
    "auth_audience",
    "auth_resource",
    "auth_servers",
    "auth_jwks_file",
    "auth_jwks_url",
)
# What deploy/mcp.env.example and deploy/k8s/secret.example.yaml ship in MCP_AUTH_TOKENS.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


class Gate:
    def __init__(self, settings: Settings, item_scopes: Callable[[], Iterable[str]]) -> None:
        # The static tokens, read (MCP_AUTH_TOKENS_FILE) and checked once for both calls.
        tokens = static_tokens(settings) if settings.auth == "tokens" else []
        for warning in check_auth_mode(settings, tokens):
            log.warning(warning)
        self.settings = settings
        self.auth: Authenticator = build_authenticator(settings, tokens)
        # Without authentication every caller is ANONYMOUS and per-item scopes mean nothing.
        self.authenticates = not isinstance(self.auth, NoAuth)
        self.limiter = RateLimiter(settings.rate_limit_rps, settings.rate_limit_burst)
        self._exempt_networks = parse_networks(settings.rate_limit_exempt)
        self._trusted_proxies = parse_networks(settings.trusted_proxies)
        self._exempt_memo: BoundedMemo[str | None, bool] = BoundedMemo(4096)
        self._warned_untrusted_proxy = False
        self._resource_warned = False
        self.serves_metadata = serves_metadata(settings)  # a challenge's question, asked once
        self.streams = StreamCounter(settings.max_streams_per_client)
        self.sessions = SessionCounter(settings.max_sessions_per_client)
        self._session_slots: dict[str, Slot] = {}
        self._item_scopes = item_scopes
        self.shared: SharedLimits | None = None  # with Redis: the limits across replicas too
        self.shares = False  # (each admitted request's rate then due there: Draft.rate_due)

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
            self.charge_refusal(scope, headers, draft)
            raise
        self._charge(draft, principal, scope, headers)
        return principal

    def enter_anonymous(self, scope: Scope, headers: Headers, draft: Draft) -> Principal:
        """:meth:`enter` when nothing is authenticated (every caller is ANONYMOUS): not a
        coroutine, since there is nothing to await, and this runs on every request."""
        if b"authorization" in headers:
            single_authorization(scope["headers"])  # sent twice is still a 400
        # _charge for ANONYMOUS (its subject is None), _exempt's memo first (None: not known).
        exempt = self._exempt_memo.get(draft.client_address)
        proxied = b"x-forwarded-for" in headers or b"forwarded" in headers
        if exempt is None or (exempt and proxied):
            exempt = self._exempt_request(scope, headers, draft)  # the whole question
        if not exempt:
            self.limiter.check(self.key(draft))
            draft.rate_due = self.shares
        return ANONYMOUS

    def _charge(self, draft: Draft, principal: Principal, scope: Scope, headers: Headers) -> None:
        """The caller's subject into its record, and its request against its rate."""
        draft.subject = None if principal is ANONYMOUS else principal.subject
        if principal.tenant is not None:
            draft.tenant = clip(principal.tenant)
        if draft.subject is not None or not self._exempt_request(scope, headers, draft):
            self.limiter.check(self.key(draft))
            draft.rate_due = self.shares

    def charge_refusal(self, scope: Scope, headers: Headers, draft: Draft) -> None:
        """A request refused before authentication (bad Host or Origin, headers too large, a
        bad token) charged to its address, under the same exemptions: refusals cost the server
        a record each, so a flood of them is limited like any other. RateLimited once the
        address is over its rate."""
        if not self._exempt_request(scope, headers, draft):
            self.limiter.check(client_key(None, draft.client_address))

    def _exempt_request(self, scope: Scope, headers: Headers, draft: Draft) -> bool:
        """Whether this anonymous request is exempt from the rate limit: its address is in
        MCP_RATE_LIMIT_EXEMPT, and it did not come through a proxy this server does not
        trust (that proxy's clients would all look like the proxy, loopback above all)."""
        if not self._exempt(draft.client_address):
            return False
        if b"x-forwarded-for" not in headers and b"forwarded" not in headers:
            return True
        peer = scope.get("client")
        if peer and self._trusted_proxies and in_networks(peer[0], self._trusted_proxies):
            return True
        if not self._warned_untrusted_proxy:
            self._warned_untrusted_proxy = True
            log.warning(
                "Requests from %s carry X-Forwarded-For or Forwarded, but it is not in "
                "MCP_TRUSTED_PROXIES: every client behind that proxy looks like %s and they "
                "share one rate limit and one stream cap (such requests are no longer exempt "
                "from the rate limit). If the proxy is yours, set MCP_TRUSTED_PROXIES to its "
                "address.",
                draft.client_address,
                draft.client_address,
            )
        return False

    def charge_more(self, draft: Draft, cost: int) -> None:
        """Charge ``cost`` more requests to a caller already admitted (the messages of a
        batch past its first), under the same exemptions as :meth:`_charge`."""
        if cost > 0 and (draft.subject is not None or not self._exempt(draft.client_address)):
            self.limiter.check(self.key(draft), cost)

    def _exempt(self, address: str | None) -> bool:
        """Anonymous callers from MCP_RATE_LIMIT_EXEMPT (loopback by default) are not rate
        limited: local tools and benchmarks; behind a proxy, trusted proxies make the real
        client address visible, so remote clients are still limited."""
        if address is None:
            return False
        exempt = self._exempt_memo.get(address)
        if exempt is None:  # addresses repeat: each is parsed once
            exempt = self._exempt_memo.remember(
                address, in_networks(address, self._exempt_networks)
            )
        return exempt

    @staticmethod
    def key(draft: Draft) -> str:
        return client_key(draft.subject, draft.client_address)

    def require_item(self, principal: Principal, scopes: Sequence[str]) -> None:
        """403 ``insufficient_scope`` unless the caller holds what the item it names needs."""
        if scopes:
            self.auth.require(principal, scopes)

    def stream_slot(self, draft: Draft) -> Slot:
        """A slot for one long-lived stream of this client (429 past the cap; :meth:`settle`)."""
        return self.streams.acquire(self.key(draft))

    def session_slot(self, draft: Draft) -> Slot:
        """A slot for one more legacy session of this client (as :meth:`stream_slot`)."""
        return self.sessions.acquire(self.key(draft))

    async def settle(
        self, draft: Draft, *slots: Slot, message: Incoming = None, late: bool = False
    ) -> None:
        """With Redis: the due rate counted, ``slots`` taken there too, in one store call
        (:meth:`~server.security.shared_limits.SharedLimits.settle_for`)."""
        if self.shared is not None:
            await self.shared.settle_for(draft, slots, message, late=late)

    def session_started(self, session_id: str, slot: Slot) -> None:
        self._session_slots[session_id] = slot

    def session_ended(self, session_id: str) -> None:
        slot = self._session_slots.pop(session_id, None)
        if slot is not None:
            slot.release()

    def metadata_document(self, used: str) -> dict[str, Any] | None:
        """The protected-resource metadata for a request that reached the MCP endpoint's URL
        ``used`` (as the client wrote it: scheme, host and prefix after trusted-proxy
        handling): its ``resource`` is ``used`` unless a setting pins it, and a pinned one that
        differs is logged once, naming both."""
        scopes = sorted({*self._item_scopes(), *self.auth.held_scopes})
        document = protected_resource_document(self.settings, scopes, used)
        if document is not None and document["resource"] != used and not self._resource_warned:
            self._resource_warned = True
            log.warning(
                "The protected-resource metadata names the pinned resource %s "
                "(MCP_AUTH_RESOURCE, else MCP_AUTH_AUDIENCE), but a client reached this "
                "server at %s: clients that compare the two will refuse it",
                document["resource"],
                used,
            )
        return document

    def headers(self, error: McpError, scope: Scope, host: str | None) -> list[tuple[bytes, bytes]]:
        """The response headers a refusal needs besides its JSON-RPC body."""
        if isinstance(error, AuthError):
            url = None
            if host and self.serves_metadata:
                # The scope's root_path is where the app answers: MCP_ROOT_PATH under uvicorn,
                # and the mount prefix (with the host's own) when a host app mounts it.
                root = scope.get("root_path") or self.settings.root_path
                url = metadata_url(scope.get("scheme", "http"), host, root, self.settings.path)
            return [(b"www-authenticate", error.www_authenticate(url).encode("latin-1"))]
        return retry_headers(error)


# -- from the settings ----------------------------------------------------------------------


def check_auth_mode(settings: Settings, tokens: list[TokenEntry] | None = None) -> list[str]:
    """Startup check of the authentication settings (``tokens``: :func:`static_tokens`, read
    here when not given): ConfigurationError for a configuration that must not run, and the
    warnings (to log loudly) for one that runs but deserves attention."""
    warnings: list[str] = []
    mode = settings.auth
    if mode == "none":
        configured = [name for name in AUTH_ONLY if getattr(settings, name)]
        if configured:
            # Someone meant to authenticate: serving openly instead would be the worst outcome.
            variables = ", ".join(f"MCP_{name.upper()}" for name in configured)
            verb = "is" if len(configured) == 1 else "are"
            raise ConfigurationError(
                f"MCP_AUTH=none but {variables} {verb} set, so the server would be open to "
                "anyone: "
                f"set MCP_AUTH={'jwt' if 'auth_tokens' not in configured else 'tokens'} to "
                f"check them, or remove {variables}"
            )
        if not is_loopback(settings.host):
            if not settings.auth_allow_none_non_loopback:
                raise ConfigurationError(
                    f"MCP_AUTH=none with MCP_HOST={settings.host}: anyone who reaches the port "
                    "could call every tool. Set MCP_AUTH=tokens or jwt, bind to 127.0.0.1, or "
                    "set MCP_AUTH_ALLOW_NONE_NON_LOOPBACK=true for a private deployment with "
                    "its own gate in front"
                )
            warnings.append(
                f"!!! AUTHENTICATION IS OFF on {settings.host} (MCP_AUTH=none, "
                "MCP_AUTH_ALLOW_NONE_NON_LOOPBACK=true): every client that reaches this port "
                "can call every tool. Only run this behind a gate that authenticates. !!!"
            )
        return warnings
    try:
        check_scope_tokens([*settings.auth_required_scopes, *settings.auth_token_scopes])
    except ValueError as bad:
        raise ConfigurationError(
            f"MCP_AUTH_REQUIRED_SCOPES or MCP_AUTH_TOKEN_SCOPES: {bad}; use OAuth scope names"
        ) from bad
    if mode == "tokens":
        entries = static_tokens(settings) if tokens is None else tokens
        if not entries:
            raise ConfigurationError(
                "MCP_AUTH=tokens needs MCP_AUTH_TOKENS or MCP_AUTH_TOKENS_FILE (python -m "
                "server token prints one)"
            )
        if {entry.digest for entry in entries} == {PLACEHOLDER_DIGEST}:
            warnings.append(
                "MCP_AUTH_TOKENS holds only the placeholder digest of the examples, which "
                "matches no token: every request will be refused with 401 (python -m server "
                "token prints a real one)"
            )
        held: set[str] = set()
        for entry in entries:
            held.update(settings.auth_token_scopes if entry.scopes is None else entry.scopes)
        lacking = set(settings.auth_required_scopes) - held
        if lacking:
            warnings.append(
                "MCP_AUTH_REQUIRED_SCOPES names scopes no static token holds "
                f"({' '.join(sorted(lacking))}): every request will be refused with 403"
            )
        return warnings
    if not settings.auth_issuer or not settings.auth_audience:
        raise ConfigurationError("MCP_AUTH=jwt needs MCP_AUTH_ISSUER and MCP_AUTH_AUDIENCE")
    if bool(settings.auth_jwks_file) == bool(settings.auth_jwks_url):
        raise ConfigurationError(
            "MCP_AUTH=jwt needs exactly one of MCP_AUTH_JWKS_FILE, MCP_AUTH_JWKS_URL"
        )
    if settings.auth_jwks_url:
        url = urlsplit(settings.auth_jwks_url)
        if url.scheme != "https" and not (url.scheme == "http" and is_loopback(url.hostname or "")):
            raise ConfigurationError("MCP_AUTH_JWKS_URL must be https (http only on loopback)")
    return warnings


def build_authenticator(
    settings: Settings, tokens: list[TokenEntry] | None = None
) -> Authenticator:
    """The authenticator ``MCP_AUTH`` names (call :func:`check_auth_mode` first)."""
    if settings.auth == "none":
        return NoAuth()
    if settings.auth == "tokens":
        return StaticTokens(
            static_tokens(settings) if tokens is None else tokens,
            settings.auth_token_scopes,
            settings.auth_required_scopes,
        )
    # PyJWT, its cryptography and httpx load only when tokens are JWTs.
    from server.security.jwt import JwksCache, JwtAuthenticator, file_loader, url_loader

    load = (
        file_loader(settings.auth_jwks_file)
        if settings.auth_jwks_file
        else url_loader(settings.auth_jwks_url)
    )
    return JwtAuthenticator(
        JwksCache(
            load,
            refresh_s=settings.auth_jwks_refresh_s,
            min_refresh_s=settings.auth_jwks_min_refresh_s,
        ),
        issuer=settings.auth_issuer,
        audience=settings.auth_audience,
        algorithms=settings.auth_algorithms,
        leeway_s=settings.auth_leeway_s,
        required_scopes=settings.auth_required_scopes,
        tenant_claim=settings.auth_tenant_claim,
        default_tenant=(
            settings.auth_default_tenant if settings.auth_tenant_missing == "default" else None
        ),
    )


def static_tokens(settings: Settings) -> list[TokenEntry]:
    """``MCP_AUTH_TOKENS`` (parsed by the settings) and ``MCP_AUTH_TOKENS_FILE``'s entries,
    checked together (:func:`~server.security.auth.with_tokens_file`)."""
    return with_tokens_file(settings.token_entries, settings.auth_tokens_file)


def serves_metadata(settings: Settings) -> bool:
    """Whether the metadata is served (auth on, an authorization server known): decided once."""
    return settings.auth != "none" and bool(settings.auth_servers or settings.auth_issuer)


def protected_resource_document(
    settings: Settings, scopes: Iterable[str] = (), used: str = ""
) -> dict[str, Any] | None:
    """The document this configuration serves, or None when there is none to serve.

    Its ``resource`` is pinned by ``MCP_AUTH_RESOURCE`` (else ``MCP_AUTH_AUDIENCE``, which a
    token's ``aud`` must hold), and is otherwise ``used``: the MCP endpoint's URL as the client
    reached it (RFC 9728: the resource the client used).

    ``scopes``: the catalog items' and the named tokens' scopes, listed in ``scopes_supported``
    with the required scopes (and in tokens mode ``MCP_AUTH_TOKEN_SCOPES``). None when not
    :func:`serves_metadata` (no ``MCP_AUTH_SERVERS`` nor ``MCP_AUTH_ISSUER``) or no resource
    is pinned nor ``used``: the paths answer 404, challenges carry no ``resource_metadata``.
    """
    resource = settings.auth_resource or settings.auth_audience or used
    if not serves_metadata(settings) or not resource:
        return None
    servers = settings.auth_servers or [settings.auth_issuer]
    supported = {*settings.auth_required_scopes, *scopes}
    if settings.auth == "tokens":
        supported.update(settings.auth_token_scopes)
    return resource_metadata(resource, servers, sorted(supported))
