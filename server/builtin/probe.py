"""The ``probe`` catalog: the default, a little of everything, so a client can be exercised.

Every kind of primitive is here with a stub that does something real and says what it did:
tools returning each content type, structured output, progress, logging, asking the client
(elicitation, sampling, roots), list changes at runtime and resource updates, a long job that
runs as a task; text, binary and templated resources; two agent skills; prompts with
completable arguments. Point a client at it and see which
of these it actually uses.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field

from server import (
    Audio,
    Catalog,
    Context,
    EmbeddedResource,
    Image,
    PromptMessage,
    ResourceLink,
    Text,
    TextContents,
    ToolError,
    assistant,
    user,
)

# A 1x1 transparent PNG and a 10 ms silent WAV: tiny, valid media for the content-type tools.
PNG_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
WAV_SILENCE = (
    b"RIFF"
    + (36 + 160).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + (1).to_bytes(2, "little")
    + (1).to_bytes(2, "little")
    + (8000).to_bytes(4, "little")
    + (16000).to_bytes(4, "little")
    + (2).to_bytes(2, "little")
    + (16).to_bytes(2, "little")
    + b"data"
    + (160).to_bytes(4, "little")
    + b"\x00" * 160
)

catalog = Catalog(
    "mcp-http-server-probe",
    "0.1.0",
    title="MCP probe server",
    description="Every kind of MCP primitive, with honest stubs, for exercising clients.",
    instructions=(
        "This is a probe server for testing MCP clients. Tools echo, add, report progress, "
        "log, ask the user, and change the tool list; resources and prompts are examples."
    ),
)


class Sum(BaseModel):
    a: float
    b: float
    sum: float


@catalog.tool(annotations={"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False})
async def echo(text: Annotated[str, Field(description="Text to send back")]) -> str:
    """Return the given text unchanged."""
    return text


@catalog.tool(title="Add two numbers", annotations={"readOnlyHint": True, "openWorldHint": False})
async def add(a: float, b: float) -> Sum:
    """Add two numbers; the answer is structured content with an output schema."""
    return Sum(a=a, b=b, sum=a + b)


@catalog.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
async def server_time() -> dict[str, str]:
    """The server's current time in UTC, ISO 8601."""
    return {"utc": datetime.datetime.now(datetime.UTC).isoformat()}


@catalog.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
async def media_sampler() -> list[Any]:
    """One block of each content type: text, image, audio, embedded resource, resource link."""
    return [
        Text("Each content type follows."),
        Image(PNG_PIXEL, "image/png"),
        Audio(WAV_SILENCE, "audio/wav"),
        EmbeddedResource(TextContents("probe://readme", README, "text/markdown")),
        ResourceLink("probe://logo.png", "logo", mime_type="image/png"),
    ]


@catalog.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
async def count_slowly(
    ctx: Context,
    steps: Annotated[int, Field(ge=1, le=50, description="How many steps")] = 5,
    delay_ms: Annotated[int, Field(ge=0, le=2000, description="Pause per step")] = 100,
) -> str:
    """Count to `steps`, reporting progress and logging each step.

    Send a progress token and a log level with the request to see them.
    """
    for step in range(1, steps + 1):
        await asyncio.sleep(delay_ms / 1000)
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await ctx.info(f"counted {step}", logger="count_slowly")
    return f"Counted to {steps}."


@catalog.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
async def fail(message: str = "This tool always fails.") -> str:
    """Fail on purpose, with an error result the model can read."""
    raise ToolError(message)


@catalog.tool(annotations={"openWorldHint": False})
async def ask_name(ctx: Context) -> str:
    """Ask the user for their name (needs the client's elicitation capability)."""
    answer = await ctx.elicit(
        "What is your name?",
        {
            "type": "object",
            "properties": {"name": {"type": "string", "title": "Name"}},
            "required": ["name"],
        },
        key="name",
    )
    if answer.action != "accept" or not answer.content:
        return f"No name given ({answer.action})."
    return f"Hello, {answer.content.get('name')}!"


@catalog.tool(annotations={"openWorldHint": True})
async def ask_model(ctx: Context, question: str) -> str:
    """Ask the client's model a question through sampling (needs the sampling capability)."""
    reply = await ctx.sample(question, 200, key="answer")
    content = reply.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        return f"The model said: {content.get('text')}"
    return f"The model answered with {content!r}"


@catalog.tool(annotations={"readOnlyHint": True, "openWorldHint": False})
async def show_roots(ctx: Context) -> str:
    """List the client's roots (needs the roots capability)."""
    roots = await ctx.list_roots(key="roots")
    return "\n".join(root["uri"] for root in roots) or "The client has no roots."


