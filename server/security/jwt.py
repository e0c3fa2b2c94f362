"""``MCP_AUTH=jwt``: OAuth access tokens (JWTs) verified against the issuer's JWKS.

A token passes only with an allowed asymmetric ``alg`` (never ``none`` or HS*), a signing key in
the JWKS that fits it, a valid signature, ``iss`` equal to ``MCP_AUTH_ISSUER``, ``aud``
holding ``MCP_AUTH_AUDIENCE`` (RFC 8707), ``exp`` in the future and ``nbf``/``iat`` not ahead
(``MCP_AUTH_LEEWAY_S``), and a non-empty ``sub``; scopes from ``scope`` and ``scp``. PyJWT does
the cryptography. :class:`JwksCache` loads the keys on first use, reloads them every
``MCP_AUTH_JWKS_REFRESH_S`` and early for an unknown ``kid``, never sooner than
``MCP_AUTH_JWKS_MIN_REFRESH_S`` after the last try; a failed reload keeps the old keys, and
with none at all requests get 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import jwt

from server.errors import INTERNAL_ERROR, McpError
from server.security.auth import BearerAuthenticator, NoTenant, Principal

log = logging.getLogger(__name__)

Loader = Callable[[], Awaitable[bytes]]
MAX_JWKS_BYTES = 1024 * 1024
MAX_TOKEN_CHARS = 16 * 1024

# alg -> (kty, curves allowed; empty: any). Kept in step with settings_checks.ASYMMETRIC_ALGORITHMS.
KEY_TYPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "RS256": ("RSA", ()),
    "RS384": ("RSA", ()),
    "RS512": ("RSA", ()),
    "PS256": ("RSA", ()),
    "PS384": ("RSA", ()),
    "PS512": ("RSA", ()),
    "ES256": ("EC", ("P-256",)),
    "ES384": ("EC", ("P-384",)),
    "ES512": ("EC", ("P-521",)),
    "EdDSA": ("OKP", ("Ed25519", "Ed448")),
}


class JwksUnavailable(McpError):
    """No signing keys could be loaded: the server's problem, so 503 (not 401)."""

    code = INTERNAL_ERROR
    status = 503


def file_loader(path: str) -> Loader:
    async def load() -> bytes:
        data = await asyncio.to_thread(Path(path).read_bytes)
        if len(data) > MAX_JWKS_BYTES:
            raise ValueError(f"{path} is larger than {MAX_JWKS_BYTES} bytes")
        return data

    return load


