"""A small catalog for the tests that run several replicas (``tests/e2e/test_replicas.py``).

Served as ``MCP_CATALOG=tests.support.replica_catalog:catalog`` by ``python -m server`` with the
repo root on ``PYTHONPATH``.
Each replica process has its own copy of this catalog: a change made through one replica
changes that replica's catalog only, and reaches the other replicas' streams only through the
shared notification bus (Redis) — which is what the tests look at.

- ``echo``: answers with its text (a call that needs no shared state).
- ``toggle_tool``: adds or removes the tool ``extra``: a tool list change on every call.
- ``touch``: says the resource at ``uri`` (default ``replica://counter``) was updated.
- ``ask_name``: asks the client for a name (elicitation): a server-to-client request in the
  legacy era, an input-required result in the 2026-07-28 era.
- ``ask_model``: asks the client's model (sampling), likewise.
- ``work``: runs ``seconds`` as a task (for a client that declares the tasks extension),
  noting its ``label`` in ``stopped_jobs`` if it is cancelled rather than finishing.
- resource ``replica://counter``: a counter that ``touch`` bumps.
"""

from __future__ import annotations

import asyncio

from server.catalog import Catalog
from server.context import Context
from tests.support.core_helpers import add_toggle_tool

catalog = Catalog("replica-test", "1.0.0", title="Replica test catalog")

COUNTER_URI = "replica://counter"
NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "title": "Name"}},
    "required": ["name"],
}
_counter = {"value": 0}
_stopped: list[str] = []


@catalog.tool
async def echo(text: str) -> str:
    """Return the given text unchanged."""
    return text


add_toggle_tool(catalog)


@catalog.tool
async def touch(uri: str = COUNTER_URI) -> str:
    """Tell subscribers the resource at `uri` changed (and bump the counter)."""
    if uri == COUNTER_URI:
        _counter["value"] += 1
    catalog.notify_resource_updated(uri)
    return f"touched {uri}"


@catalog.tool
async def ask_name(ctx: Context) -> str:
    """Ask the user for their name (elicitation)."""
    answer = await ctx.elicit("What is your name?", NAME_SCHEMA, key="name")
    if answer.action != "accept" or not answer.content:
        return f"no name ({answer.action})"
    return f"Hello, {answer.content.get('name')}!"


@catalog.tool
async def ask_model(ctx: Context, question: str = "2+2?") -> str:
    """Ask the client's model a question (sampling)."""
    reply = await ctx.sample(question, 50, key="answer")
    content = reply.get("content")
    text = content.get("text") if isinstance(content, dict) else content
    return f"The model said: {text}"


@catalog.resource(COUNTER_URI, name="counter", mime_type="application/json")
def counter() -> str:
    """A value that `touch` increments; subscribe to it to see updates."""
    return f'{{"value": {_counter["value"]}}}'


@catalog.tool(task_support="optional")
async def work(ctx: Context, seconds: float = 1.0, label: str = "job") -> str:
    """Work for `seconds` (a task, when the client can poll); cancellable."""
    try:
        await ctx.report_progress(0, seconds, f"{label} started")
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _stopped.append(label)
        raise
    return f"{label} done"


@catalog.tool
async def stopped_jobs() -> str:
    """The labels of the `work` calls this replica stopped before they finished."""
    return ",".join(_stopped)
