"""Security through the whole app: bearer tokens, scopes, metadata, limits, CORS, startup.

JWTs are signed with locally generated keys and verified against a local JWKS file; every
refusal is checked for its status, its exact ``WWW-Authenticate`` value and its JSON-RPC body.
Most tests drive the ASGI app in process (``httpx.ASGITransport``, the lifespan entered by
hand, as in test_endpoint.py); the ASGI scope's ``client`` stands for the caller's address.
Open streams need a real connection, so the per-client stream limit runs a uvicorn in a
thread (as in tests/transport/test_modern.py).
"""

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from server import Catalog, Context
from server.app import Application, create_app
from server.settings import Settings
from tests.support import mcp_client as mcp
from tests.support.app import serving
from tests.support.live_server import ServerThread
from tests.support.polling import wait_until

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
BASE_URL = "http://127.0.0.1:8000"
ISSUER = "https://id.example.com"
AUDIENCE = "http://127.0.0.1:8000/mcp"
META_URL = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
BOTH = mcp.BOTH
META = mcp.modern_meta()
AUTH_ERROR = -32001
LIMIT_EXCEEDED = -32000
INVALID_REQUEST = -32600

# What the slow tool saw (in-process: the tool runs on the test's own event loop).
seen: list[str] = []


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test passes configures the app (records stay off unless a test asks)."""
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)
    seen.clear()


def security_catalog() -> Catalog:
    catalog = Catalog("security-test", "1.0.0")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def whoami(ctx: Context) -> str:
        """What the Context says of the request."""
        caller = ctx.caller
        return json.dumps(
            {
                "caller": None
                if caller is None
                else {
                    "subject": caller.subject,
                    "scopes": sorted(caller.scopes),
                    "claims": dict(caller.claims),
                },
                "headers": dict(ctx.headers),
                "session_id": ctx.session_id,
                "record_id": ctx.record_id,
            }
        )

    @catalog.tool(task_support="optional")
    async def whoami_task(ctx: Context) -> str:
        """What the Context of a task says of the request that started it."""
        caller = ctx.caller
        return json.dumps(
            {
                "caller": None
                if caller is None
                else {"subject": caller.subject, "scopes": sorted(caller.scopes)},
                "client_key": ctx.client_key,
                "session_id": ctx.session_id,
                "record_id": ctx.record_id,
            }
        )

    @catalog.tool(scopes=["tools:admin"])
    async def wipe() -> str:
        """Needs the tools:admin scope."""
        return "wiped"

    @catalog.tool
    async def slow() -> str:
        """Runs until it is cancelled."""
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("finished")
        return "finished"

    return catalog


# -- keys and tokens ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys() -> dict[str, rsa.RSAPrivateKey]:
    return {
        "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }


@pytest.fixture(scope="module")
def jwks_file(keys: dict[str, rsa.RSAPrivateKey], tmp_path_factory: pytest.TempPathFactory) -> Path:
    jwk = RSAAlgorithm.to_jwk(keys["rsa"].public_key(), as_dict=True)
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": "rsa-1", "use": "sig"}]}))
    return path


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "exp": now + 300,
        "iat": now,
        "scope": "mcp",
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def sign(key: rsa.RSAPrivateKey, alg: str = "RS256", kid: str = "rsa-1", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm=alg, headers={"kid": kid})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(payload).encode())
    return head + "." + b64(signature)


def hs256_with_public_key(key: rsa.RSAPrivateKey) -> str:
    """Algorithm confusion: an HMAC keyed with the (public) RSA key in PEM."""
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims()).rsplit(".", 1)[0]
    return f"{head}.{b64(hmac.new(pem, head.encode(), hashlib.sha256).digest())}"


def tampered(key: rsa.RSAPrivateKey) -> str:
    head, _, signature = sign(key).split(".")
    return f"{head}.{b64(json.dumps(claims(sub='root')).encode())}.{signature}"


def jwt_settings(jwks_file: Path, **overrides: Any) -> dict[str, Any]:
    options: dict[str, Any] = {
        "auth": "jwt",
        "auth_issuer": ISSUER,
        "auth_audience": AUDIENCE,
        "auth_jwks_file": str(jwks_file),
        "auth_required_scopes": ["mcp"],
    }
    options.update(overrides)
    return options


# -- the app in process -------------------------------------------------------------------------


def client_for(
    app: Application,
    address: str = "127.0.0.1",
    *,
    base_url: str = BASE_URL,
    root_path: str = "",
    token: str | None = None,
) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000), root_path=root_path)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=transport, base_url=base_url, headers=headers)


serve = serving(security_catalog)


def modern(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return mcp.modern(method, params, id)


def call(name: str, arguments: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return modern("tools/call", {"name": name, "arguments": arguments or {}}, id)


def bearer(token: str | None) -> str | None:
    return None if token is None else f"Bearer {token}"


def modern_headers(
    message: dict[str, Any], token: str | None = None, **extra: str | None
) -> dict[str, str]:
    extra["Authorization"] = bearer(token)
    return mcp.modern_headers(message, mcp.BOTH, **extra)


async def post_modern(
    client: httpx.AsyncClient,
    message: dict[str, Any],
    token: str | None = None,
    *,
    path: str = "/mcp",
    **extra: str,
) -> httpx.Response:
    return await client.post(
        path, content=json.dumps(message), headers=modern_headers(message, token, **extra)
    )


INITIALIZE = mcp.legacy(
    "initialize",
    {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": {"name": "security-test-client", "version": "1.0"},
    },
    id=0,
)


def legacy_headers(token: str | None = None, session: str | None = None) -> dict[str, str]:
    version = LEGACY if session is not None else None
    return mcp.legacy_headers(session, version, "application/json", Authorization=bearer(token))


async def post_legacy(
    client: httpx.AsyncClient,
    message: dict[str, Any],
    token: str | None = None,
    session: str | None = None,
) -> httpx.Response:
    return await client.post(
        "/mcp", content=json.dumps(message), headers=legacy_headers(token, session)
    )


async def initialize(client: httpx.AsyncClient, token: str | None = None) -> str:
    response = await post_legacy(client, INITIALIZE, token)
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    initialized = mcp.notification("notifications/initialized")
    assert (await post_legacy(client, initialized, token, session)).status_code == 202
    return session


def legacy_call(name: str, arguments: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return mcp.legacy("tools/call", {"name": name, "arguments": arguments or {}}, id)


def error_of(response: httpx.Response, status: int, code: int, id: Any = None) -> dict[str, Any]:
    """Assert a JSON-RPC error response; returns its ``error`` member."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == id
    assert "result" not in body
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def result_of(response: httpx.Response, id: Any = 1) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "error" not in body, body
    assert body["id"] == id
    return body["result"]


