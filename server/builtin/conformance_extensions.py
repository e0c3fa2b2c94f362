"""Conformance fixtures of the extensions: tasks (SEP-2663) and skills (SEP-2640).

The tasks scenarios call these tools by name: ``greet`` (never a task), ``slow_compute`` (a
task when the client declares the extension: ``seconds`` of work, cancellable), ``failing_job``
(only as a task; ends with a tool error), ``protocol_error_job`` (ends with a protocol error:
the task fails), ``confirm_delete`` and ``multi_input`` (ask the client from inside the task),
and ``test_tool_with_task`` (asks in input-required rounds first, then goes on as a task). The
skills scenarios discover the skills under ``skills/conformance`` by themselves.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from pydantic import Field

from server import Catalog, Context, Elicitation, InternalError, Text, ToolResult

SKILLS = Path(__file__).parent / "skills" / "conformance"
MAX_SECONDS = 600
CONFIRM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "description": "Go ahead?"}},
    "required": ["confirm"],
}
NAME = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}


def add_extension_fixtures(catalog: Catalog) -> None:
    catalog.add_skills(SKILLS)

    @catalog.tool
    async def greet(name: str) -> str:
        """Greets someone; an ordinary call, never a task."""
        return f"Hello, {name}!"

    @catalog.tool(task_support="optional")
    async def slow_compute(
        ctx: Context,
        seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = 1,
        label: str = "job",
    ) -> str:
        """Works for `seconds` seconds (reporting progress), then answers; a task when the
        client declares the tasks extension, and cancellable."""
        whole = int(seconds)
        for second in range(whole):
            await ctx.report_progress(second, seconds, f"{label}: {second} of {seconds:g} s")
            await asyncio.sleep(1)
        await asyncio.sleep(seconds - whole)
        return f"{label}: computed for {seconds:g} s"

    @catalog.tool(task_support="required")
    async def failing_job() -> ToolResult:
        """Runs only as a task, and ends with a tool error after about a second."""
        await asyncio.sleep(1)
        return ToolResult([Text("failing_job failed, as it always does")], is_error=True)

    @catalog.tool(task_support="optional")
    async def protocol_error_job() -> str:
        """Ends with a protocol error (a failed task, not a tool error)."""
        await asyncio.sleep(0.2)
        raise InternalError("protocol_error_job hit an internal error, as it always does")

    @catalog.tool(task_support="optional")
    async def confirm_delete(filename: str, ctx: Context) -> str:
        """Asks the client to confirm, then deletes (pretends to delete) a file."""
        answer = await ctx.elicit(f"Delete {filename}?", CONFIRM)
        if answer.action == "accept" and (answer.content or {}).get("confirm"):
            return f"Deleted {filename}."
        return f"Kept {filename}."

    @catalog.tool(task_support="optional")
    async def multi_input(ctx: Context) -> str:
        """Asks two questions at once; the task waits for both answers."""
        name, confirm = await ctx.ask(
            Elicitation("What is your name?", NAME), Elicitation("Proceed?", CONFIRM)
        )
        return f"Got {name.content} and {confirm.content}."

    @catalog.tool(task_support="required", defer_task=True)
    async def test_tool_with_task(ctx: Context) -> str:
        """Asks for the user's name (input-required rounds), then goes on as a task."""
        answer = await ctx.elicit("What is your name?", NAME, key="user_name")
        await ctx.start_task("Greeting takes a moment")
        await asyncio.sleep(0.5)
        return f"Hello, {(answer.content or {}).get('name', 'stranger')}!"
