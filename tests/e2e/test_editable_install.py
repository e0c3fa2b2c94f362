"""A tool author's mypy sees ``server`` through an editable install of a checkout
(docs/decisions.md#editable-install-for-mypy): setuptools' import hook hid it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # a venv and a build

USER_CODE = """\
from server import Catalog

count: int = Catalog("mine", "1.0.0")  # mypy says so only when it sees server's types
"""


def test_mypy_type_checks_user_code_against_an_editable_install(tmp_path: Path) -> None:
    # Nothing but the install may show mypy the package (the interpreter's path is mypy's).
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "MYPYPATH")}
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    shutil.copytree(
        ROOT / "server", checkout / "server", ignore=shutil.ignore_patterns("__pycache__")
    )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(checkout)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    if installed.returncode != 0 and "No matching distribution" in installed.stderr:
        pytest.skip("no index to fetch the build backend from")
    assert installed.returncode == 0, installed.stderr
    (tmp_path / "user.py").write_text(USER_CODE)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(python), "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert "Cannot find implementation or library stub" not in checked.stdout, checked.stdout
    assert 'Incompatible types in assignment (expression has type "Catalog"' in checked.stdout
