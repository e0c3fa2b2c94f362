"""A catalog whose tool sends nothing for as long as it is told, for the checks that silent
calls stay alive behind a proxy (``tests/e2e/test_nginx_silent_calls.py``).

Served as ``MCP_CATALOG=tests.support.silent_catalog:catalog`` by ``python -m server`` with
the repo root on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio

from server.catalog import Catalog

catalog = Catalog("silent-test", "1.0.0", title="Silent calls test catalog")


@catalog.tool
async def silent(seconds: float) -> str:
    """Sends nothing for ``seconds`` (no progress, no logs), then answers."""
    await asyncio.sleep(seconds)
    return f"silent for {seconds} s"
