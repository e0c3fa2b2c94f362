"""server.serving.server: uvicorn that tells the app about shutdown first, tunes the collector,
keeps the C heap's freed memory, and skips an access log that would print nothing."""

from __future__ import annotations

import gc
import logging
import time

import httpx
import pytest
import uvicorn

from server.app import create_app
from server.serving import server as serving_server
from server.serving import server_for
from server.serving.idle_sweep import reading_first
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import modern, modern_headers


def test_the_collector_is_tuned_once_the_app_has_started() -> None:
    before = gc.get_threshold()
    thread = ServerThread(create_app(Settings(_env_file=None, records=["none"])))
    try:
        thread.start()
        deadline = time.monotonic() + 5
        while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # tuned just after uvicorn says it started
        # Start-up objects are frozen (out of every collection) and young collections are rarer.
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (10_000, 10, 10)
    finally:
        thread.stop()
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_collector_is_tuned_after_the_app_starts_and_before_the_socket_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its full collection takes tens of ms of CPU: with the socket open, a new replica's first
    requests waited for it (issue 35's rollout)."""
    seen: list[tuple[bool, bool]] = []
    app = create_app(Settings(_env_file=None, records=["none"]))
    thread = ServerThread(app)

    def tune_collector() -> None:
        listening = bool(getattr(thread.server, "servers", None))
        seen.append((app.lifecycle.started, listening))

    monkeypatch.setattr(serving_server, "tune_collector", tune_collector)
    try:
        thread.start()
        assert seen == [(True, False)]  # once: the app started, no socket yet
    finally:
        thread.stop()


def test_the_server_keeps_the_c_heaps_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def keep_freed_heap() -> bool:
        calls.append("kept")
        return True

    monkeypatch.setattr(serving_server, "keep_freed_heap", keep_freed_heap)
    thread = ServerThread(create_app(Settings(_env_file=None, records=["none"])))
    try:
        thread.start()
        assert calls == ["kept"]  # before uvicorn starts serving, once
    finally:
        thread.stop()
        gc.unfreeze()


def test_uvicorns_access_log_is_off_below_info_and_on_at_info() -> None:
    # Below info it would print nothing yet format its arguments for every response.
    quiet = server_for(create_app(Settings(_env_file=None, records=["none"], log_level="warning")))
    assert quiet.config.access_log is False
    chatty = server_for(create_app(Settings(_env_file=None, records=["none"], log_level="info")))
    assert chatty.config.access_log is True


def test_responses_do_not_name_the_server_software() -> None:
    assert (
        server_for(create_app(Settings(_env_file=None, records=["none"]))).config.server_header
        is False
    )


# -- which HTTP protocol: this server's on a verified uvicorn, uvicorn's own on any other --------


def test_this_servers_protocol_runs_only_on_a_verified_uvicorn(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="server.serving.server")
    settings = Settings(_env_file=None, records=["none"], coalesce_writes=True)
    monkeypatch.setattr(serving_server, "VERIFIED_UVICORN", frozenset({uvicorn.__version__}))
    assert isinstance(serving_server.http_protocol(settings), type)  # the protocol class
    assert "this server's, on uvicorn" in caplog.text
    caplog.clear()
    monkeypatch.setattr(serving_server, "VERIFIED_UVICORN", frozenset({"0.0.1"}))
    assert serving_server.http_protocol(settings) == "auto"
    # Never silent: one warning that names the release and what is lost.
    [fallback] = caplog.records
    assert fallback.levelno == logging.WARNING
    assert f"uvicorn's own, as uvicorn {uvicorn.__version__} is not a release" in caplog.text
    assert "coalesced writes" in caplog.text
    assert "MCP_SEND_TIMEOUT_S" in caplog.text
    caplog.clear()
    off = Settings(_env_file=None, records=["none"], coalesce_writes=False)
    monkeypatch.setattr(serving_server, "VERIFIED_UVICORN", frozenset({uvicorn.__version__}))
    # uvicorn's own, but for its keep-alive timer (tests/serving/test_idle_sweep.py).
    assert serving_server.http_protocol(off) is reading_first()
    assert "MCP_COALESCE_WRITES=false" in caplog.text


def test_on_an_unverified_uvicorn_the_server_serves_on_uvicorns_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serving_server, "VERIFIED_UVICORN", frozenset({"0.0.1"}))
    app = create_app(Settings(_env_file=None, records=["none"], coalesce_writes=True))
    thread = ServerThread(app)
    assert thread.server.config.http == "auto"
    try:
        thread.start()
        body = modern(
            "tools/call",
            {"name": "count_slowly", "arguments": {"steps": 2, "delay_ms": 10}},
            progressToken="p",
        )
        headers = modern_headers(body, Content_Type=None)
        answer = httpx.post(f"{thread.url}/mcp", json=body, headers=headers, timeout=10)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.text.count("notifications/progress") == 2
        assert "Counted to 2." in answer.text
    finally:
        thread.stop()
        gc.unfreeze()
