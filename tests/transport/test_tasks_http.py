"""Tasks over a real socket: a task's status reaches the listen streams that follow its id
(and only its owner's), -32021 for a listen that names task ids without the extension, and the
2026-07-28 task methods answered over HTTP with their status codes."""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server import Catalog, Context
from server.app import create_app
from server.catalog.extensions import TASKS_EXTENSION
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import SUB_ID, modern, modern_headers
from tests.transport.test_modern import open_stream

# Tasks that run for real time: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


def nap_catalog() -> Catalog:
    catalog = Catalog("tasks-http", "1.0.0")

    @catalog.tool(task_support="optional")
    async def nap(ctx: Context, seconds: float = 0.3) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    return catalog


@pytest.fixture(scope="module")
def live() -> Iterator[ServerThread]:
    running = ServerThread(
        create_app(Settings(_env_file=None, keepalive_s=0.2), nap_catalog()),
        graceful_timeout=2,
        check_health=True,
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
async def client(live: ServerThread) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.url, timeout=5) as http:
        yield http


def message(method: str, params: dict[str, Any], capabilities: dict[str, Any], id: Any = 1):
    return modern(method, params, id, capabilities=capabilities)


async def send(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    headers = modern_headers(body)
    return await client.post("/mcp", content=json.dumps(body).encode(), headers=headers)


async def test_status_notifications_reach_a_listen_stream_that_follows_the_task(
    client: httpx.AsyncClient,
) -> None:
    # A second of work: time enough to open the stream before the task ends.
    call = message("tools/call", {"name": "nap", "arguments": {"seconds": 1.0}}, TASKS)
    task_id = (await send(client, call)).json()["result"]["taskId"]
    listen = message("subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, TASKS, "L")
    async with open_stream(client, listen, "text/event-stream") as events:
        ack = await events.next()
        assert ack is not None
        assert ack["params"]["notifications"] == {"taskIds": [task_id]}
        news = await events.next(limit=5)
    assert news is not None
    assert news["method"] == "notifications/tasks"
    assert news["params"]["_meta"] == {SUB_ID: "L"}
    assert news["params"]["taskId"] == task_id
    assert news["params"]["status"] == "completed"
    assert news["params"]["result"]["content"][0]["text"] == "slept 1.0"


async def test_naming_task_ids_needs_the_extension(client: httpx.AsyncClient) -> None:
    listen = message("subscriptions/listen", {"notifications": {"taskIds": ["x"]}}, {}, "L")
    response = await send(client, listen)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


async def test_task_methods_over_http(client: httpx.AsyncClient) -> None:
    refused = await send(client, message("tasks/get", {"taskId": "x"}, {}))
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, -32021)
    unknown = await send(client, message("tasks/get", {"taskId": "x"}, TASKS))
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (200, -32602)
    removed = await send(client, message("tasks/result", {"taskId": "x"}, TASKS))
    assert (removed.status_code, removed.json()["error"]["code"]) == (404, -32601)
    created = (await send(client, message("tools/call", {"name": "nap"}, TASKS))).json()
    task_id = created["result"]["taskId"]
    ack = await send(client, message("tasks/cancel", {"taskId": task_id}, TASKS))
    assert ack.json()["result"]["resultType"] == "complete"
    got = (await send(client, message("tasks/get", {"taskId": task_id}, TASKS))).json()
    assert got["result"]["status"] == "cancelled"


async def test_records_say_which_task_a_request_created_or_saw(tmp_path: Any) -> None:
    records = tmp_path / "records.jsonl"
    settings = Settings(_env_file=None, records=["file"], records_file=str(records))
    running = ServerThread(create_app(settings, nap_catalog()), graceful_timeout=2).start()
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=5) as http:
            call = message("tools/call", {"name": "nap", "arguments": {"seconds": 0.05}}, TASKS)
            task_id = (await send(http, call)).json()["result"]["taskId"]
            for _ in range(100):
                got = await send(http, message("tasks/get", {"taskId": task_id}, TASKS))
                if got.json()["result"]["status"] == "completed":
                    break
                await asyncio.sleep(0.02)
    finally:
        running.stop()
    written = [json.loads(line) for line in records.read_text().splitlines()]
    tasks = [(record["method"], record.get("task")) for record in written]
    assert tasks[0] == ("tools/call", {"id": task_id, "status": "working"})
    assert tasks[-1] == ("tasks/get", {"id": task_id, "status": "completed"})