def text_of(result: dict[str, Any]) -> str:
    return "".join(item["text"] for item in result["content"] if item["type"] == "text")


def invalid_token_challenge(description: str, meta_url: str = META_URL) -> str:
    return (
        f'Bearer resource_metadata="{meta_url}", scope="mcp", error="invalid_token", '
        f'error_description="{description}"'
    )


# -- JWT: accepted ------------------------------------------------------------------------------


async def test_a_valid_token_works_in_the_modern_era(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"])
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        result = result_of(await post_modern(client, call("echo", {"text": "hi"}), token))
    assert text_of(result) == "hi"
    assert "isError" not in result or result["isError"] is False


async def test_a_valid_token_works_in_the_legacy_era_on_every_request(
    keys: Any, jwks_file: Path
) -> None:
    token = sign(keys["rsa"])
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        session = await initialize(client, token)
        response = await post_legacy(client, legacy_call("echo", {"text": "old"}), token, session)
        assert text_of(result_of(response)) == "old"
        # A session is no credential: the same call without the token is refused.
        refused = await post_legacy(client, legacy_call("echo", {"text": "x"}, 2), None, session)
    error_of(refused, 401, AUTH_ERROR)
    assert refused.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{META_URL}", scope="mcp"'
    )


# -- JWT: refused -------------------------------------------------------------------------------

REFUSED_TOKENS = {
    "expired": (lambda k: sign(k["rsa"], exp=int(time.time()) - 120), "The token has expired"),
    "wrong-audience": (
        lambda k: sign(k["rsa"], aud="https://other.example/mcp"),
        "The token was not issued for this resource",
    ),
    "wrong-issuer": (
        lambda k: sign(k["rsa"], iss="https://evil.example"),
        "The token issuer is not accepted",
    ),
    "alg-none": (
        lambda k: unsigned({"alg": "none", "typ": "JWT", "kid": "rsa-1"}, claims()),
        "The token algorithm is not accepted",
    ),
    "alg-none-signed": (
        lambda k: unsigned({"alg": "none", "kid": "rsa-1"}, claims(), b"sig"),
        "The token algorithm is not accepted",
    ),
    "hs256-with-the-public-key": (
        lambda k: hs256_with_public_key(k["rsa"]),
        "The token algorithm is not accepted",
    ),
    "alg-off-the-allow-list": (
        lambda k: sign(k["rsa"], alg="RS384"),
        "The token algorithm is not accepted",
    ),
    "bad-signature": (lambda k: sign(k["other"]), "The token signature is invalid"),
    "tampered-payload": (lambda k: tampered(k["rsa"]), "The token signature is invalid"),
    "unknown-kid": (lambda k: sign(k["rsa"], kid="nope"), "The token signing key is unknown"),
    "no-sub": (lambda k: sign(k["rsa"], sub=None), "The token lacks a required claim"),
    "garbage": (lambda k: "not-a-jwt", "The token is not a well-formed JWT"),
}


