"""server.transport.legacy_sse: the 2024-11-05 HTTP+SSE transport on a real uvicorn.

The official Python SDK's ``sse_client`` (``mcp`` 2.3.0) drives a live server on 127.0.0.1:
the ``endpoint`` event, initialize, lists, a call with progress and logs, a resource
subscription's update, elicitation, close; raw httpx checks what the SDK does not show (the
wire, refusals, records, the fallback on the MCP path, the mount prefix, the off switch).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from server.app import Application, create_app
from server.settings import Settings
from tests.support.live_server import ServerThread

PROBE_NAME = "mcp-http-server-probe"


def settings_for(tmp: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "catalog": "probe",
        "records": ["file"],
        "records_file": str(tmp / "records.jsonl"),
        "records_flush_ms": 10,
        "keepalive_s": 0.2,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def records_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sse-records")


@pytest.fixture(scope="module")
def live(records_dir: Path) -> Iterator[ServerThread]:
    running = ServerThread(create_app(settings_for(records_dir))).start()
    yield running
    running.stop()


@contextlib.asynccontextmanager
async def connect(url: str, **options: Any) -> AsyncIterator[Client]:
    options.setdefault("read_timeout_seconds", 10)
    async with Client(sse_client(url, timeout=10), mode="legacy", **options) as client:
        yield client


async def eventually(predicate: Callable[[], bool], limit: float = 5.0) -> None:
    with anyio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.01)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the SDK's sse_client --------------------------------------------------------------------


@pytest.mark.anyio
async def test_sdk_client_initializes_lists_and_calls(live: ServerThread) -> None:
    async with connect(f"{live.url}/sse") as client:
        assert client.protocol_version in ("2025-11-25", "2024-11-05", "2025-06-18", "2025-03-26")
        assert client.server_info is not None
        assert client.server_info.name == PROBE_NAME
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "add", "count_slowly", "ask_name"} <= tools
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.structured_content == {"a": 2.0, "b": 3.0, "sum": 5.0}
        failed = await client.call_tool("fail", {"message": "on purpose"})
        assert failed.is_error is True
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        assert "greet" in prompts
        read = await client.read_resource("probe://readme")
        assert read.contents


@pytest.mark.anyio
async def test_sdk_client_gets_progress_and_logs(live: ServerThread) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with connect(f"{live.url}/sse", logging_callback=on_log) as client:
        result = await client.call_tool(
            "count_slowly", {"steps": 3, "delay_ms": 10}, progress_callback=on_progress
        )
        assert text_of(result) == "Counted to 3."
        await eventually(lambda: len(logs) == 3 and len(progress) == 3)
    assert progress == [(float(n), 3.0, f"step {n} of 3") for n in range(1, 4)]
    assert [params.data for params in logs] == [f"counted {n}" for n in range(1, 4)]


@pytest.mark.anyio
async def test_sdk_client_gets_resource_updates(live: ServerThread) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with connect(f"{live.url}/sse", message_handler=on_message) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource("probe://readme")
        await client.call_tool("touch_resource", {"uri": "probe://readme"})
        await eventually(lambda: updates == ["probe://readme"])


@pytest.mark.anyio
async def test_sdk_client_answers_elicitation(live: ServerThread) -> None:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async with connect(f"{live.url}/sse", elicitation_callback=on_elicit) as client:
        result = await client.call_tool("ask_name", {})
        assert text_of(result) == "Hello, Ada Lovelace!"


@pytest.mark.anyio
async def test_closing_the_stream_ends_the_session(live: ServerThread) -> None:
    app = live.app
    async with connect(f"{live.url}/sse") as client:
        await client.list_tools()
        [session_id] = [sid for sid, runtime in app_held(app).items() if runtime]
    await eventually(lambda: session_id not in app_held(app))
    await eventually(lambda: app.runtimes.peek(session_id) is None)


def app_held(app: Application) -> dict[str, Any]:
    assert app.sse is not None
    return dict(app.sse.held)
