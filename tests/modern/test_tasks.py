"""The tasks extension on the 2026-07-28 wire, in-process: task creation, the DetailedTask of
tasks/get, answers through tasks/update, cancellation, gating and caller binding, extension
methods of the catalog (skills), and what an undeclared extension leaves out."""

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from server.catalog import Catalog
from server.catalog.extensions import SKILLS_EXTENSION, TASKS_EXTENSION
from server.context import Context
from server.dispatch import Dispatcher
from server.errors import InternalError, InvalidParams, MethodNotFound, MissingClientCapability
from server.modern.era import ModernEra
from server.modern.input_required import RequestStates
from server.pagination import Pager
from server.sealing import Sealer
from server.state.memory import MemoryTaskStore
from server.tasks.service import TaskService
from tests.modern.test_era import Sent, answer, as_json, make_request, raw_headers
from tests.support.polling import wait_until

pytestmark = pytest.mark.anyio

TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
ASKING = {"elicitation": {}, **TASKS}
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def task_catalog() -> Catalog:
    catalog = Catalog("tasks", "1.0.0")
    release = asyncio.Event()
    catalog.release = release  # type: ignore[attr-defined]

    @catalog.tool
    async def quick(name: str) -> str:
        return f"Hello, {name}!"

    @catalog.tool(task_support="optional")
    async def wait_for_release(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "halfway")
        await release.wait()
        return "released"

    @catalog.tool(task_support="required")
    async def tool_error() -> dict[str, Any]:
        raise InternalError("deliberately broken")

    @catalog.tool(task_support="optional")
    async def two_questions(ctx: Context) -> str:
        first = await ctx.elicit("First?", CONFIRM, key="first")
        second = await ctx.elicit("Second?", CONFIRM, key="first")  # the same key again
        return f"{first.content} {second.content}"

    @catalog.tool(task_support="required", defer_task=True)
    async def ask_then_task(ctx: Context) -> str:
        answer = await ctx.elicit("Name?", CONFIRM, key="who")
        await ctx.start_task("working on it")
        return f"done for {answer.content}"

    return catalog


@pytest.fixture
def service() -> TaskService:
    return TaskService(MemoryTaskStore())


@pytest.fixture
def era(service: TaskService) -> ModernEra:
    catalog = task_catalog()
    sealer = Sealer(b"t" * 32)
    return ModernEra(
        catalog,
        Dispatcher(catalog, Pager(sealer, 100)),
        RequestStates(sealer, 600),
        list_ttl_ms=60_000,
        discover_ttl_ms=300_000,
        cache_scope="public",
        tasks=service,
    )


async def run(
    era: ModernEra,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
    subject: str | None = "alice",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    request, sent_headers = make_request(method, params, capabilities=capabilities)
    if "taskId" in (params or {}):
        sent_headers["mcp-name"] = params["taskId"]  # type: ignore[index]
    sent_headers.update(headers or {})
    call = era.validate(request, raw_headers(sent_headers))
    call.subject, call.key_of = subject, lambda: f"sub:{subject}"
    return as_json(await answer(era, call, Sent()))


async def settled(era: ModernEra, task_id: str, **kwargs: Any) -> dict[str, Any]:
    for _ in range(500):
        got = await run(era, "tasks/get", {"taskId": task_id}, capabilities=TASKS, **kwargs)
        if got["status"] in ("completed", "failed", "cancelled"):
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} did not settle")


async def test_discover_advertises_tasks_only_as_an_extension(era: ModernEra) -> None:
    discover = await run(era, "server/discover")
    assert discover["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    assert "tasks" not in discover["capabilities"]
    assert set(era.advertised()) >= {"tasks/get", "tasks/update", "tasks/cancel"}


async def test_a_task_is_created_polled_and_completed(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "wait_for_release"}, capabilities=TASKS)
    assert created["resultType"] == "task"
    assert set(created) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"}
    assert created["status"] == "working"
    assert not {"result", "error", "inputRequests", "requestState", "task"} & set(created)
    assert len(created["taskId"]) >= 32  # unguessable
    task_id = created["taskId"]
    working = await run(era, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
    assert working["resultType"] == "complete"
    assert working["status"] == "working"
    assert "result" not in working
    era.catalog.release.set()  # type: ignore[attr-defined]
    done = await settled(era, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "released"}]
    assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})


async def test_progress_becomes_the_status_message(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "wait_for_release"}, capabilities=TASKS)
    await asyncio.sleep(0.05)
    got = await run(era, "tasks/get", {"taskId": created["taskId"]}, capabilities=TASKS)
    assert got["statusMessage"] == "halfway (1 of 2)"
    await run(era, "tasks/cancel", {"taskId": created["taskId"]}, capabilities=TASKS)