@pytest.mark.parametrize("case", list(REFUSED_TOKENS))
async def test_a_bad_token_is_401_invalid_token_in_both_eras(
    keys: Any, jwks_file: Path, case: str
) -> None:
    make, description = REFUSED_TOKENS[case]
    token = make(keys)
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        responses = [
            await post_modern(client, call("echo", {"text": "hi"}, id=5), token),
            await post_legacy(client, INITIALIZE, token),
        ]
    for response in responses:
        error = error_of(response, 401, AUTH_ERROR)
        assert response.headers["www-authenticate"] == invalid_token_challenge(description)
        assert error["data"] == {
            "error": "invalid_token",
            "error_description": description,
            "scope": "mcp",
        }
        assert token not in response.text
        assert "mcp-session-id" not in response.headers


async def test_no_token_is_401_without_an_error_code(jwks_file: Path) -> None:
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        responses = [
            await post_modern(client, call("echo", {"text": "hi"})),
            await post_legacy(client, INITIALIZE),
            # Another scheme counts as no Bearer token at all.
            await post_modern(
                client, call("echo", {"text": "hi"}), Authorization="Basic dXNlcjpwYXNz"
            ),
        ]
    for response in responses:
        error = error_of(response, 401, AUTH_ERROR)
        challenge = response.headers["www-authenticate"]
        assert challenge == f'Bearer resource_metadata="{META_URL}", scope="mcp"'
        assert "error=" not in challenge
        assert error["data"] == {"scope": "mcp"}


async def test_a_token_without_the_endpoint_scope_is_403(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"], scope="files:read")
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        response = await post_modern(client, call("echo", {"text": "hi"}), token)
    error = error_of(response, 403, AUTH_ERROR)
    assert response.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="mcp", resource_metadata="{META_URL}"'
    )
    assert error["data"] == {"error": "insufficient_scope", "scope": "mcp"}


async def test_a_tool_scope_is_needed_for_that_tool_only(keys: Any, jwks_file: Path) -> None:
    plain, admin = sign(keys["rsa"]), sign(keys["rsa"], scope="mcp tools:admin")
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        refused = await post_modern(client, call("wipe", id="w"), plain)
        echoed = await post_modern(client, call("echo", {"text": "still fine"}), plain)
        session = await initialize(client, plain)
        legacy_refused = await post_legacy(client, legacy_call("wipe", id=3), plain, session)
        allowed = await post_modern(client, call("wipe"), admin)
    error = error_of(refused, 403, AUTH_ERROR, id="w")
    challenge = 'Bearer error="insufficient_scope", scope="mcp tools:admin"'
    assert refused.headers["www-authenticate"] == f'{challenge}, resource_metadata="{META_URL}"'
    assert error["data"] == {"error": "insufficient_scope", "scope": "mcp tools:admin"}
    assert "tools:admin" in error["message"]
    error_of(legacy_refused, 403, AUTH_ERROR, id=3)
    assert legacy_refused.headers["www-authenticate"] == refused.headers["www-authenticate"]
    assert text_of(result_of(echoed)) == "still fine"
    assert text_of(result_of(allowed)) == "wiped"


