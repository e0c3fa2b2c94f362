"""``python -m server serve`` and the ``mcp-http-server`` script: flags over ``MCP_*``, the
current folder on the import path, a shadowing ``server.py`` explained, ``--reload``.

Each test serves from its own temporary folder holding the user's module, as a user would,
with real processes on free 127.0.0.1 ports, stopped by their PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.catalog.loading import CatalogNotFound, load_catalog
from server.cli.serve import shadowing
from server.serving import serve
from tests.support.deploy_helpers import ROOT, free_port, modern, modern_headers, stop_process

pytestmark = pytest.mark.slow  # processes

SCRIPT = Path(sys.executable).parent / "mcp-http-server"
MY_TOOLS = '''
from server import Catalog

catalog = Catalog("my-tools", "1.0.0")


@catalog.tool
def first() -> str:
    """The first tool."""
    return "one"
'''
SHADOW = """
from server import Catalog  # as a user would write it, in a file named server.py

catalog = Catalog("shadow", "1.0.0")
"""


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without MCP_* and without PYTHONPATH: only the folder is searched."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_") and k != "PYTHONPATH"}
    env.update({"MCP_LOG_LEVEL": "warning", "MCP_RECORDS": "none", **extra})
    return env


@contextlib.contextmanager
def started(argv: list[str], folder: Path, env: dict[str, str], port: int) -> Iterator[str]:
    log_path = folder / "server.log"
    with log_path.open("wb") as log:
        # Its own session: --reload starts a second process, ended with the group if need be.
        process = subprocess.Popen(
            argv, cwd=folder, env=env, stdout=log, stderr=log, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        yield url
        stop_process(process, signal.SIGTERM, grace_s=10)
        assert process.returncode == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the group this test started
            process.wait(5)


def tool_names(url: str) -> list[str]:
    message = modern("tools/list", {}, 1)
    answer = httpx.post(f"{url}/mcp", json=message, headers=modern_headers(message), timeout=5)
    return [tool["name"] for tool in answer.json()["result"]["tools"]]


def test_flags_override_the_environment(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    port = free_port()
    # The environment names another catalog and a port nobody listens on.
    env = clean_env(MCP_CATALOG="probe", MCP_PORT="1", PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--catalog", "my_tools:catalog"]  # fmt: skip
    with started(argv, tmp_path, env, port) as url:
        assert tool_names(url) == ["first"]


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_the_console_script_finds_a_catalog_in_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    port = free_port()
    argv = [str(SCRIPT), "serve", "--port", str(port), "--catalog", "my_tools:catalog"]
    with started(argv, tmp_path, clean_env(), port) as url:
        assert tool_names(url) == ["first"]


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_a_shadowing_server_py_is_explained_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text(SHADOW)
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    # python -m server finds the user's file first: Python's own circular-import error, which
    # no code of this package can intercept (none of it runs).
    failed = subprocess.run(
        [sys.executable, "-m", "server"], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip
    assert failed.returncode != 0
    assert "circular import" in failed.stderr
    # The script imports this package first: it serves another module of the folder, and says
    # what the file does.
    port = free_port()
    argv = [str(SCRIPT), "serve", "--port", str(port), "--catalog", "my_tools:catalog"]
    with started(argv, tmp_path, clean_env(), port) as url:
        assert tool_names(url) == ["first"]
    log = (tmp_path / "server.log").read_text()
    (line,) = [line for line in log.splitlines() if "shadows" in line]
    assert "server.py shadows this server's package" in line
    assert "rename it" in line
    # Asked to serve the shadowing file itself: one line and exit status 2, no traceback.
    refused = subprocess.run(
        [str(SCRIPT), "serve", "--port", str(free_port()), "--catalog", "server:catalog"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    (error,) = [line for line in refused.stderr.splitlines() if "MCP_CATALOG" in line]
    assert "'server' is the name of this package" in error
    assert "my_server.py" in error


def test_reload_restarts_on_a_change(tmp_path: Path) -> None:
    module = tmp_path / "my_tools.py"
    module.write_text(MY_TOOLS)
    port = free_port()
    argv = [sys.executable, "-m", "server", "serve", "--reload", "--port", str(port),
            "--catalog", "my_tools:catalog"]  # fmt: skip
    with started(argv, tmp_path, clean_env(PYTHONPATH=str(ROOT)), port) as url:
        assert tool_names(url) == ["first"]
        module.write_text(
            MY_TOOLS + '\n\n@catalog.tool\ndef second() -> str:\n    """Added."""\n    return "2"\n'
        )
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.HTTPError, KeyError):
                if tool_names(url) == ["first", "second"]:
                    break
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.2)


def test_reload_is_not_woken_by_the_records(tmp_path: Path) -> None:
    """Issue 34: under --reload every record written (records/ is in the watched folder) was
    a "1 change detected" line; the records' folder is excluded and the reloader is quiet."""
    (tmp_path / "my_tools.py").write_text(MY_TOOLS)
    port = free_port()
    argv = [sys.executable, "-m", "server", "serve", "--reload", "--port", str(port),
            "--catalog", "my_tools:catalog"]  # fmt: skip
    env = clean_env(PYTHONPATH=str(ROOT), MCP_RECORDS="file", MCP_LOG_LEVEL="info")
    with started(argv, tmp_path, env, port) as url:
        for _ in range(5):
            assert tool_names(url) == ["first"]
            time.sleep(0.3)
        time.sleep(1)
    assert (tmp_path / "records" / "mcp-requests.jsonl").stat().st_size > 0
    log = (tmp_path / "server.log").read_text()
    assert "change detected" not in log
    assert "changes detected" not in log