async def test_without_the_extension_an_optional_tool_answers_in_the_request(
    era: ModernEra,
) -> None:
    era.catalog.release.set()  # type: ignore[attr-defined]
    result = await run(era, "tools/call", {"name": "wait_for_release"})
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "released"}]
    # The old-style hint promotes nothing: the server decides, and quick never runs as a task.
    plain = await run(
        era,
        "tools/call",
        {"name": "quick", "arguments": {"name": "x"}, "task": {"ttl": 1}},
        capabilities=TASKS,
    )
    assert plain["resultType"] == "complete"


async def test_a_required_tool_refuses_a_client_without_the_extension(era: ModernEra) -> None:
    with pytest.raises(MissingClientCapability) as refused:
        await run(era, "tools/call", {"name": "tool_error"})
    assert refused.value.data == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


async def test_task_methods_need_the_extension_in_the_request(era: ModernEra) -> None:
    for method, params in (
        ("tasks/get", {"taskId": "x"}),
        ("tasks/update", {"taskId": "x", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "x"}),
    ):
        with pytest.raises(MissingClientCapability):
            await run(era, method, params)


async def test_removed_methods_and_unknown_tasks(era: ModernEra) -> None:
    for method in ("tasks/result", "tasks/list"):
        request, headers = make_request(method, {"taskId": "x"}, capabilities=TASKS)
        with pytest.raises(MethodNotFound):
            era.validate(request, raw_headers(headers))
    with pytest.raises(InvalidParams) as unknown:
        await run(era, "tasks/get", {"taskId": "nope"}, capabilities=TASKS)
    assert unknown.value.code == -32602


async def test_a_tasks_method_without_a_handler_is_not_found_not_taken_for_another(
    era: ModernEra,
) -> None:
    # A method routed here by mistake (tasks/result is the legacy era's) is not found; it must
    # not be answered as a cancel of the task it names.
    created = await run(era, "tools/call", {"name": "wait_for_release"}, capabilities=TASKS)
    task_id = created["taskId"]
    request, headers = make_request("tasks/get", {"taskId": task_id}, capabilities=TASKS)
    call = era.validate(request, raw_headers({**headers, "mcp-name": task_id}))
    call.subject = "alice"
    call.request.method = "tasks/result"
    tasks = era.extensions.tasks
    assert tasks is not None
    finished: list[bool] = []
    context = SimpleNamespace(finish=lambda: finished.append(True))  # what handle uses of one
    with pytest.raises(MethodNotFound):
        await tasks.handle(call, context)  # type: ignore[arg-type]
    assert finished == [True]
    got = await run(era, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
    assert got["status"] == "working"


async def test_a_protocol_error_fails_the_task(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "tool_error"}, capabilities=TASKS)
    failed = await settled(era, created["taskId"])
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": -32603, "message": "deliberately broken"}
    assert "result" not in failed


async def test_tasks_belong_to_their_caller(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "wait_for_release"}, capabilities=TASKS)
    for method in ("tasks/get", "tasks/cancel"):
        with pytest.raises(InvalidParams):
            await run(era, method, {"taskId": created["taskId"]}, capabilities=TASKS, subject="eve")
    with pytest.raises(InvalidParams):
        await run(era, "tasks/get", {"taskId": created["taskId"]}, capabilities=TASKS, subject=None)
    await run(era, "tasks/cancel", {"taskId": created["taskId"]}, capabilities=TASKS)


async def test_cancel_is_an_idempotent_empty_ack(era: ModernEra, service: TaskService) -> None:
    created = await run(era, "tools/call", {"name": "wait_for_release"}, capabilities=TASKS)
    task_id = created["taskId"]
    await wait_until(lambda: task_id in service.running)
    for _ in range(2):
        ack = await run(era, "tasks/cancel", {"taskId": task_id}, capabilities=TASKS)
        assert set(ack) == {"resultType", "_meta"}
        assert ack["resultType"] == "complete"
    assert (await settled(era, task_id))["status"] == "cancelled"
    await wait_until(lambda: task_id not in service.running)  # the handler was stopped


