"""deploy/catalog/Dockerfile: the recipe for an image serving your own catalog.

Static (no engine): hadolint is clean, it builds on the server's image and keeps its user,
puts the copied folder on the import path and names the catalog from one build argument, whose
default is the example beside it, which loads and answers. Its first RUN step (a shadowing
``server.py`` refused in one line, requirements installed) runs here against a scratch folder.
The real build, run and call is deploy/image-smoke.sh's part.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from server.catalog.loading import load_catalog
from tests.e2e.test_dockerfile import _ignored, hadolint
from tests.support.deploy_helpers import ROOT

RECIPE = ROOT / "deploy" / "catalog" / "Dockerfile"
EXAMPLE = ROOT / "deploy" / "catalog" / "example"


def instructions(name: str | None = None) -> list[dict[str, Any]]:
    found = DockerfileParser(path=str(RECIPE)).structure
    return [item for item in found if name is None or item["instruction"] == name]


def test_hadolint_is_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(RECIPE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_it_builds_on_the_servers_image_and_keeps_its_user() -> None:
    every = instructions()
    (base,) = instructions("FROM")
    assert base["value"] == "${SERVER_IMAGE}"
    before = [item["value"] for item in every[: every.index(base)] if item["instruction"] == "ARG"]
    assert "SERVER_IMAGE=mcp-http-server:latest" in before
    server_users = [
        item["value"]
        for item in DockerfileParser(path=str(ROOT / "Dockerfile")).structure
        if item["instruction"] == "USER"
    ]
    assert instructions("USER")[-1]["value"] == server_users[-1]
    assert not instructions("ADD")
    # The server image's CMD, HEALTHCHECK and port stand.
    assert not [item for item in every if item["instruction"] in {"CMD", "ENTRYPOINT", "EXPOSE"}]


def test_the_folder_is_importable_and_the_catalog_named_by_one_argument() -> None:
    (copy,) = instructions("COPY")
    source, target = copy["value"].split()
    assert source == "."
    envs = DockerfileParser(path=str(RECIPE)).envs
    assert envs["PYTHONPATH"] == target.rstrip("/")
    chosen = DockerfileParser(path=str(RECIPE), build_args={"CATALOG": "mine:catalog"}).envs
    assert chosen["MCP_CATALOG"] == "mine:catalog"
    # A typo fails the build: the last step loads the catalog named.
    assert "load_catalog('${CATALOG}')" in instructions("RUN")[-1]["value"]


def test_the_default_is_the_example_which_loads_and_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    spec = DockerfileParser(path=str(RECIPE)).envs["MCP_CATALOG"]
    catalog = load_catalog(spec)
    assert list(catalog.tools) == ["utc_offset"]
    tools = sys.modules[spec.partition(":")[0]]
    assert tools.utc_offset("Asia/Kolkata").utc_offset == "+05:30"  # no daylight saving there
    requirements = (EXAMPLE / "requirements.txt").read_text().splitlines()
    assert [line for line in requirements if line and not line.startswith("#")] == [
        "tzdata>=2024.1"
    ]


def test_the_examples_dockerignore_keeps_secrets_and_caches_out() -> None:
    patterns = [
        line.strip()
        for line in (EXAMPLE / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (".env", ".venv/bin/python", "__pycache__/tools.cpython-311.pyc", ".git/HEAD"):
        assert _ignored(path, patterns), path
    assert not _ignored("tools.py", patterns)
    assert not _ignored("requirements.txt", patterns)


def _first_step(folder: Path) -> subprocess.CompletedProcess[str]:
    """The recipe's first RUN, with /app/catalog pointing at ``folder``."""
    script = instructions("RUN")[0]["value"].replace("/app/catalog", str(folder))
    return subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("shadow", ["server.py", "server/__init__.py"])
def test_a_shadowing_server_module_fails_the_build_in_one_line(tmp_path: Path, shadow: str) -> None:
    (tmp_path / shadow).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / shadow).write_text("")
    result = _first_step(tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert re.search(r"shadow the server's package \(named server\); rename it", line), line


def test_a_folder_without_requirements_installs_nothing(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text("")
    result = _first_step(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
