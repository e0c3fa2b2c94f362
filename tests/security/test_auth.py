"""server.security.auth, metadata and the gate's settings checks: Bearer parsing, errors and
their challenges, static tokens, the auth-mode startup check, the token command,
protected-resource metadata.

JWT verification is in test_jwt.py.
"""

import contextlib
import hashlib
import hmac
import os

import pytest
from pydantic import ValidationError

from server.cli.main import main
from server.errors import ConfigurationError, http_status
from server.security.auth import (
    ANONYMOUS,
    AuthError,
    InsufficientScope,
    InvalidAuthRequest,
    NoAuth,
    Principal,
    StaticTokens,
    Unauthenticated,
    bearer_token,
    new_token,
    refuse_query_token,
    single_authorization,
    token_digest,
)
from server.security.gate import (
    build_authenticator,
    check_auth_mode,
    protected_resource_document,
)
from server.security.metadata import metadata_paths, metadata_url, resource_metadata
from server.security.networks import is_loopback
from server.settings import Settings

pytestmark = pytest.mark.anyio

META = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)


def make_settings(**overrides):
    return Settings(_env_file=None, **overrides)


def statuses(error):
    return http_status(error, "modern"), http_status(error, "legacy")


# -- reading the Authorization header ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc.DEF-_~+/123==", "abc.DEF-_~+/123=="),
        ("bearer abc", "abc"),
        ("BEARER abc", "abc"),
        ("Bearer   abc", "abc"),  # 1*SP
        ("  Bearer abc  ", "abc"),  # surrounding whitespace is not part of the value
        (None, None),
        ("", None),
        ("Basic dXNlcjpwYXNz", None),  # another scheme: as if no token was sent
        ("Bearerish abc", None),
    ],
)
def test_bearer_token(value, token):
    assert bearer_token(value) == token


@pytest.mark.parametrize(
    "value",
    ["Bearer", "Bearer ", "Bearer a b", "Bearer a,b", 'Bearer "abc"', "Bearer\tabc", "Bearer =a"],
)
def test_malformed_bearer_is_400_invalid_request(value):
    with pytest.raises(InvalidAuthRequest) as caught:
        bearer_token(value)
    assert statuses(caught.value) == (400, 400)
    assert caught.value.to_wire()["code"] == -32600
    assert caught.value.data["error"] == "invalid_request"


