"""Shared pytest configuration: async tests run on asyncio through anyio's plugin."""

import os

import pytest

# Apps built by tests write no request records unless a test asks for a sink itself.
os.environ.setdefault("MCP_RECORDS", "none")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
