"""Tasks on the 2025-11-25 wire (server.legacy.tasks): the capability and tool-level
negotiation, task creation with a ``task`` param, tasks/get, tasks/result (with the questions
relayed to the client on its stream), tasks/list and tasks/cancel, all on the same service as
the tasks extension."""

import asyncio
import dataclasses
from typing import Any

import anyio
import httpx
import pytest

from server.app import create_app
from server.catalog import Catalog
from server.context import Context
from server.errors import InternalError, InvalidParams, McpError, MethodNotFound
from server.jsonrpc import Response
from server.legacy.tasks import RELATED_TASK
from server.settings import Settings
from server.state.memory import MemoryTaskStore
from server.tasks.service import TaskService
from tests.legacy.test_era import Harness, harness, make_era, next_message, published
from tests.support import mcp_client as mcp
from tests.support.polling import wait_until

pytestmark = pytest.mark.anyio

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def task_catalog() -> Catalog:
    catalog = Catalog("legacy-tasks", "1.0.0")

    @catalog.tool
    async def plain() -> str:
        return "plain"

    @catalog.tool(task_support="optional")
    async def job(ctx: Context, seconds: float = 0.05) -> str:
        await ctx.report_progress(1, 2, "half")
        await ctx.info("working")
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @catalog.tool(task_support="required")
    async def must_be_task() -> str:
        raise InternalError("broken on purpose")

    @catalog.tool(task_support="optional")
    async def confirm(ctx: Context) -> str:
        answer = await ctx.elicit("Sure?", CONFIRM, key="sure")
        return f"answer {answer.content}"

    return catalog


async def task_harness(version: str = "2025-11-25") -> Harness:
    era = make_era(task_catalog(), tasks=TaskService(MemoryTaskStore()))
    return await harness(era, version=version, capabilities={"elicitation": {}})