def test_single_authorization_header():
    assert single_authorization([(b"host", b"x"), (b"Authorization", b"Bearer t")]) == "Bearer t"
    assert single_authorization([(b"host", b"x")]) is None
    with pytest.raises(InvalidAuthRequest):
        single_authorization([(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")])


@pytest.mark.parametrize(
    "query",
    [
        b"access_token=abc",
        b"x=1&access_token=abc",
        b"access_token=",
        b"ACCESS_TOKEN=abc",
        b"access%5Ftoken=abc",
        b"access_token",
    ],
)
def test_query_string_token_is_refused(query):
    with pytest.raises(InvalidAuthRequest) as caught:
        refuse_query_token(query)
    assert statuses(caught.value) == (400, 400)
    assert "Authorization header" in caught.value.message


@pytest.mark.parametrize("query", [b"", b"x=1", b"token=abc", b"my_access_token=1", b"%zz=1"])
def test_other_query_strings_pass(query):
    refuse_query_token(query)


# -- errors and their WWW-Authenticate values ----------------------------------------------


def test_missing_token_challenge():
    error = Unauthenticated("Authentication required", scopes=["mcp:read", "mcp:call"])
    assert statuses(error) == (401, 401)
    assert error.to_wire() == {
        "code": -32001,
        "message": "Authentication required",
        "data": {"scope": "mcp:call mcp:read"},
    }
    assert error.www_authenticate(META) == (
        f'Bearer resource_metadata="{META}", scope="mcp:call mcp:read"'
    )
    assert error.www_authenticate(None) == 'Bearer scope="mcp:call mcp:read"'
    assert Unauthenticated("x").www_authenticate(None) == "Bearer"


def test_invalid_token_challenge():
    error = Unauthenticated(
        "Invalid access token", error="invalid_token", description="The token has expired"
    )
    assert error.www_authenticate(META) == (
        f'Bearer resource_metadata="{META}", error="invalid_token", '
        'error_description="The token has expired"'
    )


def test_insufficient_scope_challenge_lists_every_needed_scope():
    error = InsufficientScope(["files:write", "mcp"], held=["mcp"])
    assert statuses(error) == (403, 403)
    assert error.message == "Insufficient scope: missing files:write"
    assert error.to_wire()["code"] == -32001
    assert error.data == {"error": "insufficient_scope", "scope": "files:write mcp"}
    assert error.www_authenticate(META) == (
        f'Bearer error="insufficient_scope", scope="files:write mcp", resource_metadata="{META}"'
    )


def test_invalid_request_challenge():
    error = InvalidAuthRequest("Malformed Bearer credentials")
    assert error.www_authenticate(None) == (
        'Bearer error="invalid_request", error_description="Malformed Bearer credentials"'
    )


def test_quoted_values_cannot_break_the_header():
    error = Unauthenticated("x", error="invalid_token", description='a "b" \\ c\r\nd')
    assert error.www_authenticate(None) == (
        'Bearer error="invalid_token", error_description="a \\"b\\" \\\\ cd"'
    )


def test_auth_errors_are_mcp_errors():
    for error in (Unauthenticated("x"), InsufficientScope(["a"]), InvalidAuthRequest("x")):
        assert isinstance(error, AuthError)


# -- principals and mode none --------------------------------------------------------------


def test_principal_is_frozen_and_hashable():
    principal = Principal("alice", frozenset({"a"}), {"sub": "alice"})
    with pytest.raises(AttributeError):
        principal.subject = "bob"  # type: ignore[misc]  # the point: it is read-only
    assert hash(principal) == hash(Principal("alice", frozenset({"a"}), {"other": 1}))
    assert ANONYMOUS.anonymous
    assert not principal.anonymous


async def test_mode_none_is_always_anonymous():
    authenticator = NoAuth()
    assert await authenticator.authenticate(None, b"") is ANONYMOUS
    assert await authenticator.authenticate("Bearer whatever", b"access_token=x") is ANONYMOUS
    authenticator.require(ANONYMOUS, ["admin"])  # no scopes without authentication


# -- static tokens -------------------------------------------------------------------------

TOKEN = "good-token"
OTHER = "other-token"


def tokens(required=(), scopes=("mcp",)):
    return StaticTokens(
        [token_digest(OTHER), token_digest(TOKEN).upper().replace("SHA256", "sha256")],
        scopes,
        required,
    )


async def test_static_token_accepted():
    principal = await tokens().authenticate(f"Bearer {TOKEN}", b"")
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert principal == Principal(f"token:{digest[:8]}", frozenset({"mcp"}))
    assert TOKEN not in repr(principal)


async def test_static_token_wrong_is_401_invalid_token():
    with pytest.raises(Unauthenticated) as caught:
        await tokens(required=["mcp"]).authenticate("Bearer nope", b"")
    assert statuses(caught.value) == (401, 401)
    assert caught.value.www_authenticate(META) == (
        f'Bearer resource_metadata="{META}", scope="mcp", error="invalid_token", '
        'error_description="The token is not recognised"'
    )
    assert "nope" not in str(caught.value.to_wire())


@pytest.mark.parametrize("authorization", [None, "Basic dXNlcjpwYXNz"])
async def test_no_bearer_token_is_401_without_error(authorization):
    with pytest.raises(Unauthenticated) as caught:
        await tokens(required=["mcp"]).authenticate(authorization, b"")
    assert caught.value.error is None
    assert caught.value.www_authenticate(META) == f'Bearer resource_metadata="{META}", scope="mcp"'
    # The challenge stays RFC 6750's (no error without a token); the message says what to send,
    # so a client about to try OAuth (mcp-remote) and its user learn there is none.
    message = caught.value.to_wire("modern")["message"]
    assert "send the header 'Authorization: Bearer <token>'" in message
    assert "no OAuth authorization server" in message


async def test_query_token_refused_even_with_a_good_header():
    with pytest.raises(InvalidAuthRequest):
        await tokens().authenticate(f"Bearer {TOKEN}", f"access_token={TOKEN}".encode())


async def test_every_digest_is_compared_in_constant_time(monkeypatch):
    calls = []
    compare = hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    authenticator = tokens()
    for presented in (OTHER, TOKEN, "unknown"):  # first, last, none: always every digest
        calls.clear()
        with contextlib.suppress(Unauthenticated):
            await authenticator.authenticate(f"Bearer {presented}", b"")
        assert len(calls) == 2
        assert all(len(a) == len(b) == 32 for a, b in calls)


async def test_endpoint_scopes_are_checked_on_authenticate():
    with pytest.raises(InsufficientScope) as caught:
        await tokens(required=["mcp", "admin"]).authenticate(f"Bearer {TOKEN}", b"")
    assert caught.value.www_authenticate(META) == (
        f'Bearer error="insufficient_scope", scope="admin mcp", resource_metadata="{META}"'
    )


async def test_require_per_tool_scopes_adds_the_endpoint_scopes():
    authenticator = tokens(required=["mcp"], scopes=["mcp", "files:read"])
    principal = await authenticator.authenticate(f"Bearer {TOKEN}", b"")
    authenticator.require(principal, ["files:read"])
    authenticator.require(principal, [])
    with pytest.raises(InsufficientScope) as caught:
        authenticator.require(principal, ["files:write", "files:read"])
    # Held scopes that are still needed are listed too, so step-up does not lose them.
    assert caught.value.data["scope"] == "files:read files:write mcp"
    assert caught.value.message == "Insufficient scope: missing files:write"


@pytest.mark.parametrize(
    "digests", [[], ["md5:abc"], ["sha256:xyz"], ["sha256:" + "a" * 63], [TOKEN]]
)
def test_static_tokens_refuse_bad_digests(digests):
    with pytest.raises(ValueError, match="MCP_AUTH"):
        StaticTokens(digests)


def test_bad_scope_names_are_refused():
    with pytest.raises(ValueError, match="scope"):
        StaticTokens([token_digest(TOKEN)], ['say "hi"'])


def test_new_token():
    token, digest = new_token()
    assert len(token) >= 43
    assert digest == "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    assert bearer_token(f"Bearer {token}") == token
    assert new_token()[0] != token


def test_token_command(capsys):
    assert main(["token"]) == 0
    lines = capsys.readouterr().out.splitlines()
    token, digest = lines[1], lines[3]
    assert digest == token_digest(token)
    assert make_settings(auth="tokens", auth_tokens=digest).auth_tokens == [digest]


# -- settings and the startup check --------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_none_on_loopback_is_fine():
    assert check_auth_mode(make_settings()) == []


def test_none_on_a_public_address_is_refused():
    with pytest.raises(ValueError, match="MCP_AUTH_ALLOW_NONE_NON_LOOPBACK"):
        check_auth_mode(make_settings(host="0.0.0.0"))


def test_none_on_a_public_address_when_allowed_warns_loudly():
    warnings = check_auth_mode(make_settings(host="0.0.0.0", auth_allow_none_non_loopback=True))
    assert len(warnings) == 1
    assert "AUTHENTICATION IS OFF" in warnings[0]


@pytest.mark.parametrize(
    ("overrides", "variables", "mode"),
    [
        ({"auth_tokens": "sha256:" + "1" * 64}, "MCP_AUTH_TOKENS is", "tokens"),
        ({"auth_issuer": "https://id.example.com"}, "MCP_AUTH_ISSUER is", "jwt"),
        (
            {"auth_jwks_url": "https://id.example.com/jwks", "auth_required_scopes": "mcp"},
            "MCP_AUTH_REQUIRED_SCOPES, MCP_AUTH_JWKS_URL are",
            "jwt",
        ),
    ],
)
def test_none_with_settings_that_only_authentication_reads_is_refused(overrides, variables, mode):
    # Someone meant to authenticate: serving openly (with a warning) would be the worst outcome.
    with pytest.raises(ConfigurationError) as refused:
        check_auth_mode(make_settings(**overrides))
    assert str(refused.value).startswith(f"MCP_AUTH=none but {variables} set, so the server")
    assert f"set MCP_AUTH={mode} to check them" in str(refused.value)


def test_the_placeholder_token_digest_of_the_examples_is_a_warning():
    placeholder = "sha256:" + "0" * 64
    (warning,) = check_auth_mode(make_settings(auth="tokens", auth_tokens=placeholder))
    assert "placeholder digest" in warning


def test_tokens_mode_checks():
    digest = token_digest(TOKEN)
    with pytest.raises(ValueError, match="MCP_AUTH_TOKENS"):
        check_auth_mode(make_settings(auth="tokens", host="0.0.0.0"))
    assert check_auth_mode(make_settings(auth="tokens", host="0.0.0.0", auth_tokens=digest)) == []
    warned = check_auth_mode(
        make_settings(auth="tokens", auth_tokens=digest, auth_required_scopes="admin")
    )
    assert "403" in warned[0]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"auth_issuer": "", "auth_jwks_file": "a.json"}, "MCP_AUTH_ISSUER"),
        ({"auth_audience": "", "auth_jwks_file": "a.json"}, "MCP_AUTH_AUDIENCE"),
        ({}, "exactly one"),
        ({"auth_jwks_file": "a.json", "auth_jwks_url": "https://x/jwks"}, "exactly one"),
        ({"auth_jwks_url": "http://id.example.com/jwks"}, "https"),
    ],
)
def test_jwt_mode_checks(overrides, match):
    base = {"auth_issuer": "https://id.example.com", "auth_audience": "https://m.example/mcp"}
    with pytest.raises(ValueError, match=match):
        check_auth_mode(make_settings(auth="jwt", **{**base, **overrides}))


