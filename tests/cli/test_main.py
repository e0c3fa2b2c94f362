"""server.cli.main: the command line's parsing, and how it ends when its reader goes away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from server.cli import main as entry
from server.cli import serve

ROOT = Path(__file__).resolve().parents[2]


def test_serves_options_work_without_the_serve_word(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[dict[str, Any]] = []

    def fake_serve(**options: Any) -> int:
        served.append(options)
        return 0

    monkeypatch.setattr(serve, "serve", fake_serve)
    assert entry.main(["--port", "9123", "--catalog", "probe"]) == 0
    assert entry.main(["serve", "--host", "127.0.0.1", "--reload"]) == 0
    assert served == [
        {"host": None, "port": 9123, "catalog": "probe", "reload": False},
        {"host": "127.0.0.1", "port": None, "catalog": None, "reload": True},
    ]


def test_help_and_an_unknown_option_are_still_argparse_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as helped:
        entry.main(["--help"])
    assert helped.value.code == 0
    assert "Without a command it serves" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        entry.main(["--no-such-option"])
    assert refused.value.code == 2


@pytest.mark.skipif(os.name != "posix", reason="pipes as POSIX has them")
def test_a_reader_that_went_away_ends_the_command_quietly() -> None:
    """``python -m server call ... | head``: the reader closes its end early."""
    reading, writing = os.pipe()
    os.close(reading)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "server", "token"],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(writing)
    assert done.stderr == ""
    assert done.returncode == entry.EXIT_PIPE_CLOSED


def test_serving_does_not_load_the_doctors_http_client() -> None:
    """httpx (and what its own CLI brings) is the doctor's: about 75 ms of every replica's
    start, on cores the other replicas serve from (issue 35's rolling restart)."""
    code = (
        "import sys; from server.cli import main, serve\n"
        "serve.serve = lambda **options: 0\n"
        "assert main.main(['--port', '9123']) == 0\n"
        "print('httpx' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == "False", done.stderr


def test_the_doctor_still_takes_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as helped:
        entry.main(["doctor", "--help"])
    assert helped.value.code == 0
    assert "--token" in capsys.readouterr().out