def url_loader(
    url: str, *, timeout_s: float = 10.0, transport: httpx.AsyncBaseTransport | None = None
) -> Loader:
    """GET ``url`` (no redirects, size-capped); ``transport`` lets tests answer in-process."""

    async def load() -> bytes:
        async with (
            httpx.AsyncClient(
                timeout=timeout_s, follow_redirects=False, transport=transport
            ) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise ValueError(f"the JWKS at {url} is larger than {MAX_JWKS_BYTES} bytes")
            return bytes(body)

    return load


def parse_jwks(data: bytes) -> list[dict[str, Any]]:
    """The signature keys of a JWKS document (public-key types only); ValueError if none."""
    document = json.loads(data)
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ValueError("not a JWKS document (no keys list)")
    usable = [
        key
        for key in keys
        if isinstance(key, dict)
        and key.get("kty") in ("RSA", "EC", "OKP")
        and key.get("use") in (None, "sig")
        and "d" not in key  # a private key published by mistake is not used
    ]
    if not usable:
        raise ValueError("the JWKS holds no public signature keys")
    return usable


def fits(jwk: dict[str, Any], alg: str) -> bool:
    """Whether ``jwk`` may verify a signature made with ``alg``."""
    kty, curves = KEY_TYPES.get(alg, ("", ()))
    if jwk.get("kty") != kty or (curves and jwk.get("crv") not in curves):
        return False
    if jwk.get("alg") not in (None, alg):
        return False
    ops = jwk.get("key_ops")
    return ops is None or (isinstance(ops, list) and "verify" in ops)


class JwksCache:
    """The issuer's signing keys, loaded lazily and refreshed (see the module docstring)."""

    def __init__(
        self,
        load: Loader,
        *,
        refresh_s: float = 3600.0,
        min_refresh_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.refresh_s = refresh_s
        self.min_refresh_s = min_refresh_s
        self._clock = clock
        self._keys: list[dict[str, Any]] = []
        self._built: dict[tuple[int, str], jwt.PyJWK] = {}
        self._loaded_at: float | None = None
        self._attempted_at: float | None = None
        self._lock = asyncio.Lock()
        self.loads = 0  # load attempts, for tests and metrics

    def _may_load(self, now: float) -> bool:
        return self._attempted_at is None or now - self._attempted_at >= self.min_refresh_s

    def _stale(self, now: float) -> bool:
        return self._loaded_at is None or now - self._loaded_at >= self.refresh_s

    async def _reload(self, due: Callable[[float], bool]) -> None:
        async with self._lock:  # one load at a time; waiters re-check and usually skip
            now = self._clock()
            if not due(now):
                return
            self._attempted_at = now
            self.loads += 1
            try:
                keys = parse_jwks(await self._load())
            except (OSError, ValueError, httpx.HTTPError) as failure:
                log.warning(
                    "loading the JWKS failed (keeping %d keys): %s", len(self._keys), failure
                )
                return
            self._keys, self._built, self._loaded_at = keys, {}, self._clock()

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        """The key to verify a token with header ``kid``/``alg``; None when there is none."""
        now = self._clock()
        # While one request reloads stale keys, the others go on with the old ones.
        busy = bool(self._keys) and self._lock.locked()
        if self._stale(now) and self._may_load(now) and not busy:
            await self._reload(lambda t: self._stale(t) and self._may_load(t))
        if not self._keys:
            raise JwksUnavailable("The token signing keys are unavailable")
        index = self._find(kid, alg)
        if index is None and kid is not None and not self._known(kid):
            await self._reload(self._may_load)  # perhaps rotated in since the last load
            index = self._find(kid, alg)
        return None if index is None else self._build(index, alg)

    def _known(self, kid: str) -> bool:
        return any(jwk.get("kid") == kid for jwk in self._keys)

    def _find(self, kid: str | None, alg: str) -> int | None:
        found = [
            index
            for index, jwk in enumerate(self._keys)
            if (kid is None or jwk.get("kid") == kid) and fits(jwk, alg)
        ]
        # Without a kid, only a key set with a single candidate is unambiguous.
        if not found or (kid is None and len(found) != 1):
            return None
        return found[0]

    def _build(self, index: int, alg: str) -> jwt.PyJWK | None:
        built = self._built.get((index, alg))
        if built is None:
            try:
                built = jwt.PyJWK(self._keys[index], algorithm=alg)
            except jwt.PyJWTError as failure:
                log.warning("JWKS key %s is unusable: %s", self._keys[index].get("kid"), failure)
                return None
            self._built[(index, alg)] = built
        return built


def scopes_of(claims: dict[str, Any]) -> frozenset[str]:
    """Scopes from ``scope`` (space-separated string) and ``scp`` (list or string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str) and item)
    return frozenset(found)


_FAILURES: list[tuple[type[jwt.PyJWTError], str]] = [
    (jwt.ExpiredSignatureError, "The token has expired"),
    (jwt.ImmatureSignatureError, "The token is not yet valid"),
    (jwt.InvalidAudienceError, "The token was not issued for this resource"),
    (jwt.InvalidIssuerError, "The token issuer is not accepted"),
    (jwt.InvalidAlgorithmError, "The token algorithm is not accepted"),
    (jwt.InvalidSignatureError, "The token signature is invalid"),
    (jwt.MissingRequiredClaimError, "The token lacks a required claim"),
    (jwt.InvalidKeyError, "The token signing key is not acceptable"),
]


class JwtAuthenticator(BearerAuthenticator):
    """Bearer JWT access tokens, verified as the module docstring lists."""

    mode = "jwt"

    def __init__(
        self,
        jwks: JwksCache,
        *,
        issuer: str,
        audience: str,
        algorithms: Iterable[str] = ("RS256", "ES256"),
        leeway_s: float = 30.0,
        required_scopes: Iterable[str] = (),
        tenant_claim: str = "",
        default_tenant: str | None = None,
    ) -> None:
        super().__init__(required_scopes)
        # Where a caller's tenant is (a claim), and what a token without it gets: the
        # default tenant, or (None) a 403.
        self.tenant_claim = tenant_claim
        self.default_tenant = default_tenant
        self.algorithms = frozenset(algorithms)
        refused = sorted(self.algorithms - KEY_TYPES.keys())
        if refused or not self.algorithms:
            raise ValueError(f"JWT algorithms not accepted (asymmetric only): {refused}")
        if not issuer or not audience:
            raise ValueError("JWT verification needs an issuer and an audience")
        self.jwks = jwks
        self.issuer = issuer
        self.audience = audience
        self.leeway_s = leeway_s

    async def verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_CHARS:
            raise self.invalid("The token is too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise self.invalid("The token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise self.invalid("The token algorithm is not accepted")
        if kid is not None and not isinstance(kid, str):
            raise self.invalid("The token is not a well-formed JWT")
        key = await self.jwks.key(kid, alg)
        if key is None:
            raise self.invalid("The token signing key is unknown")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={
                    "require": ["exp", "iss", "aud", "sub"],
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt.PyJWTError as failure:
            description = next(
                (text for kind, text in _FAILURES if isinstance(failure, kind)),
                "The token is not valid",
            )
            raise self.invalid(description) from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise self.invalid("The token lacks a required claim")
        tenant = None
        if self.tenant_claim:
            tenant = claims.get(self.tenant_claim)
            if not isinstance(tenant, str) or not tenant:
                if self.default_tenant is None:
                    raise NoTenant(self.tenant_claim)
                tenant = self.default_tenant
        return Principal(subject, scopes_of(claims), MappingProxyType(claims), tenant)
