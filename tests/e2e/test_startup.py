"""docs/configuration.md's table of start-up checks, row by row: each misconfiguration provoked
for real, and the line it prints compared with the table's.

A refused configuration runs ``python -m server`` to its exit: status 2, stdout empty, and
stderr one line (no traceback), which must be the table's. A configuration that starts runs a
server until the line appears in its log. The ``requestState`` row asks one app for an
input-required result and retries on another (each with a key of its own); the Redis rows take
a real ``redis-server`` away and bring it back. ``...`` in a line stands for what varies.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.app import create_app
from server.settings import Settings
from tests.support.deploy_helpers import (
    INITIALIZE,
    ROOT,
    ServerProcess,
    legacy_headers,
    modern,
    modern_call,
    modern_headers,
)
from tests.support.redis_server import RedisServer, redis_binary

SECRET = "0123456789abcdef0123456789abcdef"


def readme_rows() -> dict[str, tuple[str, str]]:
    """misconfiguration -> (outcome, line), from the start-up checks table of the configuration
    page."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text.split("\n## Start-up checks", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[2].startswith("`") and cells[0] != "misconfiguration":
            rows[cells[0]] = (cells[1], cells[2].strip("`"))
    return rows


def pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in line.split("...")))


def examples_secret() -> str:
    for line in (ROOT / "deploy" / "mcp.env.example").read_text().splitlines():
        if line.startswith("MCP_STATE_SECRET="):
            return line.partition("=")[2]
    raise AssertionError("deploy/mcp.env.example has no MCP_STATE_SECRET")


# -- the ways to provoke a row ------------------------------------------------------------------


def server_env(**settings: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "MCP_RECORDS": "none",
        "MCP_STATE_SECRET": SECRET,
        **settings,
    }


