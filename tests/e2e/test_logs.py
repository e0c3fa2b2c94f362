"""A real ``python -m server``'s two outputs: stdout holds records only, stderr the log lines.

With ``MCP_RECORDS=stdout`` every line of stdout, first to last, is a request record (JSON
Lines), even at the debug level (where uvicorn's access log would be on) and with a catalog
that prints. With ``MCP_LOG_FORMAT=json`` every log line on stderr, uvicorn's included, is one
JSON object, and a line logged inside a request names it (the same ``request_id`` as its
record, era, method, session, client). With ``text``, uvicorn's lines take our format too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.deploy_helpers import (
    INITIALIZE,
    ROOT,
    free_port,
    legacy_headers,
    modern_call,
    modern_headers,
    stop_process,
)

CLIENT = {"name": "log-tests", "version": "1.0"}
# What the noisy catalog prints (tests/support/noisy_catalog.py): never on stdout.
STRAY_PRINTS = ("noisy catalog imported", "shouting loud")


@contextlib.contextmanager
def server(
    tmp_path: Path, command: tuple[str, ...] = ("-m", "server"), **settings: str
) -> Iterator[str]:
    """``python -m server`` (or ``python COMMAND``) with its stdout and stderr kept apart;
    yields its URL."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "MCP_PORT": str(port),
            "MCP_STATE_SECRET": "0123456789abcdef0123456789abcdef",
            "MCP_CATALOG": "tests.support.noisy_catalog:catalog",
            **settings,
        }
    )
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, *command, *(["--port", str(port)] if "uvicorn" in command else [])],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            assert process.poll() is None, (tmp_path / "err").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp_path / "err").read_text()
            time.sleep(0.05)
        yield url
    finally:
        stop_process(process)
    # uvicorn itself re-raises the SIGTERM it handled once it has stopped.
    ended = (0, -15) if "uvicorn" in command else (0,)
    assert process.returncode in ended, (tmp_path / "err").read_text()


def call(client: httpx.Client, url: str, name: str, arguments: dict[str, Any], id: str) -> Any:
    message = modern_call(name, arguments, id, **{"io.modelcontextprotocol/clientInfo": CLIENT})
    answer = client.post(f"{url}/mcp", json=message, headers=modern_headers(message))
    assert answer.status_code == 200, answer.text
    return answer.json()


def exercise(url: str) -> tuple[int, str]:
    """Requests of every kind (modern, legacy with a session, refused); how many reached the
    endpoint, and the legacy session's id."""
    with httpx.Client(timeout=10) as client:
        call(client, url, "shout", {"text": "loud"}, "shout-1")
        call(client, url, "warn", {"text": "modern"}, "warn-1")
        assert call(client, url, "crash", {}, "crash-1")["result"]["isError"] is True
        opened = client.post(f"{url}/mcp", json=INITIALIZE, headers=legacy_headers())
        session_id = opened.headers["mcp-session-id"]
        warned = client.post(
            f"{url}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": "warn-2",
                "method": "tools/call",
                "params": {"name": "warn", "arguments": {"text": "legacy"}},
            },
            headers=legacy_headers(session_id),
        )
        assert warned.status_code == 200, warned.text
        refused = client.post(f"{url}/mcp", content=b"{not json", headers=legacy_headers())
        assert refused.status_code == 400
        assert client.get(f"{url}/healthz").status_code == 200
    return 6, session_id


def test_stdout_is_json_lines_of_records_from_first_line_to_last(tmp_path: Path) -> None:
    with server(
        tmp_path, MCP_RECORDS="stdout", MCP_LOG_FORMAT="json", MCP_LOG_LEVEL="debug"
    ) as url:
        expected, _session = exercise(url)
    stdout = (tmp_path / "out").read_text()
    lines = stdout.splitlines()
    assert stdout.endswith("\n")
    records = [json.loads(line) for line in lines]  # every line, the first to the last
    assert all(record["v"] == 1 for record in records), records
    assert len([r for r in records if r["kind"] == "request"]) == expected
    stderr = (tmp_path / "err").read_text()
    for printed in STRAY_PRINTS:
        assert printed not in stdout
        assert printed in stderr  # moved, not lost


def test_plain_uvicorn_keeps_the_log_format_and_stdout_for_the_records(tmp_path: Path) -> None:
    """Issue 34: under ``uvicorn --factory server:create_app`` (no ``python -m server``)
    MCP_LOG_FORMAT=json was ignored and uvicorn's access lines were mixed into the records."""
    plain_uvicorn = ("-m", "uvicorn", "--factory", "server:create_app")
    with (
        server(
            tmp_path,
            plain_uvicorn,
            MCP_RECORDS="stdout",
            MCP_LOG_FORMAT="json",
            MCP_CATALOG="probe",
        ) as url,
        httpx.Client(timeout=10) as client,
    ):
        call(client, url, "add", {"a": 1, "b": 2}, "add-1")
        assert client.get(f"{url}/healthz").status_code == 200
    records = [json.loads(line) for line in (tmp_path / "out").read_text().splitlines()]
    assert records, "no record on stdout"
    assert all(record["v"] == 1 for record in records), records
    lines = [json.loads(line) for line in (tmp_path / "err").read_text().splitlines()]
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers, loggers


