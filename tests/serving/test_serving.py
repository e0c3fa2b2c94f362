"""server.serving: uvicorn that tells the app about shutdown first, tunes the collector, keeps
the C heap's freed memory, and skips an access log that would print nothing."""

from __future__ import annotations

import gc
import time

import pytest

from server import serving
from server.app import create_app
from server.serving import server_for
from server.settings import Settings
from tests.support.live_server import ServerThread


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


def test_the_server_keeps_the_c_heaps_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(serving, "keep_freed_heap", lambda: calls.append("kept") or True)
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
