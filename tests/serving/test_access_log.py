"""uvicorn's access log never prints a query string, nor do the records hold one.

A client may put a token in the URL (``?access_token=``): the authentication refuses it
(400), but uvicorn's access log, on at the info level, printed the path with its query string,
token included. :class:`server.serving.NoQueryString` cuts it off. Checked on the filter
alone, on a uvicorn in a thread (the log captured), and on a real ``python -m server`` (its
output and its records file).
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from server.app import create_app
from server.security.auth import new_token
from server.serving import NoQueryString
from server.settings import Settings
from tests.support.deploy_helpers import ServerProcess, read_records
from tests.support.live_server import ServerThread

SECRET = "s3cr3t-in-the-url"


def test_the_filter_cuts_the_query_string_off_uvicorns_access_line() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", f"/mcp?access_token={SECRET}&x=%3F", "1.1", 400),
        None,
    )
    assert NoQueryString().filter(record) is True  # kept, without its query
    assert record.getMessage() == '127.0.0.1:5000 - "GET /mcp HTTP/1.1" 400'


def test_a_uvicorn_in_a_thread_logs_the_path_without_its_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    app = create_app(Settings(_env_file=None, records=["none"], log_level="info"))
    running = ServerThread(app, log_level="info").start()
    try:
        assert running.server.config.access_log is True
        answer = httpx.get(f"{running.url}/mcp?access_token={SECRET}")
        assert answer.status_code == 400
        httpx.get(f"{running.url}/healthz?access_token={SECRET}")
    finally:
        running.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert any('"GET /mcp HTTP/1.1" 400' in line for line in lines), lines
    assert any('"GET /healthz HTTP/1.1" 200' in line for line in lines), lines
    # What the server logged (the test's own client, httpx, logs its URLs at INFO when an
    # earlier test left logging configured: not the server's doing).
    server_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("http")]
    assert not [line for line in server_lines if SECRET in line]


def test_a_token_in_the_url_is_neither_logged_nor_recorded(tmp_path: Path) -> None:
    token, digest = new_token()
    records = tmp_path / "records.jsonl"
    server = ServerProcess(
        tmp_path,
        MCP_LOG_LEVEL="info",
        MCP_AUTH="tokens",
        MCP_AUTH_TOKENS=digest,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(records),
    ).start()
    try:
        refused = httpx.post(
            f"{server.url}/mcp?access_token={token}&note={SECRET}",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert refused.status_code == 400  # a token in the URL is refused (RFC 6750)
    finally:
        server.stop()
    log = server.log()
    assert '"POST /mcp HTTP/1.1" 400' in log, log
    assert token not in log
    assert SECRET not in log
    (record,) = [r for r in read_records(records) if r["kind"] == "request"]
    assert record["path"] == "/mcp"
    assert record["status"] == 400
    text = records.read_text()
    assert token not in text
    assert SECRET not in text
