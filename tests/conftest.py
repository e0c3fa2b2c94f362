"""Shared pytest configuration: async tests run on asyncio through anyio's plugin, and the
end-to-end suites are marked ``slow`` so that ``pytest -m "not slow"`` is the inner loop."""

import os
from pathlib import Path

import pytest

# Apps built by tests write no request records unless a test asks for a sink itself.
os.environ.setdefault("MCP_RECORDS", "none")


E2E = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/e2e/ starts processes, proxies or real clients: slow by folder,
    # so a new end-to-end test cannot forget its marker.
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.slow)


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
