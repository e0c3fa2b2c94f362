"""server.settings and .env.example: one list of settings, kept in step with its example."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from server.errors import ConfigurationError
from server.settings import Settings, load_settings, logging_choice, unknown_variables

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


def test_sse_transport_paths_are_normalised_and_off_frees_them(clean_env):
    settings = Settings(
        _env_file=None, sse_transport_path="events/", sse_transport_messages_path="p"
    )
    assert (settings.sse_transport_path, settings.sse_transport_messages_path) == ("/events", "/p")
    assert not Settings(
        _env_file=None, sse_transport=False, sse_transport_path="/mcp"
    ).sse_transport


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
        {"sse_transport_path": "/"},
        {"sse_transport_messages_path": "/post?x=1"},
        {"sse_transport_path": "/mcp"},
        {"sse_transport_messages_path": "/sse"},
        {"sse_transport_path": "/admin/report/"},
        {"sse_transport_max_pending": 0},
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


# -- python -m server's reading: one line per mistake, in the variables' names -----------------


@pytest.mark.parametrize(
    ("environment", "line"),
    [
        (
            {"MCP_PORT": "abc"},
            "MCP_PORT='abc' is not valid: use a whole number from 0 to 65535 (default 8000)",
        ),
        (
            {"MCP_KEEPALIVE_S": "0"},
            "MCP_KEEPALIVE_S='0' is not valid: use a number above 0 (default 15.0)",
        ),
        (
            {"MCP_REDIS_TIMEOUT_S": "100"},
            "MCP_REDIS_TIMEOUT_S='100' is not valid: use a number above 0, at most 60 "
            "(default 2.0)",
        ),
        (
            {"MCP_MAX_BODY_BYTES": "10"},
            "MCP_MAX_BODY_BYTES='10' is not valid: use a whole number of at least 1024 "
            "(default 4194304)",
        ),
        (
            {"MCP_CACHE_SCOPE": "shared"},
            "MCP_CACHE_SCOPE='shared' is not valid: use one of public, private or empty",
        ),
        (
            {"MCP_RECORDS_COMPRESS": "maybe"},
            "MCP_RECORDS_COMPRESS='maybe' is not valid: use true or false (default true)",
        ),
        (
            {"MCP_REDIS_PREFIX": "a b"},
            "MCP_REDIS_PREFIX='a b' is not valid: use text of 1 to 64 characters matching "
            "^[A-Za-z0-9_.:-]+$ (default mcp)",
        ),
        (  # two at once, on one line
            {"MCP_PORT": "-1", "MCP_LOG_FORMAT": "xml"},
            "MCP_PORT='-1' is not valid: use a whole number from 0 to 65535 (default 8000); "
            "MCP_LOG_FORMAT='xml' is not valid: use one of text, json (default text)",
        ),
        (  # a validator's own message, which names the variable
            {"MCP_PATH": "/"},
            "MCP_PATH must name a path below /, such as /mcp",
        ),
        (  # a liveness probe would open a session (issue 34)
            {"MCP_SSE_TRANSPORT_PATH": "/healthz"},
            "MCP_SSE_TRANSPORT_PATH: /healthz is answered by the server itself (/healthz, "
            "/readyz, /metrics and /.well-known/...): choose another path, such as /sse or "
            "/messages",
        ),
        (  # the router compares the decoded path: a %-escape never matches
            {"MCP_SSE_TRANSPORT_MESSAGES_PATH": "/post%20it"},
            "MCP_SSE_TRANSPORT_MESSAGES_PATH: '/post%20it' is a path no request reaches as "
            "written: use letters, digits and - . _ ~ ! $ & ' ( ) * + , ; = : @ between single "
            "slashes (no '.' or '..' segment, no %-escape, no space), such as /sse or /messages",
        ),
        (  # redis-py would refuse it only when connecting, with a traceback
            {"MCP_REDIS_URL": "localhost:6379", "MCP_STATE_SECRET": "s" * 32},
            "MCP_REDIS_URL must begin with redis://, rediss:// (TLS) or unix://, such as "
            "redis://localhost:6379/0",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    clean_env, monkeypatch, tmp_path, environment, line
):
    monkeypatch.chdir(tmp_path)  # no .env
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as refused:
        load_settings()
    assert str(refused.value) == line


def test_a_secret_value_is_never_repeated(clean_env, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MCP_AUTH_TOKENS", "sha256:not-the-right-shape-hunter2")
    with pytest.raises(ConfigurationError) as refused:
        load_settings()
    assert "hunter2" not in str(refused.value)
    assert "MCP_AUTH_TOKENS" in str(refused.value)


def test_the_placeholder_secret_of_the_examples_is_refused(clean_env):
    with pytest.raises(ValidationError, match="placeholder from the examples"):
        Settings(_env_file=None, state_secret="replace-with-the-output-of-openssl-rand-hex-32")


def test_unknown_mcp_variables_are_named_with_the_closest_setting():
    environment = {"MCP_PORTT": "1", "MCP_LOGLEVEL": "x", "MCP_NOTHING_LIKE_IT": "1", "HOME": "/"}
    assert unknown_variables(environment) == [
        "MCP_LOGLEVEL is not a setting of this server and is ignored: did you mean MCP_LOG_LEVEL?",
        "MCP_NOTHING_LIKE_IT is not a setting of this server and is ignored: every setting is "
        "in .env.example",
        "MCP_PORTT is not a setting of this server and is ignored: did you mean MCP_PORT?",
    ]
    assert unknown_variables({"MCP_PORT": "1", "mcp_host": "x"}) == []


def test_unknown_variables_in_the_env_file_are_named_too(clean_env, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("MCP_CATALOGUE=probe\n")
    assert unknown_variables() == [
        "MCP_CATALOGUE is not a setting of this server and is ignored: did you mean MCP_CATALOG?"
    ]


def test_the_logging_choice_is_read_alone_and_leniently(clean_env, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MCP_PORT", "not a port")  # the rest need not load
    monkeypatch.setenv("MCP_LOG_FORMAT", "json")
    monkeypatch.setenv("MCP_LOG_LEVEL", "debug")
    assert logging_choice() == ("debug", "json")
    monkeypatch.setenv("MCP_LOG_LEVEL", "verbose")
    monkeypatch.setenv("MCP_LOG_FORMAT", "xml")
    assert logging_choice() == ("info", "text")


@pytest.mark.parametrize(
    "url",
    ["redis://localhost:6379/0", "rediss://:pw@cache:6380", "unix:///run/redis.sock", "REDIS://h"],
)
def test_redis_urls_with_a_scheme_are_accepted(clean_env, url):
    settings = Settings(_env_file=None, redis_url=url, state_secret="s" * 32)
    assert settings.redis_url.get_secret_value() == url


def test_a_redis_url_without_a_scheme_stops_the_server_with_one_line(tmp_path):
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith("MCP_")},
        "MCP_REDIS_URL": "localhost:6379",
        "MCP_STATE_SECRET": "s" * 32,
        "MCP_PORT": "0",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),  # this tree's server
    }
    done = subprocess.run(
        [sys.executable, "-m", "server", "serve"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "MCP_REDIS_URL" in line]
    assert len(lines) == 1, done.stderr
    assert "must begin with redis://" in lines[0]


def test_settings_are_importable_from_server_and_loaded_on_first_use() -> None:
    import subprocess
    import sys

    import server
    import server.settings

    assert server.Settings is server.settings.Settings
    assert "Settings" in server.__all__
    # Declaring a catalog reads no environment: the module comes with the first use only.
    probe = (
        "import sys, server; assert 'server.settings' not in sys.modules; "
        "from server import Settings; assert 'server.settings' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
