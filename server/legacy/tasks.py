"""Tasks on the 2025-11-25 wire, served by the same task machinery as the tasks extension.

A session of 2025-11-25 or later sees the ``tasks`` capability when a tool can run as a task.
``tools/call`` with a ``task`` param answers ``{"task": {...}}`` at once and the handler runs
on (``forbidden`` refuses the param, ``required`` a call without it). ``tasks/get`` reads the
task; ``tasks/result`` waits and answers what the call would have (questions go to the client
on this call's stream; answers reach the task from any replica); ``tasks/list`` and
``tasks/cancel``. Progress, logs and status changes go to the session's GET stream. Every
method sees only the tasks of the session's subject (-32602 otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

from server.aio import create_task
from server.call_note import OK, note_outcome, note_target
from server.catalog import Catalog
from server.catalog.extensions import TASKS_EXTENSION
from server.catalog.tools import Tool
from server.context import Context, Exchange, InputRequest
from server.errors import (
    INTERNAL_ERROR,
    InternalError,
    InvalidParams,
    McpError,
    MethodNotFound,
    ToolError,
)
from server.jsonrpc import Request, encode_notification, optional_object, require_str
from server.legacy.eventstream import EventStream
from server.legacy.sessions import Session
from server.pagination import Pager
from server.protocol import TOOLS_CALL
from server.tasks.exchange import TaskExchange
from server.tasks.model import TaskEnded, TaskRecord, checked_task_id
from server.tasks.service import TaskService

TASKS_SINCE = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
RESULT_WAIT_S = 30.0


def runs_as_task(params: Mapping[str, Any], tool: Tool) -> bool:
    """Whether a ``tools/call`` of ``tool`` with ``params`` runs as a task (where the session
    has tasks): it asks for one, or the tool requires it."""
    return "task" in params or tool.task_support == "required"


class TaskFailure(McpError):
    """The JSON-RPC error a failed task ended with, answered again by ``tasks/result``."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(str(error.get("message", "The task failed")), error.get("data"))
        code = error.get("code")
        self._code = code if isinstance(code, int) else INTERNAL_ERROR

    def wire_code(self, era: Any) -> int:
        return self._code


class Relayed(InputRequest):
    """A question a task asked, put to the client as it was asked (its answer goes back raw)."""

    method: ClassVar[str] = ""
    capability: ClassVar[dict[str, Any]] = {}

    def __init__(self, key: str, wire: Mapping[str, Any], task_id: str) -> None:
        super().__init__(key)
        # The method of this one question: an instance value where InputRequest subclasses
        # fix it per class (the exchange reads ``request.method``).
        object.__setattr__(self, "method", str(wire.get("method", "")))
        params = wire.get("params")
        self.wire_params = dict(params) if isinstance(params, dict) else {}
        self.wire_params["_meta"] = {RELATED_TASK: {"taskId": task_id}}

    def params(self) -> dict[str, Any]:
        return self.wire_params

    def parse(self, response: Any) -> Any:
        if not isinstance(response, dict):
            raise ValueError("an answer must be an object")
        return response


def _client_of(session: Session) -> str:
    """The key a task counts under when the request came without the HTTP endpoint's (a test
    driving the era directly): the subject, else the session."""
    return f"sub:{session.owner}" if session.owner else f"session:{session.id}"


