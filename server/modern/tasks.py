"""The tasks extension on the 2026-07-28 wire (SEP-2663, ``io.modelcontextprotocol/tasks``).

``tools/call`` of a ``task_support`` tool, from a client whose capabilities name the extension,
runs the handler in its own task and answers a flat ``CreateTaskResult`` once the task is
durably created: at once, or for a ``defer_task`` tool when the handler calls
``ctx.start_task()`` (its questions before that are ordinary input-required rounds). A
``required`` tool refuses a client without the extension (-32021). ``tasks/get`` answers the
DetailedTask, ``tasks/update`` and ``tasks/cancel`` an empty acknowledgement; all need the
extension (-32021) and see only the caller's tasks (-32602). ``tasks/result`` and
``tasks/list`` do not exist in this era (-32601).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from server.aio import create_task, current_task, running_loop
from server.call_note import OK, note_outcome, note_target, noted
from server.catalog import Catalog
from server.catalog.extensions import TASKS_EXTENSION
from server.catalog.tools import Tool
from server.context import Context
from server.errors import (
    InternalError,
    InvalidParams,
    McpError,
    MethodNotFound,
    MissingClientCapability,
)
from server.jsonrpc import Request, optional_object, require_str
from server.modern.input_required import InputRequired
from server.protocol import MODERN_TASK_METHODS, TOOLS_CALL
from server.tasks.exchange import TaskExchange
from server.tasks.model import TaskEnded, TaskRecord, checked_task_id
from server.tasks.service import TaskService

TASK_METHODS = MODERN_TASK_METHODS


class TaskCall(Protocol):
    """What this needs of a :class:`~server.modern.era.ModernCall`."""

    request: Request
    client_capabilities: dict[str, Any]
    subject: str | None
    task: dict[str, str] | None
    target: Any  # what the request names, resolved once by the era (a Tool for tools/call)

    @property
    def client_key(self) -> str: ...


Envelope = Callable[[str, dict[str, Any]], dict[str, Any]]
AskBack = Callable[[Any, Context, InputRequired], dict[str, Any]]


def declares_tasks(capabilities: Mapping[str, Any]) -> bool:
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def _missing() -> MissingClientCapability:
    return MissingClientCapability(
        {"extensions": {TASKS_EXTENSION: {}}}, "declare the tasks extension in _meta"
    )


class ModernTasks:
    def __init__(
        self,
        service: TaskService,
        catalog: Catalog,
        *,
        envelope: Envelope,
        input_required: AskBack,
        server_meta: dict[str, Any],
    ) -> None:
        self.service = service
        self.catalog = catalog
        self.envelope = envelope
        self.input_required = input_required
        self.server_meta = server_meta

    def routes(self, call: TaskCall) -> bool:
        """Whether a ``tools/call`` is answered here: its tool can run as a task and the client
        declared the extension, or the tool runs only as one (and the client is refused). The
        tool is the one the era resolved (``call.target``), not looked up again."""
        tool = call.target
        if not isinstance(tool, Tool) or tool.task_support == "forbidden":
            return False
        return tool.task_support == "required" or declares_tasks(call.client_capabilities)

    async def handle(self, call: TaskCall, context: Context) -> dict[str, Any]:
        method = call.request.method
        if method == TOOLS_CALL:
            return await self.call_tool(call, context)
        try:
            handler = TASK_HANDLERS.get(method)
            if handler is None:
                raise MethodNotFound(method)
            if not declares_tasks(call.client_capabilities):
                raise _missing()
            task_id = checked_task_id(call.request.params)
            return await handler(self, call, task_id)
        finally:
            context.finish()

    async def get(self, call: TaskCall, task_id: str) -> dict[str, Any]:
        record = await self.service.get(task_id, call.subject)
        call.task = record.outcome()
        return {"resultType": "complete", **record.detailed(), "_meta": self.server_meta}

    async def update(self, call: TaskCall, task_id: str) -> dict[str, Any]:
        responses = call.request.params.get("inputResponses")
        if not isinstance(responses, dict) or not all(
            isinstance(value, dict) for value in responses.values()
        ):
            raise InvalidParams("params.inputResponses must map keys to answer objects")
        await self.service.update(task_id, call.subject, responses)
        return {"resultType": "complete", "_meta": self.server_meta}

    async def cancel(self, call: TaskCall, task_id: str) -> dict[str, Any]:
        record, _ = await self.service.cancel(task_id, call.subject)
        call.task = record.outcome()
        return {"resultType": "complete", "_meta": self.server_meta}

    async def call_tool(self, call: TaskCall, context: Context) -> dict[str, Any]:
        params = call.request.params
        tool = self.catalog.tools[require_str(params, "name")]
        note_target(tool.name)
        if not declares_tasks(call.client_capabilities):
            context.finish()
            raise _missing()
        started: asyncio.Future[TaskRecord] = running_loop().create_future()
        context.task_starter = self._starter(call, tool, context, started)
        runner = create_task(
            self._run(tool, optional_object(params, "arguments"), context, started)
        )
        first: set[asyncio.Future[Any]] = {runner, started}
        try:
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not started.done():
                runner.cancel()  # the client went away before a task existed: stop the call
            raise
        if started.done():
            record = started.result()
            call.task = record.outcome()
            return {"resultType": "task", **record.task(), "_meta": self.server_meta}
        try:
            result = runner.result()
        except InputRequired as suspended:
            return self.input_required(call, context, suspended)
        finally:
            context.finish()
        return self.envelope(TOOLS_CALL, noted(result))

    def _starter(
        self, call: TaskCall, tool: Tool, context: Context, started: asyncio.Future[TaskRecord]
    ) -> Callable[[str | None], Awaitable[None]]:
        """What ``ctx.start_task()`` runs: the task, durably created, and the handler's context
        moved onto it (the request then answers with the task)."""
        service = self.service

        async def start(message: str | None) -> None:
            record = await service.open(
                owner=call.subject,
                client=call.client_key,
                session=None,
                era="modern",
                tool=tool.name,
                message=message,
            )
            # The request answers with the task: its outcome, whatever the handler does next.
            note_outcome(OK)
            context.task_id = record.task_id
            context.exchange = TaskExchange(service, record.task_id)
            # Progress becomes the status message whether or not a token was sent; the log
            # level stays: the exchange drops log messages (the extension has no place for them).
            context.progress_token = record.task_id
            runner = current_task()
            assert runner is not None
            service.attach(record.task_id, runner)
            started.set_result(record)

        return start

    async def _run(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        context: Context,
        started: asyncio.Future[TaskRecord],
    ) -> dict[str, Any]:
        """The handler, in its own asyncio task: before its task starts, its outcome is the
        request's; after, the task's."""
        service = self.service
        if not tool.defer_task:
            await context.start_task()
        try:
            result = await tool.call(arguments, context)
        except TaskEnded:
            return {}
        except (McpError, InputRequired, Exception) as failure:
            if not started.done():
                raise
            if isinstance(failure, McpError):
                error = failure.to_wire("modern")
            else:
                error = InternalError("Internal error").to_wire()
            await service.settle(started.result().task_id, error=error)
            return {}
        finally:
            if started.done():
                context.finish()
        if started.done():
            await service.settle(started.result().task_id, result=result)
        return result


# Each tasks method of this era and what answers it (tests/test_protocol.py checks it against
# the method table both ways); a method not here is not found, never taken for another.
TASK_HANDLERS: dict[str, Callable[[ModernTasks, TaskCall, str], Awaitable[dict[str, Any]]]] = {
    "tasks/get": ModernTasks.get,
    "tasks/update": ModernTasks.update,
    "tasks/cancel": ModernTasks.cancel,
}
