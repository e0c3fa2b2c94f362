"""Shared pytest configuration: async tests run on asyncio through anyio's plugin, and the
end-to-end suites are marked ``slow`` so that ``pytest -m "not slow"`` is the inner loop."""

import asyncio
import os
import signal
import sys
import traceback
from pathlib import Path
from types import FrameType

import pytest

# Apps built by tests write no request records unless a test asks for a sink itself.
os.environ.setdefault("MCP_RECORDS", "none")

# The inner loop runs again and again: keep the compiled (assertion-rewritten) test modules
# even where PYTHONDONTWRITEBYTECODE is set, as on the project's machines (__pycache__ is
# git-ignored). Collecting takes about 5 s with them, 25 s without.
sys.dont_write_bytecode = False


E2E = Path(__file__).resolve().parent / "e2e"

# pytest runs on `-n auto` (pyproject's addopts): none (in process) for a single test file or
# node, where starting workers costs more than it saves; one more than the cores for the inner
# loop (`-m "not slow"`: mostly CPU, collection and in-process tests; 2 cores: 27.7 s with 3
# workers, 29.6-31.6 s with 2); two a core, at most 8, for a run with the slow tests, which
# mostly wait on servers, proxies and deadlines (232 s with 4 workers, 316 s with 2).
# `-n N` or PYTEST_XDIST_AUTO_NUM_WORKERS overrides it.
MAX_WORKERS = 8


def selects_one_file(args: list[str]) -> bool:
    files = {arg.split("::", 1)[0] for arg in args if not arg.startswith("-")}
    return len(files) == 1 and Path(next(iter(files))).is_file()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    if selects_one_file(config.args):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    inner_loop = "not slow" in (config.option.markexpr or "")
    cores = cores or 1
    workers = min(cores + 1 if inner_loop else cores * 2, MAX_WORKERS)
    return workers if workers > 1 else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/e2e/ starts processes, proxies or real clients: slow by folder,
    # so a new end-to-end test cannot forget its marker.
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.slow)


def awaiting(coro: object) -> traceback.StackSummary:
    """The frames a suspended coroutine waits in, down its chain of awaits."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append((frame, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return traceback.StackSummary.extract(frames)


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object) -> object:
    # pytest-timeout fails a hung test from SIGALRM, whose traceback ends in the event loop's
    # select: for an async test, show where each pending task waits, i.e. the line that hangs.
    result = yield
    fail = signal.getsignal(signal.SIGALRM)
    if callable(fail):

        def show_tasks_then_fail(signum: int, frame: FrameType | None) -> None:
            loop = asyncio._get_running_loop()
            if loop is not None:
                stacks = [
                    f"{task.get_name()}:\n{''.join(awaiting(task.get_coro()).format())}"
                    for task in asyncio.all_tasks(loop)
                ]
                item.config.get_terminal_writer().write(
                    "\n+++ where the pending tasks wait +++\n" + "\n".join(stacks)
                )
            fail(signum, frame)

        signal.signal(signal.SIGALRM, show_tasks_then_fail)
    return result


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server():
    """One real redis-server for the session's shared-state tests (see
    tests/support/redis_server.py)."""
    from tests.support.redis_server import RedisServer

    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
async def redis_client(redis_server):
    """A plain asyncio Redis client on the test redis-server, to look at what was written."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()