class LegacyTasks:
    def __init__(self, service: TaskService, catalog: Catalog, pager: Pager) -> None:
        self.service = service
        self.catalog = catalog
        self.pager = pager

    def available(self, version: str) -> bool:
        return version >= TASKS_SINCE and TASKS_EXTENSION in self.catalog.snapshot.capabilities.get(
            "extensions", {}
        )

    def routes(self, session: Session, request: Request) -> bool:
        """Whether this answers ``request`` (a task method, or a ``tools/call`` that involves
        tasks) rather than the dispatcher."""
        if not self.available(session.protocol_version):
            return False
        if request.method in TASK_HANDLERS:
            return True
        if request.method != TOOLS_CALL:
            return False
        name = request.params.get("name")
        tool = self.catalog.tools.get(name) if isinstance(name, str) else None
        return tool is not None and runs_as_task(request.params, tool)

    async def handle(
        self,
        session: Session,
        request: Request,
        context: Context,
        standalone: EventStream | None,
    ) -> dict[str, Any]:
        if request.method == TOOLS_CALL:
            return await self.call_tool(session, request, context, standalone)
        handler = TASK_HANDLERS.get(request.method)
        if handler is None:
            raise MethodNotFound(request.method)
        return await handler(self, session, request.params, context)

    async def list_tasks(
        self, session: Session, params: dict[str, Any], context: Context
    ) -> dict[str, Any]:
        offset = self.pager.offset("tasks", params.get("cursor"))
        page, more = await self.service.store.session_tasks(
            session.id, offset, self.pager.page_size
        )
        listed: dict[str, Any] = {
            "tasks": [task.task(legacy=True) for task in page if task.owner == session.owner]
        }
        if more:
            listed["nextCursor"] = self.pager.cursor("tasks", offset + self.pager.page_size)
        return listed

    async def get(
        self, session: Session, params: dict[str, Any], context: Context
    ) -> dict[str, Any]:
        found = await self.service.get(checked_task_id(params), session.owner)
        context.task_outcome = found.outcome()
        return found.task(legacy=True)

    async def cancel(
        self, session: Session, params: dict[str, Any], context: Context
    ) -> dict[str, Any]:
        task_id = checked_task_id(params)
        record, changed = await self.service.cancel(task_id, session.owner)
        context.task_outcome = record.outcome()
        if not changed:
            raise InvalidParams(f"Cannot cancel task {task_id}: it already ended ({record.status})")
        return record.task(legacy=True)

    async def result_of(
        self, session: Session, params: dict[str, Any], context: Context
    ) -> dict[str, Any]:
        return await self.result(checked_task_id(params), session, context)

    async def session_ended(self, session: Session) -> None:
        """The client ended ``session`` (DELETE). Without authentication its tasks are bound to
        it (no other context ties them to their requestor): they are cancelled and forgotten,
        so they stop holding their client's task slots. An authenticated subject's tasks are
        bound to the subject, who may still read them from another session, until their TTL.
        """
        if session.owner is None:
            await self.service.end_session(session.id)

    async def call_tool(
        self,
        session: Session,
        request: Request,
        context: Context,
        standalone: EventStream | None,
    ) -> dict[str, Any]:
        params = request.params
        name = require_str(params, "name")
        tool = self.catalog.tools[name]
        if "task" not in params:
            raise MethodNotFound(f"tools/call of {name} without a task (it runs only as one)")
        if tool.task_support == "forbidden":
            raise MethodNotFound(f"tools/call of {name} as a task (it never runs as one)")
        task = optional_object(params, "task")
        note_target(tool.name)
        record = await self.service.open(
            owner=session.owner,
            client=context.client_key or _client_of(session),
            session=session.id,
            era="legacy",
            tool=tool.name,
            ttl_ms=self.service.ttl(task.get("ttl")),
        )
        context.task_outcome = record.outcome()
        # The call answers with its task: that is its outcome, whatever the handler does next
        # (what it comes to is the task's, read through tasks/get and tasks/result).
        note_outcome(OK)
        task_context = self._task_context(record, context, standalone)
        runner = create_task(self._run(tool, optional_object(params, "arguments"), task_context))
        self.service.attach(record.task_id, runner)
        return {"task": record.task(legacy=True)}

    def _task_context(
        self, record: TaskRecord, context: Context, standalone: EventStream | None
    ) -> Context:
        """The handler's context for the task: what it sends goes to the session's GET stream
        (tagged with the task), progress only if the call carried a token."""
        token = context.progress_token
        related = {RELATED_TASK: {"taskId": record.task_id}}

        async def forward(method: str, params: dict[str, Any]) -> None:
            if method == "notifications/progress" and token is None:
                return
            if standalone is not None and not standalone.finished:
                standalone.publish(encode_notification(method, {**params, "_meta": related}))

        exchange: Exchange = TaskExchange(self.service, record.task_id, forward)
        return Context(
            exchange=exchange,
            method=TOOLS_CALL,
            request_id=context.request_id,
            era="legacy",
            protocol_version=context.protocol_version,
            client_capabilities=context.client_capabilities,
            client_info=context.client_info,
            log_level=context.log_level,
            progress_token=token if token is not None else record.task_id,
            task_id=record.task_id,
            # The handler sees who called, as a direct call's handler does.
            caller=context.caller,
            session_id=context.session_id,
            client_key=context.client_key,
            record=context.record,
            raw_headers=context.raw_headers,
        )

    async def _run(self, tool: Tool, arguments: dict[str, Any], context: Context) -> None:
        task_id = context.task_id
        assert task_id is not None
        try:
            result = await tool.call(arguments, context)
        except TaskEnded:
            return
        except McpError as error:
            await self.service.settle(task_id, error=error.to_wire("legacy"))
            return
        except Exception:
            await self.service.settle(task_id, error=InternalError("Internal error").to_wire())
            return
        finally:
            context.finish()
        await self.service.settle(task_id, result=result)

    async def result(self, task_id: str, session: Session, context: Context) -> dict[str, Any]:
        """Wait for the end of the task, relaying its questions to the client meanwhile."""
        while True:
            record = await self.service.wait(task_id, session.owner, RESULT_WAIT_S)
            if record.status == "input_required":
                if record.inputs:
                    questions: dict[str, InputRequest] = {
                        key: Relayed(key, wire, task_id) for key, wire in record.inputs.items()
                    }
                    try:
                        answers = await context.exchange.ask(questions)
                    except ToolError as refused:  # the client answered with an error, or late
                        raise InternalError(str(refused)) from None
                    await self.service.update(task_id, session.owner, answers)
                # The task takes the answers on its own time; the next wait ends at its next
                # status change (working again, more questions, or its end).
                continue
            if not record.terminal:
                continue
            context.task_outcome = record.outcome()
            if record.status == "completed":
                result = dict(record.result or {"content": []})
                meta = result.get("_meta")
                result["_meta"] = {
                    **(meta if isinstance(meta, dict) else {}),
                    RELATED_TASK: {"taskId": task_id},
                }
                return result
            if record.status == "failed":
                raise TaskFailure(record.error or {})
            raise TaskFailure({"code": INTERNAL_ERROR, "message": "The task was cancelled"})


# Each tasks method of this era and what answers it (tests/test_protocol.py checks it against
# the method table both ways); a method not here is not found, never taken for another.
TASK_HANDLERS: dict[
    str, Callable[[LegacyTasks, Session, dict[str, Any], Context], Awaitable[dict[str, Any]]]
] = {
    "tasks/list": LegacyTasks.list_tasks,
    "tasks/get": LegacyTasks.get,
    "tasks/cancel": LegacyTasks.cancel,
    "tasks/result": LegacyTasks.result_of,
}