async def test_a_token_in_the_query_string_is_refused(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"])
    message = call("echo", {"text": "hi"})
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        responses = [
            # Even with a valid header: the token has leaked into a URL.
            await post_modern(client, message, token, path=f"/mcp?access_token={token}"),
            await post_modern(client, message, path=f"/mcp?x=1&access_token={token}"),
            await post_modern(client, message, token, path=f"/mcp?ACCESS_TOKEN={token}"),
        ]
    for response in responses:
        error = error_of(response, 400, INVALID_REQUEST)
        description = "Access tokens are accepted only in the Authorization header"
        assert response.headers["www-authenticate"] == (
            f'Bearer error="invalid_request", error_description="{description}", '
            f'resource_metadata="{META_URL}"'
        )
        assert error["data"]["error"] == "invalid_request"
        assert token not in response.text


async def test_two_authorization_headers_are_400(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"])
    message = call("echo", {"text": "hi"})
    headers = [
        (name.encode(), value.encode()) for name, value in modern_headers(message, token).items()
    ]
    headers.append((b"authorization", f"Bearer {token}".encode()))
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        response = await client.post("/mcp", content=json.dumps(message), headers=headers)
    error_of(response, 400, INVALID_REQUEST)


async def test_get_and_delete_need_the_token_too(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"])
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        session = await initialize(client, token)
        get = await client.get(
            "/mcp", headers={**legacy_headers(None, session), "Accept": "text/event-stream"}
        )
        delete = await client.delete("/mcp", headers=legacy_headers(None, session))
        still = await post_legacy(client, legacy_call("echo", {"text": "alive"}), token, session)
        deleted = await client.delete("/mcp", headers=legacy_headers(token, session))
        gone = await post_legacy(client, legacy_call("echo", {"text": "x"}, 2), token, session)
    for response in (get, delete):
        error_of(response, 401, AUTH_ERROR)
        assert response.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{META_URL}", scope="mcp"'
        )
    assert text_of(result_of(still)) == "alive"
    assert deleted.status_code == 200
    error_of(gone, 404, INVALID_REQUEST, id=2)


async def test_a_session_belongs_to_the_subject_that_opened_it(keys: Any, jwks_file: Path) -> None:
    alice, bob = sign(keys["rsa"], sub="alice"), sign(keys["rsa"], sub="bob")
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        session = await initialize(client, alice)
        used = await post_legacy(client, legacy_call("echo", {"text": "x"}), bob, session)
        deleted = await client.delete("/mcp", headers=legacy_headers(bob, session))
    assert used.status_code == 404
    assert deleted.status_code == 404


# -- protected-resource metadata ----------------------------------------------------------------


async def test_the_metadata_document_at_both_paths(keys: Any, jwks_file: Path) -> None:
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        documents = [
            await client.get("/.well-known/oauth-protected-resource"),
            await client.get("/.well-known/oauth-protected-resource/mcp"),
        ]
    for response in documents:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {
            "resource": AUDIENCE,
            "authorization_servers": [ISSUER],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["mcp", "tools:admin"],
        }


async def test_the_metadata_names_configured_servers_and_resource(jwks_file: Path) -> None:
    settings = jwt_settings(
        jwks_file,
        auth_resource="https://mcp.example.com/mcp",
        auth_servers=["https://as1.example", "https://as2.example"],
    )
    async with serve(**settings) as (client, _):
        document = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert document["resource"] == "https://mcp.example.com/mcp"
    assert document["authorization_servers"] == ["https://as1.example", "https://as2.example"]


async def test_no_metadata_without_authentication() -> None:
    async with serve() as (client, _):
        for path in (
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
        ):
            assert (await client.get(path)).status_code == 404


async def test_behind_a_prefix_over_https_the_challenge_points_there(jwks_file: Path) -> None:
    # uvicorn behind a trusted proxy sets the scheme from X-Forwarded-Proto and prefixes the path
    # with its root_path; the ASGI scope here is what it would hand the app.
    settings = jwt_settings(jwks_file, root_path="/api", allowed_hosts=["mcp.example.com"])
    settings["records"] = ["none"]
    app = create_app(Settings(_env_file=None, **settings), security_catalog())
    async with (
        app.starlette.router.lifespan_context(app.starlette),
        client_for(app, base_url="https://mcp.example.com", root_path="/api") as client,
    ):
        refused = await post_modern(client, call("echo", {"text": "x"}), path="/api/mcp")
        metadata = await client.get("/api/.well-known/oauth-protected-resource/mcp")
    meta_url = "https://mcp.example.com/api/.well-known/oauth-protected-resource/mcp"
    error_of(refused, 401, AUTH_ERROR)
    assert refused.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{meta_url}", scope="mcp"'
    )
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == AUDIENCE


@pytest.mark.parametrize("trusted", [True, False])
async def test_under_uvicorn_a_trusted_proxys_scheme_reaches_the_challenge(
    jwks_file: Path, trusted: bool
) -> None:
    # The app, not uvicorn, reads the forwarded headers (server.security.networks): a trusted
    # proxy's X-Forwarded-Proto still makes the resource_metadata URL https; anyone else's not.
    settings = jwt_settings(jwks_file, allowed_hosts=["mcp.example.com"], records=["none"])
    settings["trusted_proxies"] = ["127.0.0.1"] if trusted else []
    server = ServerThread(create_app(Settings(_env_file=None, **settings), security_catalog()))
    server.start()
    try:
        message = call("echo", {"text": "x"})
        async with httpx.AsyncClient(base_url=server.url) as client:
            refused = await post_modern(
                client,
                message,
                Host="mcp.example.com",
                **{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"},
            )
    finally:
        server.stop()
    scheme = "https" if trusted else "http"
    meta_url = f"{scheme}://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    error_of(refused, 401, AUTH_ERROR)
    assert refused.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{meta_url}", scope="mcp"'
    )


# -- static tokens ------------------------------------------------------------------------------


def new_token_from_the_command() -> tuple[str, str]:
    """``python -m server token``: the token and the digest line, read as printed."""
    printed = subprocess.run(
        [sys.executable, "-m", "server", "token"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    token, digest = [line for line in printed.splitlines() if line and not line.startswith("#")]
    return token, digest


async def test_static_tokens_from_the_token_command() -> None:
    token, digest = new_token_from_the_command()
    assert digest.startswith("sha256:")
    settings = {"auth": "tokens", "auth_tokens": digest, "auth_token_scopes": "mcp"}
    async with serve(**settings) as (client, _):
        good = await post_modern(client, call("echo", {"text": "static"}), token)
        wrong = await post_modern(
            client, call("echo", {"text": "x"}), token[:-1] + ("B" if token.endswith("A") else "A")
        )
        missing = await post_modern(client, call("echo", {"text": "x"}))
        metadata = await client.get("/.well-known/oauth-protected-resource")
    assert text_of(result_of(good)) == "static"
    error_of(wrong, 401, AUTH_ERROR)
    assert wrong.headers["www-authenticate"] == (
        'Bearer error="invalid_token", error_description="The token is not recognised"'
    )
    error_of(missing, 401, AUTH_ERROR)
    assert missing.headers["www-authenticate"] == "Bearer"
    # No authorization server is configured, so there is no metadata document to point to.
    assert metadata.status_code == 404


async def test_static_tokens_with_an_authorization_server_point_to_the_metadata() -> None:
    token = "a-static-test-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    settings = {
        "auth": "tokens",
        "auth_tokens": digest,
        "auth_resource": AUDIENCE,
        "auth_servers": ISSUER,
        "auth_token_scopes": "mcp",
    }
    async with serve(**settings) as (client, _):
        missing = await post_modern(client, call("echo", {"text": "x"}))
        good = await post_modern(client, call("echo", {"text": "ok"}), token)
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{META_URL}"'
    assert text_of(result_of(good)) == "ok"


# -- what a tool sees of its caller ------------------------------------------------------------


async def whoami_in_both_eras(client: httpx.AsyncClient, token: str) -> list[dict[str, Any]]:
    modern_seen = text_of(
        result_of(await post_modern(client, call("whoami"), token, **{"X-Trace": "t-1"}))
    )
    session = await initialize(client, token)
    legacy_seen = text_of(
        result_of(await post_legacy(client, legacy_call("whoami"), token, session))
    )
    return [json.loads(modern_seen), json.loads(legacy_seen), {"session": session}]


async def test_a_tool_sees_the_jwt_caller_in_both_eras(keys: Any, jwks_file: Path) -> None:
    token = sign(keys["rsa"], scope="mcp tools:read", sub="carol")
    async with serve(**jwt_settings(jwks_file)) as (client, _):
        modern_seen, legacy_seen, opened = await whoami_in_both_eras(client, token)
    for seen_by_tool in (modern_seen, legacy_seen):
        caller = seen_by_tool["caller"]
        assert caller["subject"] == "carol"
        assert caller["scopes"] == ["mcp", "tools:read"]
        assert caller["claims"]["iss"] == ISSUER
        # Credentials never reach a handler; the other headers do, by lower-case name.
        assert "authorization" not in seen_by_tool["headers"]
        assert seen_by_tool["headers"]["content-type"] == "application/json"
        assert len(seen_by_tool["record_id"]) == 16
    assert modern_seen["headers"]["x-trace"] == "t-1"
    assert modern_seen["session_id"] is None
    assert legacy_seen["session_id"] == opened["session"]
    assert modern_seen["record_id"] != legacy_seen["record_id"]


async def test_a_tool_sees_the_static_token_caller_in_both_eras() -> None:
    token = "a-static-test-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    settings = {"auth": "tokens", "auth_tokens": digest, "auth_token_scopes": ["mcp", "tools:read"]}
    async with serve(**settings) as (client, _):
        modern_seen, legacy_seen, _ = await whoami_in_both_eras(client, token)
    for seen_by_tool in (modern_seen, legacy_seen):
        caller = seen_by_tool["caller"]
        assert caller["subject"].startswith("token:")
        assert caller["subject"][6:] in digest
        assert token not in json.dumps(seen_by_tool)
        assert caller["scopes"] == ["mcp", "tools:read"]


async def test_a_task_sees_the_same_caller_as_a_direct_call_in_both_eras() -> None:
    # A task's handler runs after its request answered: it still sees who called (None reads
    # as "no authentication", so a tool trusting it would open up).
    token = "a-static-test-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    settings = {"auth": "tokens", "auth_tokens": digest, "auth_token_scopes": ["mcp", "tools:read"]}
    tasks: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with serve(**settings) as (client, _):
        message = mcp.modern(
            "tools/call", {"name": "whoami_task", "arguments": {}}, 1, capabilities=tasks
        )
        created = result_of(await post_modern(client, message, token))
        task_id = created["taskId"]
        with anyio.fail_after(10):
            while True:
                get = mcp.modern("tasks/get", {"taskId": task_id}, 2, capabilities=tasks)
                got = result_of(await post_modern(client, get, token), 2)
                if got["status"] == "completed":
                    break
                await anyio.sleep(0.01)
        modern_seen = json.loads(text_of(got["result"]))
        session = await initialize(client, token)
        start = mcp.legacy("tools/call", {"name": "whoami_task", "arguments": {}, "task": {}}, 3)
        legacy_task = result_of(await post_legacy(client, start, token, session), 3)["task"]
        wait = mcp.legacy("tasks/result", {"taskId": legacy_task["taskId"]}, 4)
        legacy_seen = json.loads(
            text_of(result_of(await post_legacy(client, wait, token, session), 4))
        )
    for seen_by_task in (modern_seen, legacy_seen):
        caller = seen_by_task["caller"]
        assert caller is not None
        assert caller["subject"].startswith("token:")
        assert caller["scopes"] == ["mcp", "tools:read"]
        assert seen_by_task["record_id"] is not None
        assert seen_by_task["client_key"] == "sub:" + caller["subject"]
    assert legacy_seen["session_id"] == session


async def test_an_anonymous_caller_is_none_and_cookies_stay_hidden() -> None:
    async with serve() as (client, _):
        message = call("whoami")
        response = await post_modern(client, message, Cookie="sid=secret")
    seen_by_tool = json.loads(text_of(result_of(response)))
    assert seen_by_tool["caller"] is None
    assert "cookie" not in seen_by_tool["headers"]
    assert seen_by_tool["headers"]["mcp-method"] == "tools/call"


# -- request records ----------------------------------------------------------------------------


async def test_the_record_has_the_subject_and_never_the_token(
    keys: Any, jwks_file: Path, tmp_path: Path
) -> None:
    path = tmp_path / "records.jsonl"
    token, bad = sign(keys["rsa"], sub="alice@example"), sign(keys["other"])
    settings = jwt_settings(jwks_file, records=["file"], records_file=str(path))
    async with serve(**settings) as (client, _):
        await post_modern(client, call("echo", {"text": "a"}), token, **{"User-Agent": "good"})
        await post_modern(client, call("echo", {"text": "b"}), bad, **{"User-Agent": "bad"})
        await post_modern(client, call("echo", {"text": "c"}), **{"User-Agent": "none"})
        await post_modern(
            client, call("echo", {"text": "d"}), token, path=f"/mcp?access_token={token}"
        )
        session = await initialize(client, token)
        await post_legacy(client, legacy_call("echo", {"text": "e"}), token, session)
    text = path.read_text()
    for secret in (token, bad, token.split(".")[2], bad.split(".")[2]):
        assert secret not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 7
    by_agent = {record["user_agent"]: record for record in records}
    assert by_agent["good"]["subject"] == "alice@example"
    assert by_agent["good"]["status"] == 200
    assert by_agent["bad"]["subject"] is None
    assert by_agent["bad"]["status"] == 401
    assert by_agent["bad"]["error"]["code"] == AUTH_ERROR
    assert by_agent["none"]["subject"] is None
    legacy = [record for record in records if record["era"] == "legacy"]
    assert [record["subject"] for record in legacy] == ["alice@example"] * 3


async def test_a_static_token_is_recorded_by_its_digest_prefix(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    token = "another-static-token-9876543210"
    digest = hashlib.sha256(token.encode()).hexdigest()
    settings = {
        "auth": "tokens",
        "auth_tokens": f"sha256:{digest}",
        "records": ["file"],
        "records_file": str(path),
    }
    async with serve(**settings) as (client, _):
        assert (await post_modern(client, call("echo", {"text": "x"}), token)).status_code == 200
    text = path.read_text()
    assert token not in text
    assert json.loads(text)["subject"] == f"token:{digest[:8]}"


async def test_a_json_escaped_secret_key_is_still_redacted(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    arguments = '{"text": "x", "pass\\u0077ord": "hunter2-xyzzy"}'
    meta = json.dumps(META)
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        f'"params": {{"name": "echo", "arguments": {arguments}, "_meta": {meta}}}}}'
    )
    assert json.loads(body)["params"]["arguments"]["password"] == "hunter2-xyzzy"
    async with serve(records=["file"], records_file=str(path)) as (client, _):
        message = call("echo", {"text": "x"})
        response = await client.post("/mcp", content=body, headers=modern_headers(message))
    assert response.status_code == 200
    assert "hunter2-xyzzy" not in path.read_text()


# -- rate limit ---------------------------------------------------------------------------------


def check_rate_limited(response: httpx.Response) -> None:
    error = error_of(response, 429, LIMIT_EXCEEDED)
    assert response.headers["retry-after"] == "1"
    assert error["data"] == {"limit": "rate", "retryAfter": 1}


async def test_a_client_over_its_rate_gets_429_and_others_do_not() -> None:
    message = call("echo", {"text": "x"})
    async with (
        serve(rate_limit_rps=1, rate_limit_burst=3) as (local, app),
        client_for(app, "10.0.0.1") as greedy,
        client_for(app, "10.0.0.2") as other,
    ):
        statuses = [(await post_modern(greedy, message)).status_code for _ in range(3)]
        refused = await post_modern(greedy, message)
        assert statuses == [200, 200, 200]
        check_rate_limited(refused)
        # Another address, and loopback (exempt by default), are not affected.
        assert (await post_modern(other, message)).status_code == 200
        for _ in range(10):
            assert (await post_modern(local, message)).status_code == 200
        # Every method is charged, not only POST.
        get = await greedy.get("/mcp", headers={"Accept": "text/event-stream"})
        check_rate_limited(get)


async def test_the_rate_is_per_subject_and_loopback_can_be_limited(
    keys: Any, jwks_file: Path
) -> None:
    alice, bob = sign(keys["rsa"], sub="alice"), sign(keys["rsa"], sub="bob")
    message = call("echo", {"text": "x"})
    settings = jwt_settings(jwks_file, rate_limit_rps=1, rate_limit_burst=2, rate_limit_exempt="")
    async with serve(**settings) as (client, _):
        assert [(await post_modern(client, message, alice)).status_code for _ in range(2)] == [
            200,
            200,
        ]
        check_rate_limited(await post_modern(client, message, alice))
        # Same address, another subject: its own bucket.
        assert (await post_modern(client, message, bob)).status_code == 200


async def test_failed_authentication_is_rate_limited_by_address(jwks_file: Path) -> None:
    message = call("echo", {"text": "x"})
    settings = jwt_settings(jwks_file, rate_limit_rps=1, rate_limit_burst=3)
    async with serve(**settings) as (_, app), client_for(app, "10.0.0.3") as guesser:
        statuses = [
            (await post_modern(guesser, message, f"guess{n}")).status_code for n in range(3)
        ]
        assert statuses == [401, 401, 401]
        check_rate_limited(await post_modern(guesser, message, "guess3"))


# -- legacy sessions per client -----------------------------------------------------------------


async def test_legacy_sessions_per_client() -> None:
    async with serve(max_sessions_per_client=2) as (client, app):
        first = await initialize(client)
        await initialize(client)
        refused = await post_legacy(client, INITIALIZE)
        error = error_of(refused, 429, LIMIT_EXCEEDED, id=0)
        assert error["data"] == {"limit": "sessions", "max": 2}
        assert "mcp-session-id" not in refused.headers
        async with client_for(app, "10.0.0.4") as other:
            await initialize(other)  # another client has its own count
        deleted = await client.delete("/mcp", headers=legacy_headers(None, first))
        assert deleted.status_code == 200
        await initialize(client)
        error_of(await post_legacy(client, INITIALIZE), 429, LIMIT_EXCEEDED, id=0)


# -- handler time limit -------------------------------------------------------------------------


async def test_a_slow_tool_is_stopped_in_the_modern_era() -> None:
    async with serve(handler_timeout_s=0.2) as (client, _):
        started = time.monotonic()
        response = await post_modern(client, call("slow"), Accept="application/json")
        elapsed = time.monotonic() - started
        echoed = await post_modern(client, call("echo", {"text": "fast"}, 2))
    result = result_of(response)
    assert result["isError"] is True
    assert "stopped" in text_of(result)
    assert "0.2 s" in text_of(result)
    assert seen == ["started", "cancelled"]
    assert elapsed < 2
    assert text_of(result_of(echoed, 2)) == "fast"


async def test_a_slow_tool_is_stopped_in_the_legacy_era() -> None:
    async with serve(handler_timeout_s=0.2) as (client, _):
        session = await initialize(client)
        response = await post_legacy(client, legacy_call("slow", id=9), None, session)
    result = result_of(response, 9)
    assert result["isError"] is True
    assert "stopped" in text_of(result)
    assert seen == ["started", "cancelled"]


# -- CORS ---------------------------------------------------------------------------------------

PREFLIGHT = {
    "Origin": "https://app.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": (
        "authorization, content-type, mcp-protocol-version, mcp-session-id, mcp-method, "
        "mcp-name, last-event-id"
    ),
}


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {
        name: value
        for name, value in response.headers.items()
        if name.lower().startswith("access-control-")
    }


async def test_cors_is_off_by_default() -> None:
    async with serve() as (client, _):
        preflight = await client.options("/mcp", headers=PREFLIGHT)
        message = call("echo", {"text": "x"})
        same_host = await post_modern(client, message, Origin="http://127.0.0.1:8000")
        browser = await post_modern(client, message, Origin="https://app.example")
    assert cors_headers(preflight) == {}
    assert preflight.status_code == 403  # the foreign Origin is refused, preflight or not
    assert same_host.status_code == 200
    assert cors_headers(same_host) == {}
    error_of(browser, 403, INVALID_REQUEST)
    assert cors_headers(browser) == {}


async def test_cors_preflight_and_exposed_headers_when_on() -> None:
    async with serve(cors_origins="https://app.example") as (client, _):
        preflight = await client.options("/mcp", headers=PREFLIGHT)
        evil_preflight = await client.options(
            "/mcp", headers={**PREFLIGHT, "Origin": "https://evil.example"}
        )
        modern_call = await post_modern(
            client, call("echo", {"text": "cors"}), Origin="https://app.example"
        )
        init = await client.post(
            "/mcp",
            content=json.dumps(INITIALIZE),
            headers={**legacy_headers(), "Origin": "https://app.example"},
        )
        evil = await post_modern(client, call("echo", {"text": "x"}), Origin="https://evil.example")
    assert preflight.status_code == 200
    allowed = cors_headers(preflight)
    assert allowed["access-control-allow-origin"] == "https://app.example"
    assert set(allowed["access-control-allow-methods"].replace(" ", "").split(",")) >= {
        "GET",
        "POST",
        "DELETE",
    }
    allowed_headers = {
        name.strip().lower() for name in allowed["access-control-allow-headers"].split(",")
    }
    assert allowed_headers >= {
        "authorization",
        "content-type",
        "mcp-protocol-version",
        "mcp-session-id",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
    assert allowed["access-control-max-age"] == "600"
    assert evil_preflight.status_code == 400
    assert "access-control-allow-origin" not in cors_headers(evil_preflight)

    assert text_of(result_of(modern_call)) == "cors"
    assert modern_call.headers["access-control-allow-origin"] == "https://app.example"
    exposed = {
        name.strip().lower()
        for name in modern_call.headers["access-control-expose-headers"].split(",")
    }
    assert exposed >= {"mcp-session-id", "www-authenticate", "retry-after"}
    assert init.status_code == 200
    assert init.headers["mcp-session-id"]
    assert "mcp-session-id" in init.headers["access-control-expose-headers"].lower()
    error_of(evil, 403, INVALID_REQUEST)
    assert "access-control-allow-origin" not in evil.headers


async def test_cors_preflight_needs_no_token_and_the_challenge_is_readable() -> None:
    digest = "sha256:" + hashlib.sha256(b"cors-token-0123456789").hexdigest()
    settings = {"auth": "tokens", "auth_tokens": digest, "cors_origins": "https://app.example"}
    async with serve(**settings) as (client, _):
        preflight = await client.options("/mcp", headers=PREFLIGHT)
        refused = await post_modern(
            client, call("echo", {"text": "x"}), Origin="https://app.example"
        )
    assert preflight.status_code == 200
    error_of(refused, 401, AUTH_ERROR)
    assert refused.headers["access-control-allow-origin"] == "https://app.example"
    assert "www-authenticate" in refused.headers["access-control-expose-headers"].lower()


# -- startup checks -----------------------------------------------------------------------------


def test_auth_none_on_a_public_address_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match=r"MCP_AUTH=none with MCP_HOST=0\.0\.0\.0"):
        create_app(Settings(_env_file=None, host="0.0.0.0", records=["none"]), security_catalog())


def test_auth_none_on_a_public_address_when_allowed_warns_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server")
    settings = Settings(
        _env_file=None, host="0.0.0.0", auth_allow_none_non_loopback=True, records=["none"]
    )
    create_app(settings, security_catalog())
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("AUTHENTICATION IS OFF on 0.0.0.0" in r.getMessage() for r in warnings)


def test_authenticated_modes_may_bind_a_public_address(jwks_file: Path) -> None:
    create_app(
        Settings(_env_file=None, host="0.0.0.0", records=["none"], **jwt_settings(jwks_file)),
        security_catalog(),
    )


# -- open streams per client (a real server) ----------------------------------------------------


@pytest.fixture
def live() -> Iterator[ServerThread]:
    settings = Settings(
        _env_file=None,
        records=["none"],
        max_streams_per_client=1,
        keepalive_s=0.1,
        shutdown_grace_s=0.2,
    )
    running = ServerThread(create_app(settings, security_catalog()))
    running.start()
    yield running
    running.stop()


LISTEN = modern("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, "listen")


async def first_event(events: mcp.SSE) -> dict[str, Any]:
    """The first message of a stream. Keep ``events`` referenced: httpx closes the connection
    when an abandoned line iterator is garbage-collected."""
    message = await events.next(3)
    assert message is not None, "the stream ended before its first event"
    return message


async def test_open_streams_per_client(live: ServerThread) -> None:
    body = json.dumps(LISTEN)
    headers = modern_headers(LISTEN, Accept="text/event-stream")
    acknowledged = "notifications/subscriptions/acknowledged"
    key = "addr:127.0.0.1"
    async with httpx.AsyncClient(base_url=live.url, timeout=5) as client:
        async with client.stream("POST", "/mcp", content=body, headers=headers) as first:
            assert first.status_code == 200
            events = mcp.SSE(first)
            assert (await first_event(events))["method"] == acknowledged
            assert live.app.gate.streams.count(key) == 1
            with anyio.fail_after(3):
                second = await client.post("/mcp", content=body, headers=headers)
            error = error_of(second, 429, LIMIT_EXCEEDED, id="listen")
            assert error["data"] == {"limit": "streams", "max": 1}
            # A legacy GET stream is a stream of the same client.
            session = await initialize(client)
            get_headers = {**legacy_headers(None, session), "Accept": "text/event-stream"}
            with anyio.fail_after(3):
                get = await client.get("/mcp", headers=get_headers)
            error_of(get, 429, LIMIT_EXCEEDED)
            assert live.app.gate.streams.count(key) == 1
        # The server sees the close at its next keep-alive and gives the slot back.
        await wait_until(lambda: live.app.gate.streams.count(key) == 0)
        async with client.stream("POST", "/mcp", content=body, headers=headers) as again:
            assert again.status_code == 200
            assert (await first_event(mcp.SSE(again)))["method"] == acknowledged
