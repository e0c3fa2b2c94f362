"""The catalog the chaos run's replicas serve (``tests/chaos/run.py``): quick calls, progress,
resource updates a client counts, calls silent for seconds, and tasks.

Served as ``MCP_CATALOG=tests.chaos.catalog:catalog`` by ``python -m server`` with the repo root
on ``PYTHONPATH``.
"""

from __future__ import annotations

import asyncio

from server.catalog import Catalog
from server.context import Context

catalog = Catalog("chaos", "1.0.0", title="Chaos run catalog")


@catalog.tool
async def echo(text: str) -> str:
    """Return the given text unchanged."""
    return text


@catalog.tool
async def touch(uri: str) -> str:
    """Tell the subscribers of `uri` it was updated (one notification per call)."""
    catalog.notify_resource_updated(uri)
    return f"touched {uri}"


@catalog.tool
async def count(ctx: Context, steps: int = 3, delay_ms: int = 20) -> str:
    """Count to `steps`, reporting progress at each step."""
    for step in range(1, steps + 1):
        await asyncio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, steps, f"step {step}")
    return f"Counted to {steps}."


@catalog.tool
async def silent(seconds: float) -> str:
    """Send nothing for `seconds` (no progress, no logs), then answer."""
    await asyncio.sleep(seconds)
    return f"silent for {seconds} s"


@catalog.tool(task_support="optional")
async def work(ctx: Context, seconds: float = 1.0) -> str:
    """Work for `seconds` (a task, when the client can poll)."""
    await ctx.report_progress(0, seconds, "started")
    await asyncio.sleep(seconds)
    return "done"


@catalog.resource_template("chaos://{name}", mime_type="text/plain")
def feed(name: str) -> str:
    """The resource each client subscribes to and touches: its name."""
    return name