def test_jwt_mode_accepts_loopback_http_jwks():
    settings = make_settings(
        auth="jwt",
        auth_issuer="http://127.0.0.1:9000",
        auth_audience="http://127.0.0.1:8000/mcp",
        auth_jwks_url="http://127.0.0.1:9000/jwks",
    )
    assert check_auth_mode(settings) == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"auth": "basic"},
        {"auth_tokens": "sha256:abc"},
        {"auth_algorithms": "RS256,HS256"},
        {"auth_algorithms": "none"},
        {"auth_algorithms": ""},
        {"auth_leeway_s": 3600},
        {"rate_limit_burst": 0},
        {"max_streams_per_client": -1},
        {"handler_timeout_s": -1},
    ],
)
def test_invalid_auth_and_limit_settings_are_refused(overrides):
    with pytest.raises(ValidationError):
        make_settings(**overrides)


def test_list_settings_parse_from_the_environment(monkeypatch):
    digest = token_digest(TOKEN)
    monkeypatch.setenv("MCP_AUTH_TOKENS", f" {digest.upper().replace('SHA256', 'sha256')} ,")
    monkeypatch.setenv("MCP_AUTH_ALGORITHMS", "ES256")
    monkeypatch.setenv("MCP_CORS_ORIGINS", "https://a.example, https://b.example")
    settings = make_settings()
    assert settings.auth_tokens == [digest]
    assert settings.auth_algorithms == ["ES256"]
    assert settings.cors_origins == ["https://a.example", "https://b.example"]