async def test_questions_are_answered_through_tasks_update(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "two_questions"}, capabilities=ASKING)
    task_id = created["taskId"]

    async def asked(key: str) -> dict[str, Any]:
        for _ in range(500):
            got = await run(era, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
            if got["status"] == "input_required" and key in got["inputRequests"]:
                return got
            await asyncio.sleep(0.01)
        raise AssertionError(f"never asked {key}")

    first = await asked("first")
    assert list(first["inputRequests"]) == ["first"]
    assert first["inputRequests"]["first"]["method"] == "elicitation/create"
    ignored = {"unknown": {"action": "accept"}}
    ack = await run(
        era, "tasks/update", {"taskId": task_id, "inputResponses": ignored}, capabilities=TASKS
    )
    assert ack["resultType"] == "complete"
    answer = {"first": {"action": "accept", "content": {"ok": True}}}
    await run(
        era, "tasks/update", {"taskId": task_id, "inputResponses": answer}, capabilities=TASKS
    )
    # A key is never reused over the task's life: the second "first" is asked as "first-2".
    second = await asked("first-2")
    assert list(second["inputRequests"]) == ["first-2"]
    answer = {"first-2": {"action": "accept", "content": {"ok": False}}}
    await run(
        era, "tasks/update", {"taskId": task_id, "inputResponses": answer}, capabilities=TASKS
    )
    done = await settled(era, task_id)
    assert done["result"]["content"][0]["text"] == "{'ok': True} {'ok': False}"


async def test_malformed_updates_are_refused(era: ModernEra) -> None:
    created = await run(era, "tools/call", {"name": "two_questions"}, capabilities=ASKING)
    responses: Any
    for responses in (None, [], {"first": 3}):
        with pytest.raises(InvalidParams):
            await run(
                era,
                "tasks/update",
                {"taskId": created["taskId"], "inputResponses": responses},
                capabilities=TASKS,
            )
    await run(era, "tasks/cancel", {"taskId": created["taskId"]}, capabilities=TASKS)


async def test_a_deferred_task_asks_in_rounds_first(era: ModernEra) -> None:
    first = await run(era, "tools/call", {"name": "ask_then_task"}, capabilities=ASKING)
    assert first["resultType"] == "input_required"
    assert "taskId" not in first
    second = await run(
        era,
        "tools/call",
        {
            "name": "ask_then_task",
            "inputResponses": {"who": {"action": "accept", "content": {"ok": True}}},
            "requestState": first["requestState"],
        },
        capabilities=ASKING,
    )
    assert second["resultType"] == "task"
    assert second["statusMessage"] == "working on it"
    assert "requestState" not in second
    done = await settled(era, second["taskId"])
    assert done["result"]["content"][0]["text"] == "done for {'ok': True}"


async def test_the_task_id_header_must_match(era: ModernEra) -> None:
    from server.errors import HeaderMismatch

    with pytest.raises(HeaderMismatch):
        await run(era, "tasks/get", {"taskId": "a"}, capabilities=TASKS, headers={"mcp-name": "b"})


async def test_catalog_extension_methods_are_served_only_while_declared(tmp_path: Path) -> None:
    skill = tmp_path / "demo"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: demo\ndescription: A demo\n---\nBody\n")
    catalog = Catalog()
    sealer = Sealer(b"s" * 32)
    era = ModernEra(
        catalog,
        Dispatcher(catalog, Pager(sealer, 100)),
        RequestStates(sealer, 600),
        list_ttl_ms=1234,
        discover_ttl_ms=300_000,
        cache_scope="private",
    )
    request, headers = make_request("skills/list")
    with pytest.raises(MethodNotFound) as missing:
        era.validate(request, raw_headers(headers))
    assert missing.value.status == 404
    catalog.add_skills(tmp_path)
    discover = await run(era, "server/discover")
    assert discover["capabilities"]["extensions"] == {SKILLS_EXTENSION: {"directoryRead": True}}
    listed = await run(era, "skills/list")
    assert listed["resultType"] == "complete"
    assert (listed["ttlMs"], listed["cacheScope"]) == (1234, "private")
    assert [entry["uri"] for entry in listed["skills"]] == ["skill://demo/SKILL.md"]
    got = await run(era, "skills/get", {"uri": "skill://demo/SKILL.md"})
    assert got["skill"]["frontmatter"]["name"] == "demo"
    assert "ttlMs" in got
    directory = await run(era, "resources/directory/read", {"uri": "skill://demo"})
    assert "ttlMs" not in directory
    assert directory["resources"][0]["uri"] == "skill://demo/SKILL.md"
    # No tasks service, no tasks surface, even with a task tool declared.
    assert "tasks/get" not in era.advertised()


async def test_the_probe_long_job_runs_as_a_task(service: TaskService) -> None:
    from server.builtin.probe import catalog

    sealer = Sealer(b"p" * 32)
    era = ModernEra(
        catalog,
        Dispatcher(catalog, Pager(sealer, 100)),
        RequestStates(sealer, 600),
        list_ttl_ms=60_000,
        discover_ttl_ms=300_000,
        cache_scope="public",
        tasks=service,
    )
    created = await run(
        era,
        "tools/call",
        {"name": "long_job", "arguments": {"seconds": 0, "confirm": True}},
        capabilities=ASKING,
    )
    task_id = created["taskId"]
    for _ in range(500):
        got = await run(era, "tasks/get", {"taskId": task_id}, capabilities=TASKS)
        if got["status"] == "input_required":
            break
        await asyncio.sleep(0.01)
    assert list(got["inputRequests"]) == ["keep"]
    keep = {"keep": {"action": "accept", "content": {"keep": True}}}
    await run(era, "tasks/update", {"taskId": task_id, "inputResponses": keep}, capabilities=TASKS)
    done = await settled(era, task_id)
    assert done["result"]["content"][0]["text"] == f"Worked 0 s as task {task_id}."
