"""server.security.jwt: JWT access tokens against a local JWKS, with locally generated keys.

Each refusal is checked for its status and its exact WWW-Authenticate value; the JWKS cache
is driven with an injected clock and an in-process loader (no sockets).
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from server.errors import http_status
from server.security.auth import InsufficientScope, InvalidAuthRequest, NoTenant, Unauthenticated
from server.security.gate import build_authenticator
from server.security.jwt import (
    KEY_TYPES,
    JwksCache,
    JwksUnavailable,
    JwtAuthenticator,
    file_loader,
    parse_jwks,
    scopes_of,
    url_loader,
)
from server.settings import Settings
from server.settings_checks import ASYMMETRIC_ALGORITHMS

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.com"
AUDIENCE = "https://mcp.example.com/mcp"
META = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(scope="module")
def keys():
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa-other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec": ec.generate_private_key(ec.SECP256R1()),
        "weak": rsa.generate_private_key(public_exponent=65537, key_size=1024),
    }


def public_jwk(private_key, kid, **extra):
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, **extra}


@pytest.fixture(scope="module")
def jwks(keys):
    return {
        "keys": [
            public_jwk(keys["rsa"], "rsa-1", use="sig", alg="RS256"),
            public_jwk(keys["ec"], "ec-1"),
            public_jwk(keys["weak"], "weak-1"),
        ]
    }


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Source:
    """An in-process JWKS loader that counts its loads; ``fail`` makes the next loads fail."""

    def __init__(self, document):
        self.document = document
        self.loads = 0
        self.fail = False

    async def __call__(self):
        self.loads += 1
        await asyncio.sleep(0)
        if self.fail:
            raise OSError("unreachable")
        return json.dumps(self.document).encode()


def claims(**overrides):
    now = int(time.time())
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "exp": now + 300,
        "iat": now,
        "scope": "mcp files:read",
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(private_key, kid="rsa-1", alg="RS256", **overrides):
    headers = {"kid": kid} if kid else {}
    return jwt.encode(claims(**overrides), private_key, algorithm=alg, headers=headers)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header, payload, signature=b""):
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(payload).encode())
    return head + "." + b64(signature)


def make(document, *, clock=None, required=(), algorithms=("RS256", "ES256"), min_refresh_s=30):
    source = Source(document)
    cache = JwksCache(source, refresh_s=3600, min_refresh_s=min_refresh_s, clock=clock or Clock())
    authenticator = JwtAuthenticator(
        cache,
        issuer=ISSUER,
        audience=AUDIENCE,
        algorithms=algorithms,
        leeway_s=30,
        required_scopes=required,
    )
    return authenticator, source


async def refused(authenticator, token, description):
    with pytest.raises(Unauthenticated) as caught:
        await authenticator.authenticate(f"Bearer {token}", b"")
    error = caught.value
    assert (http_status(error, "modern"), http_status(error, "legacy")) == (401, 401)
    assert error.error == "invalid_token"
    assert error.description == description
    assert error.www_authenticate(META) == (
        f'Bearer resource_metadata="{META}", error="invalid_token", '
        f'error_description="{description}"'
    )
    assert token not in str(error.to_wire())
    return error


# -- accepted ------------------------------------------------------------------------------


async def test_valid_rs256_token(keys, jwks):
    authenticator, _ = make(jwks)
    principal = await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    assert principal.subject == "alice"
    assert principal.scopes == {"mcp", "files:read"}
    assert principal.claims["iss"] == ISSUER
    with pytest.raises(TypeError):
        principal.claims["sub"] = "mallory"


async def test_valid_es256_token(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["ec"], kid="ec-1", alg="ES256", scope=None, scp=["a", "b"])
    assert (await authenticator.authenticate(f"bearer {token}", b"")).scopes == {"a", "b"}


async def test_audience_list_containing_this_server(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["rsa"], aud=["https://other.example", AUDIENCE])
    assert (await authenticator.authenticate(f"Bearer {token}", b"")).subject == "alice"


async def test_expiry_within_leeway_is_accepted(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["rsa"], exp=int(time.time()) - 10)
    assert (await authenticator.authenticate(f"Bearer {token}", b"")).subject == "alice"


async def test_token_without_kid_and_a_single_fitting_key(keys, jwks):
    authenticator, _ = make({"keys": [public_jwk(keys["rsa"], "only")]})
    assert await authenticator.authenticate(f"Bearer {sign(keys['rsa'], kid=None)}", b"")


async def test_ps256_with_an_rsa_key_without_alg(keys):
    authenticator, _ = make({"keys": [public_jwk(keys["rsa"], "r")]}, algorithms=["PS256"])
    token = sign(keys["rsa"], kid="r", alg="PS256")
    assert (await authenticator.authenticate(f"Bearer {token}", b"")).subject == "alice"


def test_scopes_of():
    assert scopes_of({"scope": "a  b"}) == {"a", "b"}
    assert scopes_of({"scp": ["a", 3, "", "b"]}) == {"a", "b"}
    assert scopes_of({"scp": "a b"}) == {"a", "b"}
    assert scopes_of({"scope": "a", "scp": ["b"]}) == {"a", "b"}
    assert scopes_of({"scope": 5}) == frozenset()


# -- refused: claims -----------------------------------------------------------------------


async def test_expired(keys, jwks):
    authenticator, _ = make(jwks)
    await refused(
        authenticator, sign(keys["rsa"], exp=int(time.time()) - 120), "The token has expired"
    )


async def test_not_yet_valid(keys, jwks):
    authenticator, _ = make(jwks)
    await refused(
        authenticator, sign(keys["rsa"], nbf=int(time.time()) + 600), "The token is not yet valid"
    )


@pytest.mark.parametrize(
    "audience", ["https://other.example/mcp", ["https://a.example"], AUDIENCE + "/"]
)
async def test_wrong_audience(keys, jwks, audience):
    authenticator, _ = make(jwks)
    await refused(
        authenticator,
        sign(keys["rsa"], aud=audience),
        "The token was not issued for this resource",
    )


async def test_wrong_issuer(keys, jwks):
    authenticator, _ = make(jwks)
    await refused(
        authenticator,
        sign(keys["rsa"], iss="https://evil.example"),
        "The token issuer is not accepted",
    )


@pytest.mark.parametrize("missing", ["exp", "aud", "iss", "sub"])
async def test_required_claims(keys, jwks, missing):
    authenticator, _ = make(jwks)
    await refused(
        authenticator, sign(keys["rsa"], **{missing: None}), "The token lacks a required claim"
    )


async def test_empty_subject(keys, jwks):
    authenticator, _ = make(jwks)
    await refused(authenticator, sign(keys["rsa"], sub=""), "The token lacks a required claim")


@pytest.mark.parametrize(
    ("token", "description"),
    [
        ("abc", "The token is not a well-formed JWT"),
        ("a.b.c", "The token is not a well-formed JWT"),
        ("e30.e30.", "The token algorithm is not accepted"),  # {} as header: no alg
        ("x" * 20_000, "The token is too long"),
    ],
)
async def test_malformed(jwks, token, description):
    authenticator, source = make(jwks)
    await refused(authenticator, token, description)
    assert source.loads == 0


# -- refused: algorithms and keys ----------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE", ""])
async def test_alg_none(jwks, alg):
    authenticator, _ = make(jwks)
    token = unsigned({"alg": alg, "typ": "JWT", "kid": "rsa-1"}, claims())
    await refused(authenticator, token, "The token algorithm is not accepted")


async def test_hs256_signed_with_the_public_key_is_refused(keys, jwks):
    # Algorithm confusion: an HMAC over the token keyed with the (public) RSA key.
    pem = (
        keys["rsa"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    head = unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims()).rsplit(".", 1)[0]
    mac = hmac.new(pem, head.encode(), hashlib.sha256).digest()
    authenticator, source = make(jwks)
    await refused(authenticator, f"{head}.{b64(mac)}", "The token algorithm is not accepted")
    assert source.loads == 0  # refused before any key is looked up


@pytest.mark.parametrize("algorithms", [["RS256", "HS256"], ["none"], ["HS512"], []])
def test_symmetric_or_none_algorithms_cannot_be_configured(jwks, algorithms):
    with pytest.raises(ValueError, match="algorithms"):
        make(jwks, algorithms=algorithms)


def test_settings_and_verifier_agree_on_algorithms():
    assert set(ASYMMETRIC_ALGORITHMS) == set(KEY_TYPES)


async def test_algorithm_not_on_the_allow_list(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["rsa"], alg="RS384")
    await refused(authenticator, token, "The token algorithm is not accepted")


async def test_rs256_header_naming_an_ec_key(keys, jwks):
    authenticator, source = make(jwks)
    await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    await refused(authenticator, sign(keys["rsa"], kid="ec-1"), "The token signing key is unknown")
    assert source.loads == 1  # a known kid that does not fit is no reason to reload


async def test_key_alg_must_match_the_token_alg(keys, jwks):
    # rsa-1 is published with alg RS256: a PS256 token may not use it even when PS256 is allowed.
    authenticator, _ = make(jwks, algorithms=["RS256", "PS256"])
    token = sign(keys["rsa"], alg="PS256")
    await refused(authenticator, token, "The token signing key is unknown")


async def test_bad_signature(keys, jwks):
    authenticator, _ = make(jwks)
    await refused(authenticator, sign(keys["rsa-other"]), "The token signature is invalid")


async def test_tampered_payload(keys, jwks):
    authenticator, _ = make(jwks)
    head, _, signature = sign(keys["rsa"]).split(".")
    forged = b64(json.dumps(claims(sub="root")).encode())
    await refused(authenticator, f"{head}.{forged}.{signature}", "The token signature is invalid")


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
async def test_weak_rsa_key(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["weak"], kid="weak-1")
    await refused(authenticator, token, "The token signing key is not acceptable")


async def test_no_kid_with_several_fitting_keys(keys):
    document = {"keys": [public_jwk(keys["rsa"], "a"), public_jwk(keys["rsa-other"], "b")]}
    authenticator, _ = make(document)
    await refused(authenticator, sign(keys["rsa"], kid=None), "The token signing key is unknown")


# -- scopes --------------------------------------------------------------------------------


async def test_missing_endpoint_scope_is_403(keys, jwks):
    authenticator, _ = make(jwks, required=["mcp", "admin"])
    with pytest.raises(InsufficientScope) as caught:
        await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    assert http_status(caught.value, "modern") == 403
    assert caught.value.www_authenticate(META) == (
        f'Bearer error="insufficient_scope", scope="admin mcp", resource_metadata="{META}"'
    )


async def test_missing_tool_scope_is_403(keys, jwks):
    authenticator, _ = make(jwks, required=["mcp"])
    principal = await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    authenticator.require(principal, ["files:read"])
    with pytest.raises(InsufficientScope) as caught:
        authenticator.require(principal, ["files:write"])
    assert caught.value.www_authenticate(META) == (
        f'Bearer error="insufficient_scope", scope="files:write mcp", resource_metadata="{META}"'
    )


async def test_missing_token_names_required_scopes(jwks):
    authenticator, source = make(jwks, required=["mcp"])
    with pytest.raises(Unauthenticated) as caught:
        await authenticator.authenticate(None, b"")
    assert caught.value.www_authenticate(META) == f'Bearer resource_metadata="{META}", scope="mcp"'
    assert source.loads == 0


async def test_token_in_query_string(keys, jwks):
    authenticator, _ = make(jwks)
    token = sign(keys["rsa"])
    with pytest.raises(InvalidAuthRequest) as caught:
        await authenticator.authenticate(f"Bearer {token}", f"access_token={token}".encode())
    assert http_status(caught.value, "modern") == 400
    with pytest.raises(InvalidAuthRequest):
        await authenticator.authenticate(None, f"a=1&access_token={token}".encode())


# -- the JWKS cache ------------------------------------------------------------------------


async def test_unknown_kid_reloads_once_then_401(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    assert source.loads == 1
    stranger = sign(keys["rsa"], kid="rotated-in")
    await refused(authenticator, stranger, "The token signing key is unknown")
    assert source.loads == 1  # the keys were loaded just now: reloading would find nothing new
    clock.now += 30
    await refused(authenticator, stranger, "The token signing key is unknown")
    assert source.loads == 2
    for _ in range(20):  # a flood of made-up kids within the interval: no more loads
        await refused(
            authenticator, sign(keys["rsa"], kid="nope"), "The token signing key is unknown"
        )
    assert source.loads == 2
    clock.now += 30
    await refused(authenticator, stranger, "The token signing key is unknown")
    assert source.loads == 3


async def test_concurrent_unknown_kids_load_once(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    clock.now += 60
    tokens = [sign(keys["rsa"], kid=f"k{n}") for n in range(10)]

    async def attempt(token):
        with pytest.raises(Unauthenticated):
            await authenticator.authenticate(f"Bearer {token}", b"")

    await asyncio.gather(*(attempt(token) for token in tokens))
    assert source.loads == 2


async def test_rotated_key_is_found_by_one_reload(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    await authenticator.authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    source.document = {"keys": [*jwks["keys"], public_jwk(keys["rsa-other"], "rsa-2")]}
    clock.now += 31
    token = sign(keys["rsa-other"], kid="rsa-2")
    assert (await authenticator.authenticate(f"Bearer {token}", b"")).subject == "alice"
    assert source.loads == 2


async def test_periodic_refresh(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    token = f"Bearer {sign(keys['rsa'])}"
    await authenticator.authenticate(token, b"")
    clock.now += 3599
    await authenticator.authenticate(token, b"")
    assert source.loads == 1
    clock.now += 1
    await authenticator.authenticate(token, b"")
    assert source.loads == 2


async def test_failed_reload_keeps_the_old_keys(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    token = f"Bearer {sign(keys['rsa'])}"
    await authenticator.authenticate(token, b"")
    source.fail = True
    clock.now += 3600
    assert (await authenticator.authenticate(token, b"")).subject == "alice"
    assert source.loads == 2
    await authenticator.authenticate(token, b"")  # retried only after the minimum interval
    assert source.loads == 2


async def test_no_keys_at_all_is_503(keys, jwks):
    clock = Clock()
    authenticator, source = make(jwks, clock=clock)
    source.fail = True
    token = f"Bearer {sign(keys['rsa'])}"
    for _ in range(3):
        with pytest.raises(JwksUnavailable) as caught:
            await authenticator.authenticate(token, b"")
        assert http_status(caught.value, "modern") == 503
    assert source.loads == 1
    source.fail = False
    clock.now += 30
    assert (await authenticator.authenticate(token, b"")).subject == "alice"


def test_parse_jwks_keeps_public_signature_keys_only(keys, jwks):
    private = public_jwk(keys["rsa"], "leaked", d="AAAA")
    document = {
        "keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            public_jwk(keys["ec"], "enc", use="enc"),
            private,
            "junk",
            jwks["keys"][0],
        ]
    }
    assert [key["kid"] for key in parse_jwks(json.dumps(document).encode())] == ["rsa-1"]
    for bad in (b"[]", b'{"keys": "x"}', b'{"keys": []}', b"not json", b"\xff"):
        with pytest.raises(ValueError):  # noqa: PT011 - JSON, UTF-8 and shape errors alike
            parse_jwks(bad)


async def test_url_loader_in_process(jwks):
    requests = []

    def answer(request):
        requests.append(request)
        if request.url.path == "/jwks":
            return httpx.Response(200, json=jwks)
        if request.url.path == "/big":
            return httpx.Response(200, content=b" " * (1024 * 1024 + 1))
        return httpx.Response(302, headers={"Location": "https://evil.example/jwks"})

    transport = httpx.MockTransport(answer)
    data = await url_loader("https://id.example.com/jwks", transport=transport)()
    assert json.loads(data) == jwks
    with pytest.raises(httpx.HTTPError):
        await url_loader("https://id.example.com/moved", transport=transport)()
    with pytest.raises(ValueError, match="larger"):
        await url_loader("https://id.example.com/big", transport=transport)()
    assert [str(r.url) for r in requests][-1] == "https://id.example.com/big"  # no redirect


async def test_built_from_settings_with_a_jwks_file(keys, jwks, tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    settings = Settings(
        _env_file=None,
        auth="jwt",
        auth_issuer=ISSUER,
        auth_audience=AUDIENCE,
        auth_jwks_file=str(path),
        auth_required_scopes="mcp",
    )
    authenticator = build_authenticator(settings)
    assert isinstance(authenticator, JwtAuthenticator)
    assert authenticator.required_scopes == {"mcp"}
    principal = await authenticator.authenticate(f"Bearer {sign(keys['ec'], 'ec-1', 'ES256')}", b"")
    assert principal.subject == "alice"
    assert await file_loader(str(path))() == path.read_bytes()


# -- tenants ---------------------------------------------------------------------------------


def with_tenant_claim(document, default_tenant=None):
    authenticator, _ = make(document)
    authenticator.tenant_claim = "org"
    authenticator.default_tenant = default_tenant
    return authenticator


async def test_the_tenant_claim_names_the_callers_tenant(keys, jwks):
    authenticator = with_tenant_claim(jwks)
    principal = await authenticator.authenticate(f"Bearer {sign(keys['rsa'], org='acme')}", b"")
    assert principal.tenant == "acme"


async def test_a_token_without_the_tenant_claim_is_a_clear_403_or_the_default(keys, jwks):
    with pytest.raises(NoTenant) as caught:
        await with_tenant_claim(jwks).authenticate(f"Bearer {sign(keys['rsa'])}", b"")
    assert http_status(caught.value, "modern") == 403
    assert "no org claim" in caught.value.message
    defaulted = with_tenant_claim(jwks, default_tenant="public")
    principal = await defaulted.authenticate(f"Bearer {sign(keys['rsa'], org='')}", b"")
    assert principal.tenant == "public"


async def test_without_a_tenant_claim_configured_there_is_no_tenant(keys, jwks):
    authenticator, _ = make(jwks)
    principal = await authenticator.authenticate(f"Bearer {sign(keys['rsa'], org='acme')}", b"")
    assert principal.tenant is None