@catalog.tool(annotations={"destructiveHint": False, "openWorldHint": False})
async def toggle_extra_tool() -> str:
    """Add or remove the tool `extra`, so list-changed notifications can be watched."""
    if catalog.remove_tool("extra"):
        return "Removed the tool 'extra'."

    async def extra() -> str:
        """A tool that exists only after toggle_extra_tool added it."""
        return "extra is here"

    catalog.tool(extra)
    return "Added the tool 'extra'."


@catalog.tool(annotations={"destructiveHint": False, "openWorldHint": False})
async def touch_resource(uri: str = "probe://counter") -> str:
    """Tell subscribers that a resource changed (and bump probe://counter)."""
    if uri == "probe://counter":
        _counter["value"] += 1
    catalog.notify_resource_updated(uri)
    return f"Notified subscribers of {uri}."


@catalog.tool(task_support="optional", annotations={"readOnlyHint": True, "openWorldHint": False})
async def long_job(
    ctx: Context,
    seconds: Annotated[int, Field(ge=0, le=3600, description="How long it works")] = 10,
    confirm: Annotated[bool, Field(description="Ask before finishing")] = False,
) -> str:
    """Work for `seconds` seconds, reporting progress each second, as a task when the client
    can poll (the tasks extension, or a `task` param in 2025-11-25); cancellable.

    With `confirm`, ask the user before finishing (the task waits in input_required).
    """
    for second in range(seconds):
        await ctx.report_progress(second, seconds, f"second {second} of {seconds}")
        await asyncio.sleep(1)
    if confirm:
        answer = await ctx.elicit(
            f"The job ran {seconds} s. Keep its result?",
            {"type": "object", "properties": {"keep": {"type": "boolean"}}, "required": ["keep"]},
            key="keep",
        )
        if answer.action != "accept" or not (answer.content or {}).get("keep"):
            return f"Worked {seconds} s; the result was discarded."
    where = f" as task {ctx.task_id}" if ctx.task_id else ""
    return f"Worked {seconds} s{where}."


README = """# MCP probe server

Tools: echo, add (structured), server_time, media_sampler (every content type),
count_slowly (progress and logs), fail (error result), ask_name (elicitation),
ask_model (sampling), show_roots (roots), toggle_extra_tool (list changes),
touch_resource (resource updates), long_job (a task: poll it, answer it, cancel it).
Skills: skill://try-the-probe/SKILL.md, skill://long-running-calls/SKILL.md.
"""
_counter = {"value": 0}


@catalog.resource(
    "probe://readme", name="readme", title="About this server", mime_type="text/markdown"
)
def readme() -> str:
    """What the probe server offers."""
    return README


@catalog.resource("probe://logo.png", name="logo", mime_type="image/png")
def logo() -> bytes:
    """A one-pixel PNG (binary resource)."""
    return PNG_PIXEL


@catalog.resource("probe://counter", name="counter", mime_type="application/json")
def counter() -> str:
    """A value that touch_resource increments; subscribe to see updates."""
    return f'{{"value": {_counter["value"]}}}'


@catalog.resource_template("probe://echo/{text}", name="echo", mime_type="text/plain")
def echo_resource(text: str) -> str:
    """A resource whose contents are the text in its URI."""
    return text


@catalog.completion(template="probe://echo/{text}", argument="text")
def complete_echo(value: str, arguments: Mapping[str, str]) -> list[str]:
    return [word for word in ("hello", "help", "world", "wonder") if word.startswith(value)]


@catalog.prompt(title="Greeting")
def greet(name: Annotated[str, Field(description="Who to greet")]) -> str:
    """A one-line greeting."""
    return f"Please write a warm greeting for {name}."


STYLES = ("brief", "detailed", "bullet points")


@catalog.prompt(title="Summarize a topic")
def summarize(
    topic: Annotated[str, Field(description="What to summarize")],
    style: Annotated[str, Field(description="brief, detailed or bullet points")] = "brief",
) -> list[PromptMessage]:
    """A two-message conversation asking for a summary."""
    return [
        user(f"Summarize {topic} in a {style} style."),
        assistant("Sure. What should I focus on?"),
        user(f"The key facts about {topic}."),
    ]


@catalog.completion(prompt="summarize", argument="style")
def complete_style(value: str, arguments: Mapping[str, str]) -> list[str]:
    return [style for style in STYLES if style.startswith(value)]


# Two small agent skills (the skills extension): how to try this server, and its tasks.
catalog.add_skills(Path(__file__).parent / "skills" / "probe")
