"""deploy/image-smoke.sh's arguments: --help and a wrong argument are answered before the script
installs anything (it installs podman, buildah, debootstrap and runc as root when missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "image-smoke.sh"


def run(tmp_path: Path, *arguments: str) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run the script on a PATH where every tool it would install is missing and apt-get only
    notes that it was called, as root or not: (the run, whether apt-get was called)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("dirname", "sed", "cat", "mkdir", "date", "awk", "tr"):
        found = shutil.which(name)
        assert found is not None
        (tools / name).symlink_to(found)
    called = tmp_path / "apt-get-called"
    (tools / "id").write_text("#!/bin/sh\necho 0\n")  # as root, where it would install
    (tools / "apt-get").write_text(f"#!/bin/sh\n: > {called}\nexit 1\n")
    for stub in ("id", "apt-get"):
        (tools / stub).chmod(0o755)
    bash = shutil.which("bash")
    assert bash is not None
    env = {"PATH": str(tools), "HOME": str(tmp_path), "IMAGE_SMOKE_CACHE": str(tmp_path / "c")}
    ran = subprocess.run(
        [bash, str(SCRIPT), *arguments],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    return ran, called.exists()


@pytest.mark.skipif(os.name != "posix", reason="a bash script")
def test_help_says_what_it_does_and_installs_nothing(tmp_path: Path) -> None:
    ran, installed = run(tmp_path, "--help")
    assert (ran.returncode, installed) == (0, False), ran.stdout + ran.stderr
    assert "Usage: bash deploy/image-smoke.sh [--help]" in ran.stdout
    assert "installs podman, buildah, debootstrap, runc and curl" in ran.stdout


@pytest.mark.skipif(os.name != "posix", reason="a bash script")
def test_an_unknown_argument_is_refused_before_installing(tmp_path: Path) -> None:
    ran, installed = run(tmp_path, "--dry-run")
    assert (ran.returncode, installed) == (2, False), ran.stdout + ran.stderr
    assert "unknown argument '--dry-run'" in ran.stderr


@pytest.mark.skipif(os.name != "posix", reason="a bash script")
def test_the_stubbed_path_would_install(tmp_path: Path) -> None:
    """The check above can fail: with no argument the script reaches apt-get."""
    ran, installed = run(tmp_path)
    assert installed, ran.stdout + ran.stderr
    assert "SKIP" in ran.stdout