async def test_build_authenticator():
    assert isinstance(build_authenticator(make_settings()), NoAuth)
    built = build_authenticator(
        make_settings(auth="tokens", auth_tokens=token_digest(TOKEN), auth_token_scopes="mcp")
    )
    assert isinstance(built, StaticTokens)
    assert (await built.authenticate(f"Bearer {TOKEN}", b"")).scopes == {"mcp"}


# -- protected-resource metadata -----------------------------------------------------------


def test_resource_metadata_document():
    assert resource_metadata(
        "https://mcp.example.com/mcp",
        ["https://id.example.com", "https://id.example.com"],
        ["b", "a", "b"],
    ) == {
        "resource": "https://mcp.example.com/mcp",
        "authorization_servers": ["https://id.example.com"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["a", "b"],
    }
    assert "scopes_supported" not in resource_metadata("https://r", ["https://as"], [])
    with pytest.raises(ValueError, match="authorization server"):
        resource_metadata("https://r", [], [])
    with pytest.raises(ValueError, match="resource URI"):
        resource_metadata("", ["https://as"], [])


@pytest.mark.parametrize(
    ("args", "url"),
    [
        (("https", "mcp.example.com", "", "/mcp"), META),
        (("https", "mcp.example.com:443", "", "/mcp"), META),
        (("HTTPS", "MCP.example.com", "", "/mcp"), META),
        (
            ("https", "mcp.example.com:8443", "/api", "/mcp"),
            "https://mcp.example.com:8443/api/.well-known/oauth-protected-resource/mcp",
        ),
        (
            ("http", "127.0.0.1:8000", "", "/mcp"),
            "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp",
        ),
        (("http", "[::1]:80", "", "/x"), "http://[::1]/.well-known/oauth-protected-resource/x"),
        (("http", "[::1]", "", "/x"), "http://[::1]/.well-known/oauth-protected-resource/x"),
        (("https", "h:80", "", "/mcp"), "https://h:80/.well-known/oauth-protected-resource/mcp"),
    ],
)
def test_metadata_url(args, url):
    assert metadata_url(*args) == url


def test_metadata_url_follows_settings_prefix():
    settings = make_settings(root_path="api/", path="/tools/mcp/")
    url = metadata_url("https", "example.com", settings.root_path, settings.path)
    assert url == "https://example.com/api/.well-known/oauth-protected-resource/tools/mcp"
    assert metadata_paths(settings.path) == (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/tools/mcp",
    )


def test_protected_resource_document_from_settings():
    assert protected_resource_document(make_settings()) is None
    jwt_settings = make_settings(
        auth="jwt",
        auth_issuer="https://id.example.com",
        auth_audience="https://mcp.example.com/mcp",
        auth_required_scopes="mcp",
    )
    assert protected_resource_document(jwt_settings, ["files:read"]) == {
        "resource": "https://mcp.example.com/mcp",
        "authorization_servers": ["https://id.example.com"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["files:read", "mcp"],
    }
    explicit = jwt_settings.model_copy(
        update={"auth_resource": "https://r.example/mcp", "auth_servers": ["https://as1"]}
    )
    document = protected_resource_document(explicit)
    assert document is not None
    assert document["resource"] == "https://r.example/mcp"
    assert document["authorization_servers"] == ["https://as1"]
    tokens_only = make_settings(auth="tokens", auth_tokens=token_digest(TOKEN))
    assert protected_resource_document(tokens_only) is None


async def test_the_static_tokens_are_read_and_parsed_once_at_start(monkeypatch, tmp_path):
    import builtins

    import server.security.auth
    import server.security.gate
    import server.settings_checks
    from server.security.gate import Gate

    listed, filed = token_digest(TOKEN), token_digest(OTHER)
    path = tmp_path / "tokens"
    path.write_text(f"# one more\n{filed};name=other\n")
    opened: list[str] = []
    parsed: list[str] = []

    def counting_open(file, *args, **kwargs):
        opened.append(str(file))
        return builtins.open(file, *args, **kwargs)

    def counting(parse):
        def entry(text, *args, **kwargs):
            parsed.append(text.split(";")[0].lower())
            return parse(text, *args, **kwargs)

        return entry

    monkeypatch.setattr(server.security.auth, "open", counting_open, raising=False)  # reads it
    real = server.settings_checks.token_entry
    monkeypatch.setattr(server.settings_checks, "token_entry", counting(real))
    monkeypatch.setattr(server.security.auth, "token_entry", counting(real))
    monkeypatch.setattr(server.security.gate, "token_entry", counting(real), raising=False)
    settings = make_settings(auth="tokens", auth_tokens=listed, auth_tokens_file=str(path))
    gate = Gate(settings, lambda: [])
    assert opened == [str(path)]
    assert sorted(parsed) == sorted([listed, filed])
    assert (await gate.auth.authenticate(f"Bearer {OTHER}", b"")).subject == "other"
    assert (await gate.auth.authenticate(f"Bearer {TOKEN}", b"")).subject.startswith("token:")
    assert opened == [str(path)]  # requests read nothing again
    assert sorted(parsed) == sorted([listed, filed])


def test_a_401_asks_whether_there_is_metadata_without_building_it(monkeypatch):
    import server.security.gate
    from server.security.gate import Gate

    built: list[str] = []

    def counting(resource, *args):
        built.append(resource)
        return resource_metadata(resource, *args)

    monkeypatch.setattr(server.security.gate, "resource_metadata", counting)
    settings = make_settings(
        auth="tokens", auth_tokens=token_digest(TOKEN), auth_servers=["https://as.example"]
    )
    gate = Gate(settings, lambda: ["files:read"])
    scope = {"scheme": "https", "root_path": "/api"}
    for _ in range(3):
        [(name, value)] = gate.headers(Unauthenticated("no token"), scope, "mcp.example.com")
        assert name == b"www-authenticate"
        assert b'resource_metadata="https://mcp.example.com/api/.well-known/' in value
    assert built == []
    # Built where it is served, and a configuration without one names none.
    document = gate.metadata_document("https://mcp.example.com/api/mcp")
    assert document is not None
    assert document["scopes_supported"] == ["files:read"]
    assert built == ["https://mcp.example.com/api/mcp"]
    bare = Gate(make_settings(auth="tokens", auth_tokens=token_digest(TOKEN)), lambda: [])
    [(_, value)] = bare.headers(Unauthenticated("no token"), scope, "mcp.example.com")
    assert b"resource_metadata" not in value
    assert built == ["https://mcp.example.com/api/mcp"]
