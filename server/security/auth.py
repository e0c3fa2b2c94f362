"""Authentication for the MCP endpoint: who is calling, and whether they may do this.

The server is an OAuth resource server. An :class:`Authenticator` turns a request's
``Authorization: Bearer`` header into a :class:`Principal` or raises an :class:`AuthError`
with its status and exact ``WWW-Authenticate`` value: ``Unauthenticated`` (401, -32001),
``InsufficientScope`` (403, -32001, ``data.scope`` the scopes needed), ``InvalidAuthRequest``
(400, -32600: a malformed header or a token in the query string); docs/errors.md has the
table. The token never appears in an error, a log line or the principal. Modes
(``MCP_AUTH``): ``none`` (:data:`ANONYMOUS`), ``tokens`` (SHA-256 digests,
:class:`StaticTokens`), ``jwt`` (:mod:`server.security.jwt`); :mod:`server.security.gate`
chooses, the one module here that reads the settings.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol
from urllib.parse import parse_qsl

from server.errors import INVALID_REQUEST, ConfigurationError, McpError
from server.settings_checks import TokenEntry, check_token_entries, token_entry, token_file_entries

AUTH_ERROR = -32001

# RFC 6750 section 2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# "Bearer" 1*SP b64token; the scheme is matched without case (RFC 9110 section 11.1).
_CREDENTIALS = re.compile(r"([A-Za-z0-9!#$%&'*+.^_`|~\-]+)(?: +(.*))?", re.DOTALL)
# RFC 6749 scope-token = 1*( %x21 / %x23-5B / %x5D-7E ): no space, quote or backslash.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a subject (never the token), its scopes, and the verified claims."""

    subject: str
    scopes: frozenset[str]
    claims: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    # Who the caller belongs to (a named token's tenant, a JWT's tenant claim), if anyone.
    tenant: str | None = None

    @property
    def anonymous(self) -> bool:
        return self is ANONYMOUS


ANONYMOUS = Principal("anonymous", frozenset())


# -- errors --------------------------------------------------------------------------------


def _quoted(value: str) -> str:
    """An RFC 9110 quoted-string: control characters dropped, quote and backslash escaped."""
    cleaned = "".join(ch for ch in value if 0x20 <= ord(ch) < 0x7F)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


class AuthError(McpError):
    """An authentication failure; :meth:`www_authenticate` is the header value to send."""

    code = AUTH_ERROR
    status = 401
    # The order of the WWW-Authenticate parameters for this class.
    order: ClassVar[tuple[str, ...]] = (
        "resource_metadata",
        "scope",
        "error",
        "error_description",
    )

    def __init__(
        self,
        message: str,
        *,
        error: str | None = None,
        description: str | None = None,
        scopes: Iterable[str] = (),
    ) -> None:
        self.error = error
        self.description = description
        self.scopes = tuple(sorted(set(scopes)))
        data: dict[str, str] = {}
        if error:
            data["error"] = error
        if description:
            data["error_description"] = description
        if self.scopes:
            data["scope"] = " ".join(self.scopes)
        super().__init__(message, data or None)

    def www_authenticate(self, resource_metadata: str | None) -> str:
        """The ``WWW-Authenticate`` value; ``resource_metadata`` is left out when None."""
        values = {
            "resource_metadata": resource_metadata,
            "scope": " ".join(self.scopes) or None,
            "error": self.error,
            "error_description": self.description,
        }
        params = [f"{name}={_quoted(values[name] or '')}" for name in self.order if values[name]]
        return "Bearer " + ", ".join(params) if params else "Bearer"


class Unauthenticated(AuthError):
    """401: no Bearer token (no ``error``), or one that is not valid (``invalid_token``)."""


class InsufficientScope(AuthError):
    """403: the token is good but lacks scopes; ``scopes`` lists every scope needed."""

    status = 403
    order = ("error", "scope", "resource_metadata", "error_description")

    def __init__(self, needed: Iterable[str], held: Iterable[str] = ()) -> None:
        needed = sorted(set(needed))
        missing = sorted(set(needed) - set(held))
        super().__init__(
            f"Insufficient scope: missing {' '.join(missing)}",
            error="insufficient_scope",
            scopes=needed,
        )


