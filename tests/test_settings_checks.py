"""server.settings_checks: what each setting must hold, checked on plain values (through the
settings and their messages: tests/test_settings.py)."""

import pytest

from server import settings_checks as checks


def test_the_state_secret_is_empty_or_long_and_never_the_placeholder() -> None:
    assert checks.state_secret("") == ""
    assert checks.state_secret("x" * 16) == "x" * 16
    with pytest.raises(ValueError, match="at least 16 bytes"):
        checks.state_secret("short")
    with pytest.raises(ValueError, match="placeholder"):
        checks.state_secret(checks.PLACEHOLDER_SECRET_PREFIX + "-a-long-enough-secret")


def test_the_redis_url_is_trimmed_and_its_scheme_one_redis_py_takes() -> None:
    assert checks.redis_url("  redis://localhost:6379/0 ") == "redis://localhost:6379/0"
    assert checks.redis_url("") == ""
    with pytest.raises(ValueError, match="MCP_REDIS_URL must begin with") as refused:
        checks.redis_url("http://user:secret@host")
    assert "secret" not in str(refused.value)  # never the URL: it may hold a password


def test_token_entries_and_algorithms() -> None:
    digest = "SHA256:" + "A" * 64
    assert [entry.text() for entry in checks.token_entries([digest])] == [digest.lower()]
    with pytest.raises(ValueError, match="sha256:<64 hex digits>"):
        checks.token_entries(["plain-token"])
    assert checks.asymmetric_algorithms(["RS256", "EdDSA"]) == ["RS256", "EdDSA"]
    with pytest.raises(ValueError, match="HS256 not accepted"):
        checks.asymmetric_algorithms(["RS256", "HS256"])
    with pytest.raises(ValueError, match=r"\(empty\) not accepted"):
        checks.asymmetric_algorithms([])


def test_paths_are_normalised_and_below_the_root() -> None:
    assert checks.root_path(" api/ ") == "/api"
    assert checks.root_path("/") == ""
    assert checks.endpoint_path("mcp/", "MCP_PATH", "/mcp") == "/mcp"
    with pytest.raises(ValueError, match="MCP_PATH must name a path below /, such as /mcp"):
        checks.endpoint_path("/", "MCP_PATH", "/mcp")
    assert checks.sse_path(" sse ") == "/sse"
    for bad in ("/", "/sse?x", "/sse#x"):
        with pytest.raises(ValueError, match="below /"):
            checks.sse_path(bad)


def test_paths_apart_secrets_shared_and_ttls_in_range() -> None:
    checks.paths_apart("/mcp", "/admin/report")
    with pytest.raises(ValueError, match="MCP_REPORT_PATH must differ"):
        checks.paths_apart("/mcp", "/mcp/")
    checks.paths_apart("/mcp", "/admin/report", ("/sse", "/messages"))
    with pytest.raises(ValueError, match="MCP_SSE_TRANSPORT_PATH"):
        checks.paths_apart("/mcp", "/admin/report", ("/mcp/", "/messages"))
    checks.replicas_share_a_secret("", "")
    checks.replicas_share_a_secret("redis://r", "x" * 16)
    with pytest.raises(ValueError, match="set MCP_STATE_SECRET too"):
        checks.replicas_share_a_secret("redis://r", "")
    checks.task_ttl_range(1, 1, 2)
    with pytest.raises(ValueError, match="MCP_TASK_TTL_S must lie between"):
        checks.task_ttl_range(1, 3, 2)


def test_sse_paths_the_server_answers_or_no_request_reaches_are_refused() -> None:
    for taken in ("/healthz", "/readyz", "/metrics/", "/.well-known", "/.well-known/sse"):
        with pytest.raises(ValueError, match="answered by the server itself"):
            checks.sse_path(taken)
    for unreachable in ("/a b", "/sse%20x", "/a//b", "/a/../b", "/./sse", "/sse/é", "/a\tb"):
        with pytest.raises(ValueError, match="no request reaches"):
            checks.sse_path(unreachable)
    for fine in ("/sse", "/v1/sse", "/events.stream", "/a~b", "/healthz2", "/well-known"):
        assert checks.sse_path(fine) == fine