async def test_capability_and_tool_negotiation() -> None:
    h = await task_harness()
    assert h.era.capabilities("2025-11-25")["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    assert "extensions" not in h.era.capabilities("2025-11-25")
    assert "tasks" not in h.era.capabilities("2025-06-18")
    assert set(h.era.advertised("2025-11-25")) >= {"tasks/get", "tasks/result", "tasks/list"}
    tools = {tool["name"]: tool for tool in (await h.call("tools/list"))["tools"]}
    assert tools["job"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["plain"]
    with pytest.raises(MethodNotFound):
        await h.call("tools/call", {"name": "plain", "task": {}})
    with pytest.raises(MethodNotFound):
        await h.call("tools/call", {"name": "must_be_task"})
    # Without a task param an optional tool answers as usual.
    answered = await h.call("tools/call", {"name": "job"})
    assert answered["content"] == [{"type": "text", "text": "slept 0.05"}]


async def test_older_sessions_have_no_tasks() -> None:
    h = await task_harness("2025-06-18")
    with pytest.raises(MethodNotFound):
        await h.call("tasks/get", {"taskId": "x"})
    answered = await h.call("tools/call", {"name": "job", "task": {}})
    assert "task" not in answered  # the param means nothing to this version: ignored


async def test_a_task_runs_and_its_result_comes_with_the_related_task_key() -> None:
    h = await task_harness()
    created = await h.call(
        "tools/call", {"name": "job", "task": {"ttl": 60_000}, "_meta": {"progressToken": "p"}}
    )
    task = created["task"]
    assert set(task) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    assert (task["status"], task["ttl"]) == ("working", 60_000)
    assert "ttlMs" not in task
    got = await h.call("tasks/get", {"taskId": task["taskId"]})
    assert got["taskId"] == task["taskId"]
    assert "result" not in got
    result = await h.call("tasks/result", {"taskId": task["taskId"]})
    assert result["content"] == [{"type": "text", "text": "slept 0.05"}]
    assert result["_meta"] == {RELATED_TASK: {"taskId": task["taskId"]}}
    listed = await h.call("tasks/list")
    assert [entry["taskId"] for entry in listed["tasks"]] == [task["taskId"]]
    assert listed["tasks"][0]["status"] == "completed"


async def test_progress_and_logs_go_to_the_sessions_stream() -> None:
    h = await task_harness()
    standalone = h.runtime.open_stream(standalone=True)
    h.runtime.standalone = standalone
    created = await h.call(
        "tools/call", {"name": "job", "task": {}, "_meta": {"progressToken": "p"}}
    )
    await h.call("tasks/result", {"taskId": created["task"]["taskId"]})
    sent = published(standalone)
    methods = [message["method"] for message in sent]
    assert methods[:2] == ["notifications/progress", "notifications/message"]
    assert sent[0]["params"]["progressToken"] == "p"
    assert sent[0]["params"]["_meta"] == {RELATED_TASK: {"taskId": created["task"]["taskId"]}}


async def test_a_failed_task_answers_its_error_and_cancel_refuses_ended_tasks() -> None:
    h = await task_harness()
    created = await h.call("tools/call", {"name": "must_be_task", "task": {}})
    task_id = created["task"]["taskId"]
    with pytest.raises(McpError) as failed:
        await h.call("tasks/result", {"taskId": task_id})
    assert (failed.value.wire_code("legacy"), failed.value.message) == (-32603, "broken on purpose")
    with pytest.raises(InvalidParams, match="already ended"):
        await h.call("tasks/cancel", {"taskId": task_id})


async def test_cancel_answers_the_cancelled_task() -> None:
    h = await task_harness()
    created = await h.call("tools/call", {"name": "job", "task": {}, "arguments": {"seconds": 30}})
    cancelled = await h.call("tasks/cancel", {"taskId": created["task"]["taskId"]})
    assert cancelled["status"] == "cancelled"
    assert cancelled["taskId"] == created["task"]["taskId"]


async def test_tasks_result_relays_the_tasks_questions() -> None:
    h = await task_harness()
    created = await h.call("tools/call", {"name": "confirm", "task": {}})
    task_id = created["task"]["taskId"]
    waiting = asyncio.ensure_future(h.call("tasks/result", {"taskId": task_id}))
    question = await next_message(h.stream, 0)
    assert question["method"] == "elicitation/create"
    assert question["params"]["_meta"] == {RELATED_TASK: {"taskId": task_id}}
    assert h.era.accept_response(
        h.runtime, Response(question["id"], {"action": "accept", "content": {"ok": True}})
    )
    with anyio.fail_after(5):
        result = await waiting
    assert result["content"] == [{"type": "text", "text": "answer {'ok': True}"}]


async def test_another_sessions_subject_sees_nothing() -> None:
    h = await task_harness()
    created = await h.call("tools/call", {"name": "job", "task": {}})
    other = Harness(h.era, dataclasses.replace(h.session, owner="eve"))
    with pytest.raises(InvalidParams):
        await other.call("tasks/get", {"taskId": created["task"]["taskId"]})
    assert (await other.call("tasks/list"))["tasks"] == []


async def test_malformed_params_are_refused() -> None:
    h = await task_harness()
    for bad in ({"taskId": ""}, {"taskId": 5}, {}):
        with pytest.raises(InvalidParams):
            await h.call("tasks/get", bad)
    with pytest.raises(InvalidParams):
        await h.call("tasks/list", {"cursor": "forged"})
    with pytest.raises(InvalidParams):
        await h.call("tools/call", {"name": "job", "task": "soon"})


# -- over HTTP: the per-caller cap and the session's end -----------------------------------------


def quota_catalog() -> Catalog:
    catalog = Catalog("legacy-task-quota", "1.0.0")

    @catalog.tool(task_support="optional")
    async def wait_long() -> str:
        await asyncio.sleep(300)
        return "waited"

    return catalog


def task_call(number: int) -> dict[str, Any]:
    return mcp.legacy("tools/call", {"name": "wait_long", "arguments": {}, "task": {}}, number)


async def test_anonymous_tasks_count_per_address_and_a_sessions_delete_frees_them() -> None:
    # One address opened sessions and held every task slot of the server (one session's cap
    # at a time): the cap is per caller (the rate gate's client: the address when anonymous),
    # and the tasks of a session its client DELETEs are cancelled and free their slots.
    # drain_timeout_s: the tasks left running are cancelled on leaving, without the
    # default 25 s wait for them to finish.
    settings = Settings(
        _env_file=None, records=["none"], max_tasks_per_client=20, drain_timeout_s=0.1
    )
    app = create_app(settings, quota_catalog())

    def client_at(address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, client=(address, 40000))
        return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")

    async with (
        app.starlette.router.lifespan_context(app.starlette),
        client_at("127.0.0.1") as flooder,
        client_at("127.0.0.2") as other,
    ):
        first = await mcp.legacy_session(flooder)
        for number in range(20):
            assert "task" in (await first.call("tools/call", task_call(number)["params"]))["result"]
        second = await mcp.legacy_session(flooder)
        refused = await second.post(task_call(99))
        assert refused.status_code == 503, refused.text
        elsewhere = await mcp.legacy_session(other)
        created = await elsewhere.call("tools/call", task_call(1)["params"])
        assert created["result"]["task"]["status"] == "working"
        running = {task_id for task_id in app.tasks.running}
        assert len(running) == 21
        deleted = await flooder.delete("/mcp", headers=first.headers())
        assert deleted.status_code == 200
        await wait_until(lambda: len(app.tasks.running) == 1)  # its handlers stopped
        again = await second.call("tools/call", task_call(100)["params"])
        assert again["result"]["task"]["status"] == "working"
