"""server.settings and .env.example: one list of settings, kept in step with its example."""

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from server.settings import Settings

ENV_EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"
ASSIGNMENT = re.compile(r"^(MCP_[A-Z0-9_]+)=(.*)$")


def example_lines() -> list[str]:
    return ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()


def example_variables() -> dict[str, int]:
    """MCP_* name -> line index, for every assignment in .env.example."""
    found: dict[str, int] = {}
    for index, line in enumerate(example_lines()):
        match = ASSIGNMENT.match(line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} appears twice"
            found[match.group(1)] = index
    return found


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)


def test_every_setting_is_in_env_example_and_vice_versa():
    fields = {f"MCP_{name.upper()}" for name in Settings.model_fields}
    assert fields == set(example_variables())


def test_every_line_is_a_comment_an_assignment_or_blank():
    for line in example_lines():
        assert not line.strip() or line.startswith("#") or ASSIGNMENT.match(line), line


def test_every_variable_is_introduced_by_a_comment():
    # A variable's block (consecutive assignments) starts right under a comment line, so
    # "Address and port ..." may introduce MCP_HOST and MCP_PORT together.
    lines = example_lines()
    for name, index in example_variables().items():
        above = index - 1
        while above >= 0 and ASSIGNMENT.match(lines[above]):
            above -= 1
        assert above >= 0, f"{name} has no comment above it"
        assert lines[above].startswith("# "), f"{name} has no comment above it"


def test_env_example_values_are_the_defaults(clean_env):
    from_example = Settings(_env_file=ENV_EXAMPLE)
    defaults = Settings(_env_file=None)
    assert from_example.model_dump() == defaults.model_dump()


def test_comma_lists_parse_from_the_environment(clean_env, monkeypatch):
    monkeypatch.setenv("MCP_ALLOWED_HOSTS", " example.com, localhost:8000 ,,[::1] ")
    monkeypatch.setenv("MCP_ALLOWED_ORIGINS", "https://a.example,https://b.example")
    settings = Settings(_env_file=None)
    assert settings.allowed_hosts == ["example.com", "localhost:8000", "[::1]"]
    assert settings.allowed_origins == ["https://a.example", "https://b.example"]


def test_empty_comma_list_is_empty(clean_env, monkeypatch):
    monkeypatch.setenv("MCP_ALLOWED_ORIGINS", "")
    assert Settings(_env_file=None).allowed_origins == []


def test_single_item_list_is_not_json_decoded(clean_env, monkeypatch):
    monkeypatch.setenv("MCP_ALLOWED_HOSTS", "*")
    assert Settings(_env_file=None).allowed_hosts == ["*"]


def test_environment_overrides_defaults(clean_env, monkeypatch):
    monkeypatch.setenv("MCP_PORT", "9001")
    monkeypatch.setenv("MCP_CACHE_SCOPE", "private")
    monkeypatch.setenv("MCP_KEEPALIVE_S", "0.5")
    settings = Settings(_env_file=None)
    assert settings.port == 9001
    assert settings.cache_scope == "private"
    assert settings.keepalive_s == 0.5


@pytest.mark.parametrize(
    ("raw", "expected"), [("mcp", "/mcp"), ("/api/mcp/", "/api/mcp"), ("//x//", "/x")]
)
def test_path_is_normalised(clean_env, raw, expected):
    assert Settings(_env_file=None, path=raw).path == expected


@pytest.mark.parametrize(
    "overrides",
    [
        {"path": "/"},
        {"port": 70000},
        {"page_size": 0},
        {"cache_scope": "shared"},
        {"log_level": "verbose"},
        {"legacy_default_log_level": "verbose"},
        {"max_body_bytes": 10},
        {"keepalive_s": 0},
        {"listen_queue_size": 0},
        {"request_state_ttl_s": 0},
        {"list_ttl_ms": -1},
    ],
)
def test_invalid_values_are_refused(clean_env, overrides):
    with pytest.raises(ValidationError):
        Settings(_env_file=None, **overrides)


def test_sealing_key(clean_env):
    assert Settings(_env_file=None, state_secret="s" * 40).sealing_key() == b"s" * 40
    random_settings = Settings(_env_file=None)
    first, second = random_settings.sealing_key(), random_settings.sealing_key()
    assert len(first) == 32
    assert first != second


def test_secret_is_not_shown(clean_env):
    settings = Settings(_env_file=None, state_secret="topsecretvalue123")
    assert "topsecretvalue123" not in repr(settings)