def test_json_log_lines_name_their_request(tmp_path: Path) -> None:
    with server(tmp_path, MCP_RECORDS="stdout", MCP_LOG_FORMAT="json") as url:
        _expected, session_id = exercise(url)
    records = {
        r["jsonrpc_id"]: r
        for r in map(json.loads, (tmp_path / "out").read_text().splitlines())
        if r.get("jsonrpc_id")
    }
    lines = [
        line for line in (tmp_path / "err").read_text().splitlines() if line not in STRAY_PRINTS
    ]
    logged = [json.loads(line) for line in lines]  # every log line is one JSON object
    for line in logged:
        assert {"time", "level", "logger", "message"} <= set(line), line
        assert line["time"].endswith("Z")
    assert {"uvicorn.error", "server.catalog.tools", "noisy_catalog"} <= {
        line["logger"] for line in logged
    }
    assert any(line["message"].startswith("Started server process") for line in logged)
    assert "request_id" not in next(line for line in logged if line["logger"] == "uvicorn.error")

    (modern,) = [line for line in logged if line["message"] == "warned about modern"]
    assert modern["request_id"] == records["warn-1"]["request_id"]
    assert (modern["era"], modern["method"], modern["client_name"]) == (
        "modern",
        "tools/call",
        "log-tests",
    )
    assert "session_id" not in modern
    (legacy,) = [line for line in logged if line["message"] == "warned about legacy"]
    assert legacy["request_id"] == records["warn-2"]["request_id"]
    assert (legacy["era"], legacy["session_id"], legacy["client_name"]) == (
        "legacy",
        session_id,
        "deploy-tests",  # the session's, from its initialize
    )
    (crashed,) = [line for line in logged if line["message"] == "tool crash raised"]
    assert crashed["request_id"] == records["crash-1"]["request_id"]
    assert crashed["level"] == "error"
    assert "Traceback" in crashed["exception"]
    assert "the noisy catalog crashed\non two lines" in crashed["exception"]


def test_text_log_gives_uvicorns_lines_our_format(tmp_path: Path) -> None:
    with (
        server(tmp_path, MCP_RECORDS="none", MCP_LOG_LEVEL="info") as url,
        httpx.Client(timeout=10) as client,
    ):
        call(client, url, "warn", {"text": "text"}, "warn-1")
    stderr = (tmp_path / "err").read_text().splitlines()
    started = [line for line in stderr if "Started server process" in line]
    assert len(started) == 1
    assert " INFO uvicorn.error: Started server process" in started[0]
    assert not [line for line in stderr if line.startswith("INFO:")]  # uvicorn's own format
    (warned,) = [line for line in stderr if "warned about text" in line]
    assert " WARNING noisy_catalog: warned about text [request_id=" in warned
    assert "era=modern method=tools/call client_name=log-tests]" in warned
    # Without stdout records, uvicorn's access log stays at info, on stderr like the rest.
    assert any('"POST /mcp HTTP/1.1" 200' in line for line in stderr)
    assert (tmp_path / "out").read_text() == "noisy catalog imported\n"


FORGED = "2026-12-01 16:24:32,819 WARNING server.app: FORGED"
HUGE_NAME = "evil\n" + FORGED + "\u2028" + FORGED + "\x1b[2K" + "x" * (3 * 1024 * 1024)


# A legacy session keeps at most 16 KiB of clientInfo (jsonrpc.MAX_DECLARED_BYTES).
SESSION_NAME = "evil\n" + FORGED + "\u2028" + FORGED + "\x1b[2K" + "y" * 12_000


def hostile_calls(url: str) -> None:
    """A 3 MB client name with line breaks (12 KB in a legacy session, which keeps no more),
    and a message quoting a newline, in each era."""
    client_info = {"name": HUGE_NAME, "version": "1\n" + FORGED}
    with httpx.Client(timeout=30) as client:
        message = modern_call(
            "warn",
            {"text": "a\n" + FORGED},
            "huge-1",
            **{"io.modelcontextprotocol/clientInfo": client_info},
        )
        answer = client.post(f"{url}/mcp", json=message, headers=modern_headers(message))
        assert answer.status_code == 200, answer.text[:200]
        session_info = {"name": SESSION_NAME, "version": "1"}
        initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "clientInfo": session_info}}
        opened = client.post(f"{url}/mcp", json=initialize, headers=legacy_headers())
        assert opened.status_code == 200, opened.text[:200]
        warned = client.post(
            f"{url}/mcp",
            json={
                "jsonrpc": "2.0",
                "id": "huge-2",
                "method": "tools/call",
                "params": {"name": "warn", "arguments": {"text": "legacy\n" + FORGED}},
            },
            headers=legacy_headers(opened.headers["mcp-session-id"]),
        )
        assert warned.status_code == 200, warned.text[:200]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_hostile_client_name_neither_forges_nor_swells_a_line(
    tmp_path: Path, log_format: str
) -> None:
    with server(
        tmp_path, MCP_RECORDS="none", MCP_LOG_LEVEL="info", MCP_LOG_FORMAT=log_format
    ) as url:
        hostile_calls(url)
    stderr = (tmp_path / "err").read_text()
    lines = stderr.split("\n")
    assert not [line for line in lines if line.startswith(FORGED[:10]) and "FORGED" in line[:60]]
    for separator in ("\r", "\x85", "\u2028", "\u2029", "\x1b"):
        assert separator not in stderr
    assert max(map(len, lines)) < 8 * 1024
    warned = [line for line in lines if "warned about" in line]
    assert len(warned) == 2
    if log_format == "json":
        names = [json.loads(line)["client_name"] for line in warned]
        assert all(name.startswith("evil\n" + FORGED) for name in names), names
        assert names[0].endswith(f"…[truncated, {len(HUGE_NAME)} chars]")
        assert names[1].endswith(f"…[truncated, {len(SESSION_NAME)} chars]")
        assert json.loads(warned[0])["message"] == "warned about a\n" + FORGED
    else:
        assert all('client_name="evil\\n2026-12-01' in line for line in warned), warned
        assert "warned about a\\n" + FORGED in warned[0]