class NoTenant(AuthError):
    """403: a good token that names no tenant, where the server serves tenants only
    (``MCP_AUTH_TENANT_CLAIM`` with ``MCP_AUTH_TENANT_MISSING=reject``)."""

    status = 403
    order = ("error", "error_description", "resource_metadata")

    def __init__(self, claim: str) -> None:
        description = f"The token has no {claim} claim: this server serves callers of a tenant"
        super().__init__(description, error="insufficient_scope", description=description)


class InvalidAuthRequest(AuthError):
    """400: a malformed ``Authorization`` header or a token in the query string."""

    code = INVALID_REQUEST
    status = 400
    order = ("error", "error_description", "resource_metadata")

    def __init__(self, description: str) -> None:
        super().__init__(description, error="invalid_request", description=description)


# -- reading the request -------------------------------------------------------------------


def single_authorization(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The ``Authorization`` value of ASGI ``headers``; 400 when it is sent more than once."""
    found = [value for name, value in headers if name.lower() == b"authorization"]
    if len(found) > 1:
        raise InvalidAuthRequest("More than one Authorization header")
    return found[0].decode("latin-1") if found else None


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Bearer <token>``; None without one or for another scheme; 400 if bad."""
    if authorization is None or not authorization.strip(" \t"):
        return None
    found = _CREDENTIALS.fullmatch(authorization.strip(" \t"))
    if found is None:
        raise InvalidAuthRequest("Malformed Authorization header")
    if found[1].lower() != "bearer":
        return None
    token = found[2] or ""
    if not _B64TOKEN.fullmatch(token):
        raise InvalidAuthRequest("Malformed Bearer credentials")
    return token


def refuse_query_token(query_string: bytes) -> None:
    """400 for ``access_token`` in the query string (RFC 6750 section 2.3, forbidden by MCP)."""
    # Most requests have no query at all. find(), not ``in``: bytes' ``in`` first tries its
    # operand as an integer, raising and clearing a TypeError (twice the cost).
    if not query_string or (
        query_string.lower().find(b"access_token") < 0 and query_string.find(b"%") < 0
    ):
        return
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    if any(name.strip().lower() == "access_token" for name, _ in pairs):
        raise InvalidAuthRequest("Access tokens are accepted only in the Authorization header")


def check_scope_tokens(scopes: Iterable[str]) -> None:
    """ValueError for a scope that cannot be a scope token (space, quote, backslash, ...)."""
    bad = [scope for scope in scopes if not _SCOPE_TOKEN.fullmatch(scope)]
    if bad:
        raise ValueError(f"not valid OAuth scope names: {bad!r}")


# -- authenticators ------------------------------------------------------------------------


class Authenticator(Protocol):
    """What the endpoint calls on every request (both eras; there is no trust per session)."""

    mode: str
    required_scopes: frozenset[str]
    # Every scope some token of this server holds, when it knows (static tokens): advertised.
    held_scopes: frozenset[str]

    async def authenticate(self, authorization: str | None, query_string: bytes) -> Principal:
        """The caller; raises :class:`AuthError` (400, 401, 403) or, in jwt mode, 503 when the
        signing keys cannot be loaded."""

    def require(self, principal: Principal, scopes: Iterable[str]) -> None:
        """Raise :class:`InsufficientScope` unless ``principal`` holds ``scopes`` and the
        endpoint's required scopes; the error lists all of them."""


class NoAuth:
    """``MCP_AUTH=none``: everyone is :data:`ANONYMOUS` and every scope check passes."""

    mode = "none"
    required_scopes: frozenset[str] = frozenset()
    held_scopes: frozenset[str] = frozenset()

    async def authenticate(self, authorization: str | None, query_string: bytes) -> Principal:
        return ANONYMOUS

    def require(self, principal: Principal, scopes: Iterable[str]) -> None:
        return None


class BearerAuthenticator:
    """The shared flow of the token modes; subclasses implement :meth:`verify`."""

    mode = "bearer"
    # What a request without a token is told (the 401's JSON-RPC message).
    missing = "Authentication required"
    held_scopes: frozenset[str] = frozenset()  # a JWT's are the authorization server's

    def __init__(self, required_scopes: Iterable[str] = ()) -> None:
        self.required_scopes = frozenset(required_scopes)
        check_scope_tokens(self.required_scopes)

    async def authenticate(self, authorization: str | None, query_string: bytes) -> Principal:
        refuse_query_token(query_string)  # even with a header: the token has leaked into URLs
        token = bearer_token(authorization)
        if token is None:
            raise Unauthenticated(self.missing, scopes=self.required_scopes)
        principal = await self.verify(token)
        self.require(principal, ())
        return principal

    async def verify(self, token: str) -> Principal:
        raise NotImplementedError

    def invalid(self, description: str) -> Unauthenticated:
        """The 401 for a token that was sent but is not good; ``description`` is public."""
        return Unauthenticated(
            "Invalid access token: " + description,
            error="invalid_token",
            description=description,
            scopes=self.required_scopes,
        )

    def require(self, principal: Principal, scopes: Iterable[str]) -> None:
        needed = self.required_scopes.union(scopes)
        if not needed <= principal.scopes:
            check_scope_tokens(needed)
            raise InsufficientScope(needed, principal.scopes)


def token_digest(token: str) -> str:
    """The ``sha256:<hex>`` line for ``MCP_AUTH_TOKENS`` that accepts ``token``."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """A new random token (256 bits, URL-safe) and its digest for ``MCP_AUTH_TOKENS``."""
    token = secrets.token_urlsafe(32)
    return token, token_digest(token)


class StaticTokens(BearerAuthenticator):
    """``MCP_AUTH=tokens``: tokens known only by their SHA-256 digests, each with a name, a
    tenant and scopes of its own if its entry says so (else ``token:<8 hex>`` and the shared
    ``scopes``).

    The presented token is hashed and compared with every digest in constant time
    (``hmac.compare_digest``, no early exit), so timing tells nothing about which matched.
    """

    mode = "tokens"
    # No OAuth here: a client that would try it (mcp-remote registers a client first) and a
    # person reading its error learn what to send instead.
    missing = (
        "Authentication required: send the header 'Authorization: Bearer <token>' with a "
        "token from this server's operator (static tokens: this server has no OAuth "
        "authorization server, nothing to sign in or register with)"
    )

    def __init__(
        self,
        digests: Iterable[str | TokenEntry],
        scopes: Iterable[str] = (),
        required_scopes: Iterable[str] = (),
    ) -> None:
        super().__init__(required_scopes)
        self.scopes = frozenset(scopes)
        check_scope_tokens(self.scopes)
        entries = [e if isinstance(e, TokenEntry) else token_entry(e) for e in digests]
        if not entries:
            raise ValueError("MCP_AUTH=tokens needs at least one digest in MCP_AUTH_TOKENS")
        self.digests: tuple[bytes, ...] = tuple(_parse_digest(e.digest) for e in entries)
        self.principals: dict[bytes, Principal] = {
            digest: Principal(
                entry.name or "token:" + digest.hex()[:8],
                self.scopes if entry.scopes is None else frozenset(entry.scopes),
                tenant=entry.tenant,
            )
            for digest, entry in zip(self.digests, entries, strict=True)
        }
        self.held_scopes = frozenset().union(*(p.scopes for p in self.principals.values()))

    async def verify(self, token: str) -> Principal:
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        matched = b""
        for digest in self.digests:
            if hmac.compare_digest(presented, digest):
                matched = digest
        if not matched:
            raise self.invalid("The token is not recognised")
        return self.principals[matched]


def _parse_digest(line: str) -> bytes:
    algorithm, _, hexdigest = line.strip().partition(":")
    if algorithm.lower() != "sha256" or not re.fullmatch(r"[0-9a-fA-F]{64}", hexdigest):
        raise ValueError("MCP_AUTH_TOKENS holds sha256:<64 hex digits> digests")
    return bytes.fromhex(hexdigest)


def with_tokens_file(entries: list[TokenEntry], path: str) -> list[TokenEntry]:
    """``entries`` and those of the tokens file at ``path`` (``MCP_AUTH_TOKENS_FILE``; none
    when it is ""), checked together; ConfigurationError naming the file and line of a bad
    one."""
    if not path:
        return entries
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(1024 * 1024 + 1)
    except OSError as failure:
        raise ConfigurationError(
            f"MCP_AUTH_TOKENS_FILE: cannot read {path}: {failure.strerror or failure}"
        ) from None
    if len(text) > 1024 * 1024:
        raise ConfigurationError(f"MCP_AUTH_TOKENS_FILE: {path} is over 1 MiB")
    try:
        entries = entries + token_file_entries(text, path)
        check_token_entries(entries, "MCP_AUTH_TOKENS and MCP_AUTH_TOKENS_FILE")
    except ValueError as bad:
        raise ConfigurationError(str(bad)) from None
    return entries
