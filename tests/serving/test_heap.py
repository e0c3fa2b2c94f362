"""server.serving.heap: the C heap keeps what it freed, so a burst of large answers does not fault
its pages in again on every loop turn.

Run in fresh interpreters: what ran before in this one may have moved glibc's thresholds.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from server.serving.heap import keep_freed_heap

ROOT = Path(__file__).resolve().parents[2]

# One loop turn's answers, 40 of 100 KB, built and freed at once; prints the page faults per
# turn once the heap is warm. With "keep" first, server.serving.heap raises the thresholds.
BURSTS = """
import resource, sys
from server.serving.heap import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def turn():
    answers = [b"y" * 100_000 for _ in range(40)]
    del answers
for _ in range(5):
    turn()
before = faults()
for _ in range(50):
    turn()
print((faults() - before) / 50)
"""


def faults_per_turn(mode: str) -> float:
    # glibc's defaults, whatever this environment tunes with MALLOC_* variables.
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", BURSTS, mode],
        env=env,
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return float(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_freed_memory_is_kept_for_the_next_burst() -> None:
    default = faults_per_turn("default")
    kept = faults_per_turn("keep")
    # By default glibc hands the 4 MB back after each turn and faults it in again (about 950
    # pages a turn here); kept, the next turn reuses it.
    assert default > 100
    assert kept < 1


def test_it_can_be_called_again() -> None:
    first = keep_freed_heap()
    assert keep_freed_heap() == first
    assert first == (platform.libc_ver()[0] == "glibc")


def test_importing_the_heap_loads_neither_uvicorn_nor_the_app() -> None:
    # The folder's __init__ re-exports the Server on first use only, so a leaf stays a leaf.
    script = (
        "import sys\n"
        "import server.serving.heap\n"
        "loaded = sorted(name for name in ('uvicorn', 'server.app', 'server.serving.server')"
        " if name in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