def test_the_reloader_excludes_the_records_folder_when_it_is_inside(tmp_path: Path) -> None:
    from server.serving.server import records_folders
    from server.settings import Settings

    inside = Settings(_env_file=None, records=["file"], records_file="records/r.jsonl")
    assert records_folders(inside, tmp_path) == ["records"]
    assert (tmp_path / "records").is_dir()
    outside = Settings(_env_file=None, records=["file"], records_file="/var/log/mcp/r.jsonl")
    assert records_folders(outside, tmp_path) == []
    assert records_folders(Settings(_env_file=None, records=["stdout"]), tmp_path) == []


# -- without processes --------------------------------------------------------------------------


def test_shadowing_finds_a_module_or_package_named_server(tmp_path: Path) -> None:
    assert shadowing(tmp_path) is None
    assert shadowing(ROOT) is None  # this checkout's own server/ is the package itself
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "__init__.py").write_text("")
    assert shadowing(tmp_path) == tmp_path / "server"
    (tmp_path / "server.py").write_text("")
    assert shadowing(tmp_path) == tmp_path / "server.py"


def test_a_missing_catalog_module_is_named_in_one_line() -> None:
    with pytest.raises(CatalogNotFound, match="no module 'no_such_module_here' on the import"):
        load_catalog("no_such_module_here:catalog")
    with pytest.raises(CatalogNotFound, match="'server' is the name of this package"):
        load_catalog("server:catalog")
    with pytest.raises(CatalogNotFound, match="embedding_apps has no attribute 'catalgo'"):
        load_catalog("tests.e2e.embedding_apps:catalgo")
    with pytest.raises(CatalogNotFound, match="not a Catalog"):
        load_catalog("tests.e2e.embedding_apps:MOUNT")


def test_reload_needs_the_catalog_by_name() -> None:
    from server import Catalog

    with pytest.raises(ValueError, match="reload needs the catalog by name"):
        serve(Catalog("object", "1.0.0"), reload=True, records=["none"])


@pytest.mark.parametrize("attribute", ["catalog", "make"])
def test_a_refused_skill_is_one_line_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attribute: str
) -> None:
    skill = tmp_path / "skills" / "lol"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: lol\ndescription: d\nmetadata: {a: &a [1], b: *a}\n---\n"
    )
    (tmp_path / "aliased_skills.py").write_text(
        "from pathlib import Path\n"
        "from server import Catalog\n"
        "def make():\n"
        "    catalog = Catalog('aliased', '1')\n"
        "    catalog.add_skills(Path(__file__).parent / 'skills')\n"
        "    return catalog\n"
        "if __import__('os').environ.get('ALIASED_AT_IMPORT'):\n"
        "    catalog = make()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    if attribute == "catalog":
        monkeypatch.setenv("ALIASED_AT_IMPORT", "1")
    monkeypatch.delitem(sys.modules, "aliased_skills", raising=False)
    with pytest.raises(CatalogNotFound, match="anchor or alias") as refused:
        load_catalog(f"aliased_skills:{attribute}")
    assert f"MCP_CATALOG='aliased_skills:{attribute}'" in str(refused.value)
    assert str(skill / "SKILL.md") in str(refused.value)
    assert "\n" not in str(refused.value)
