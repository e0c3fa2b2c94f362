"""server.serving and the logs: uvicorn gets our log configuration, and no access log when
the records go to stdout (they are the access log there, and stdout carries them alone)."""

from __future__ import annotations

import pytest
import uvicorn

from server import logs
from server.app import create_app
from server.serving import server_for
from server.settings import Settings


def config_for(**settings: object):
    # log_config=None: build the server without applying a configuration to this process.
    app = create_app(Settings(_env_file=None, **settings))  # type: ignore[arg-type]
    server = server_for(app, log_config=None)
    return server.config, app


def test_uvicorns_access_log_is_off_when_the_records_go_to_stdout() -> None:
    for records in (["stdout"], ["file", "stdout"]):
        config, _ = config_for(records=records, log_level="info", records_file="/dev/null")
        assert config.access_log is False
    config, _ = config_for(records=["none"], log_level="info")
    assert config.access_log is True


def test_uvicorn_is_given_our_format_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[object] = []
    # Seen where uvicorn applies it, without applying it to the test process.
    monkeypatch.setattr(
        uvicorn.Config, "configure_logging", lambda config: given.append(config.log_config)
    )
    server_for(create_app(Settings(_env_file=None, records=["none"], log_format="json")))
    assert given == [logs.dict_config("json", "info")]
    handler = logs.dict_config("json", "info")["handlers"]["stderr"]
    assert handler["()"] is logs.StderrHandler