def run_to_exit(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m server`` run until it exits (a refused configuration exits at once)."""
    return subprocess.run(
        [sys.executable, "-m", "server"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(**settings: str) -> Callable[[Path], list[str]]:
    """Run until it exits: status 2, nothing on stdout, one line on stderr."""

    def run(tmp_path: Path) -> list[str]:
        done = run_to_exit(tmp_path, server_env(**settings))
        assert done.returncode == 2, (done.returncode, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr  # one line, no traceback
        return lines

    return run


def starts(wanted: str, **settings: str) -> Callable[[Path], list[str]]:
    """Start a server; its log lines once one matches ``wanted``."""

    def run(tmp_path: Path) -> list[str]:
        env = server_env(MCP_LOG_LEVEL="info", **settings)
        server = ServerProcess(tmp_path, **{k: v for k, v in env.items() if k.startswith("MCP_")})
        try:
            server.start()
            return wait_for_line(server, wanted)
        finally:
            server.stop()

    return run


def wait_for_line(server: ServerProcess, wanted: str) -> list[str]:
    deadline = time.monotonic() + 15
    while not any(pattern(wanted).search(line) for line in server.log().splitlines()):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    return server.log().splitlines()


def request_state_from_another_process(tmp_path: Path) -> list[str]:
    """The JSON-RPC message a retry gets when another process (another key) sealed its state."""
    import anyio

    async def scenario() -> str:
        one, other = (create_app(Settings(_env_file=None, records=["none"])) for _ in range(2))
        capabilities: dict[str, Any] = {
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}
        }
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=one), base_url="http://127.0.0.1")
            as first,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=other), base_url="http://127.0.0.1")
            as second,
        ):  # fmt: skip
            ask = modern_call("ask_name", {}, "ask-1", **capabilities)
            asked = (await first.post("/mcp", json=ask, headers=modern_headers(ask))).json()
            assert asked["result"]["resultType"] == "input_required", asked
            retry = modern(
                "tools/call",
                {
                    "name": "ask_name",
                    "arguments": {},
                    "inputResponses": {"name": {"action": "accept", "content": {"name": "A"}}},
                    "requestState": asked["result"]["requestState"],
                    "_meta": capabilities,
                },
                id="ask-2",
            )
            failed = (await second.post("/mcp", json=retry, headers=modern_headers(retry))).json()
        assert failed["error"]["code"] == -32602, failed
        return str(failed["error"]["message"])

    return [anyio.run(scenario)]


def redis_outage(tmp_path: Path) -> tuple[str, ...]:
    """A server on a real Redis that goes away and comes back: its log lines. One line each for
    the loss and the return, however many requests fail meanwhile. Run once for both rows."""
    redis_binary()  # skips (or fails under CI) without redis-server
    return _redis_outage()


@functools.cache
def _redis_outage() -> tuple[str, ...]:
    redis = RedisServer().start()
    server = ServerProcess(
        Path(redis.directory),
        MCP_LOG_LEVEL="info",
        MCP_RECORDS="none",
        MCP_STATE_SECRET=SECRET,
        MCP_REDIS_URL=redis.url,
    )
    try:
        server.start()
        initialize = functools.partial(
            httpx.post, f"{server.url}/mcp", json=INITIALIZE, headers=legacy_headers(), timeout=10
        )
        assert initialize().status_code == 200
        redis.stop()
        for _ in range(3):
            assert initialize().status_code == 503
        redis.start()
        deadline = time.monotonic() + 15
        while initialize().status_code != 200:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        lines = wait_for_line(server, "answers again")
    finally:
        server.stop()
        redis.close()
    assert len([line for line in lines if "is unreachable" in line]) == 1, lines
    assert len([line for line in lines if "answers again" in line]) == 1, lines
    return tuple(lines)


SCENARIOS: dict[str, Callable[[Path], list[str] | tuple[str, ...]]] = {
    "`MCP_PORT=abc`": refused(MCP_PORT="abc"),
    "`MCP_LOG_LEVEL=verbose`": refused(MCP_LOG_LEVEL="verbose"),
    "`MCP_PORTT=9000` (a typo)": starts("MCP_PORTT", MCP_PORTT="9000"),
    "`MCP_STATE_SECRET` from the examples": refused(MCP_STATE_SECRET=examples_secret()),
    "`MCP_STATE_SECRET` unset": starts("MCP_STATE_SECRET is unset", MCP_STATE_SECRET=""),
    "a `requestState` signed by another process": request_state_from_another_process,
    "`MCP_AUTH_TOKENS` with `MCP_AUTH=none`": refused(
        MCP_AUTH="none", MCP_AUTH_TOKENS="sha256:" + "1" * 64
    ),
    "`MCP_AUTH_ISSUER` with `MCP_AUTH=none`": refused(
        MCP_AUTH="none", MCP_AUTH_ISSUER="https://id.example.com"
    ),
    "`MCP_HOST=0.0.0.0` with `MCP_AUTH=none`": refused(MCP_HOST="0.0.0.0", MCP_AUTH="none"),
    "`MCP_CATALOG=nope:catalog`": refused(MCP_CATALOG="nope:catalog"),
    "`MCP_RECORDS=redis` without `MCP_REDIS_URL`": refused(MCP_RECORDS="redis"),
    "Redis unreachable at start": starts(
        "unreachable at start", MCP_REDIS_URL="redis://127.0.0.1:1/0"
    ),
    "Redis lost": redis_outage,
    "Redis back": redis_outage,
}


def test_every_row_of_the_table_has_a_scenario() -> None:
    assert set(readme_rows()) == set(SCENARIOS)


@pytest.mark.parametrize("row", list(SCENARIOS))
def test_each_misconfiguration_prints_the_line_in_the_table(row: str, tmp_path: Path) -> None:
    _outcome, line = readme_rows()[row]
    output = SCENARIOS[row](tmp_path)
    if SCENARIOS[row] is request_state_from_another_process:
        assert pattern(line).fullmatch(output[0]), (line, output)
        return
    # A log line: the time, the table's text, and the request's fields when it was logged in
    # one (Redis noticed back while a request used it).
    timed = re.compile(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} " + pattern(line).pattern + r"( \[request_id=.*\])?"
    )
    assert any(timed.fullmatch(printed) for printed in output), (line, output)


def test_the_k8s_example_secret_is_the_same_refused_placeholder() -> None:
    secret = (ROOT / "deploy" / "k8s" / "secret.example.yaml").read_text()
    assert f"MCP_STATE_SECRET: {examples_secret()}" in secret


def test_the_traceback_is_printed_at_the_debug_level_only(tmp_path: Path) -> None:
    done = run_to_exit(tmp_path, server_env(MCP_PORT="abc", MCP_LOG_LEVEL="debug"))
    assert done.returncode == 2
    assert "cannot start: MCP_PORT='abc'" in done.stderr.splitlines()[0]
    assert "Traceback (most recent call last)" in done.stderr
    assert "pydantic_core._pydantic_core.ValidationError" in done.stderr


def test_a_json_log_reports_a_configuration_error_as_one_json_line(tmp_path: Path) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "server"],
        cwd=tmp_path,
        env=server_env(MCP_PORT="abc", MCP_LOG_FORMAT="json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "critical"
    assert record["message"].startswith("cannot start: MCP_PORT='abc' is not valid")


def test_the_refusal_is_printed_even_at_the_critical_level(tmp_path: Path) -> None:
    (line,) = refused(MCP_PORT="abc", MCP_LOG_LEVEL="critical")(tmp_path)
    assert " CRITICAL server: cannot start: MCP_PORT='abc'" in line


def test_a_server_that_does_not_come_up_in_time_is_stopped_not_left_running(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path, MCP_RECORDS="none")
    try:
        with pytest.raises(AssertionError, match="server did not start"):
            server.start(timeout=0)
        assert server.process is not None
        assert server.process.poll() is not None, "still running after a failed start"
    finally:
        server.stop()
