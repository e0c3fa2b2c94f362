"""A declared tool: its definition (built once) and how a call runs.

``Tool.from_function`` reads a typed Python function: parameters become the validated
``inputSchema`` (or an explicit JSON Schema is kept verbatim), the docstring the description,
the return annotation an ``outputSchema`` (or an explicit one is kept, and checked: see
``server.catalog.output``). ``Tool.call`` validates arguments, runs the handler (a sync one in
a worker thread, so a blocking tool cannot stall the server, unless its author declared it
``blocking=False``: see :mod:`server.catalog.offload`) and shapes whatever it returns into a
``CallToolResult``. Failures the model should see (invalid arguments,
:class:`~server.errors.ToolError`, crashes) become ``isError`` results; protocol errors and
control flow (input required, cancellation) pass through.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict, get_args

import orjson
from pydantic import ValidationError

from server.call_note import CRASH, note_outcome
from server.catalog.content import CONTENT_TYPES, ContentBlock, Icon, Text, ToolResult
from server.catalog.offload import invoker
from server.catalog.output import OutputSchemaCheck
from server.catalog.signatures import (
    ArgumentsInvalid,
    Output,
    Parameters,
    describe_validation_error,
    description_from_doc,
    read_output,
    read_parameters,
)
from server.catalog.visibility import Visibility, check_visibility
from server.context import Context
from server.errors import McpError, ToolError

log = logging.getLogger(__name__)

TaskSupport = Literal["forbidden", "optional", "required"]


class ToolOptions(TypedDict, total=False):
    """The keywords of ``Catalog.tool``, each as :meth:`Tool.from_function` takes it (the
    defaults are there)."""

    name: str | None
    title: str | None
    description: str | None
    input_schema: Mapping[str, Any] | None
    output_schema: Mapping[str, Any] | None
    structured_output: bool | None
    annotations: Mapping[str, Any] | None
    icons: Sequence[Icon] | None
    meta: Mapping[str, Any] | None
    scopes: Sequence[str]
    visibility: Visibility | None
    task_support: TaskSupport
    defer_task: bool
    blocking: bool


TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9\-]+$")
_HEADER_TYPES = {"string", "integer", "boolean"}


def _header_params(schema: Mapping[str, Any], tool: str) -> dict[str, str]:
    """``x-mcp-header`` marks: header suffix (lower-cased) -> top-level property name."""
    found: dict[str, str] = {}
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for prop, sub in properties.items():
            if not isinstance(sub, Mapping) or "x-mcp-header" not in sub:
                continue
            header = sub["x-mcp-header"]
            if not isinstance(header, str) or not HEADER_NAME.match(header):
                raise ValueError(f"{tool}: x-mcp-header of {prop!r} must be a header-safe token")
            if sub.get("type") not in _HEADER_TYPES:
                raise ValueError(
                    f"{tool}: x-mcp-header {header!r} needs a string, integer or boolean"
                )
            if header.lower() in found:
                raise ValueError(f"{tool}: x-mcp-header {header!r} is declared twice")
            found[header.lower()] = prop
    return found


class Tool:
    """A tool as the catalog holds it; build one with :meth:`from_function`."""

    def __init__(
        self,
        *,
        name: str,
        handler: Callable[..., Any],
        parameters: Parameters,
        input_schema: dict[str, Any],
        output: Output | None,
        output_schema: dict[str, Any] | None,
        description: str | None,
        title: str | None,
        annotations: Mapping[str, Any] | None,
        icons: Sequence[Icon] | None,
        meta: Mapping[str, Any] | None,
        scopes: Sequence[str] = (),
        visibility: Visibility | None = None,
        task_support: TaskSupport = "forbidden",
        defer_task: bool = False,
        output_check: OutputSchemaCheck | None = None,
        blocking: bool = True,
    ) -> None:
        if task_support not in get_args(TaskSupport):
            raise ValueError(f"{name}: task_support must be forbidden, optional or required")
        if defer_task and task_support == "forbidden":
            raise ValueError(f"{name}: defer_task needs task_support optional or required")
        if not TOOL_NAME.match(name):
            raise ValueError(f"tool name {name!r} must be 1-128 characters of A-Z a-z 0-9 _ . -")
        if input_schema.get("type") != "object":
            raise ValueError(f"{name}: inputSchema must have type 'object' at the root")
        self.name = name
        self.handler = handler
        self.scopes = tuple(scopes)
        self.visibility = check_visibility(f"tool {name}", visibility)
        self.task_support: TaskSupport = task_support
        self.defer_task = defer_task
        self.parameters = parameters
        # Whether its calls need nothing made around them (no Context, never a task): most
        # tools; Dispatcher.plain_tool reads it on every call.
        self.plain = parameters.context_param is None and task_support == "forbidden"
        self.output = output
        self.output_check = output_check
        self._warned_broken_output = False
        self.is_async = inspect.iscoroutinefunction(handler)
        self.invoke = invoker(handler, blocking=blocking)
        self.header_params = _header_params(input_schema, name)
        definition: dict[str, Any] = {"name": name}
        if title:
            definition["title"] = title
        # Clients (and the conformance suite) expect a description on every tool.
        definition["description"] = description or name
        definition["inputSchema"] = input_schema
        if output_schema is not None:
            definition["outputSchema"] = output_schema
        if annotations:
            definition["annotations"] = dict(annotations)
        if icons:
            definition["icons"] = [icon.to_wire() for icon in icons]
        if task_support != "forbidden":
            # 2025-11-25's tool-level negotiation; newer clients ignore it (the server decides).
            definition["execution"] = {"taskSupport": task_support}
        if meta:
            definition["_meta"] = dict(meta)
        self.definition = definition

    @classmethod
    def from_function(
        cls,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        structured_output: bool | None = None,
        annotations: Mapping[str, Any] | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        scopes: Sequence[str] = (),
        visibility: Visibility | None = None,
        task_support: TaskSupport = "forbidden",
        defer_task: bool = False,
        blocking: bool = True,
    ) -> Tool:
        tool_name = name or func.__name__
        parameters = read_parameters(func, name=tool_name, strict=input_schema is None)
        output = read_output(func) if structured_output is not False else None
        if structured_output and output is None:
            raise TypeError(f"{tool_name}: structured_output needs a structured return annotation")
        return cls(
            name=tool_name,
            handler=func,
            parameters=parameters,
            input_schema=dict(input_schema) if input_schema is not None else parameters.schema,
            output=output,
            output_schema=dict(output_schema)
            if output_schema is not None
            else (output.schema if output else None),
            output_check=OutputSchemaCheck(output_schema, tool=tool_name)
            if output_schema is not None
            else None,
            description=description or description_from_doc(func.__doc__),
            title=title,
            annotations=annotations,
            icons=icons,
            meta=meta,
            scopes=scopes,
            visibility=visibility,
            task_support=task_support,
            defer_task=defer_task,
            blocking=blocking,
        )

    async def call(self, arguments: Mapping[str, Any], context: Context | None) -> dict[str, Any]:
        """Run the tool; the ``CallToolResult`` wire dict. ``context`` may be None for a tool
        that takes none (the modern era makes none for it)."""
        parameters = self.parameters
        try:  # Parameters.bind written out (a call fewer on every call)
            kwargs = parameters.validate(arguments)
        except ValidationError as exc:
            return error_result(describe_validation_error(exc))
        except ArgumentsInvalid as invalid:
            return error_result(str(invalid))
        if parameters.context_param:
            kwargs[parameters.context_param] = context
        try:
            # A coroutine function's call is what invoke would return (without its lambda).
            value = await (self.handler(**kwargs) if self.is_async else self.invoke(kwargs))
        except ToolError as failure:
            return error_result(str(failure) or f"Tool {self.name} failed")
        except McpError:
            raise
        except Exception:
            log.exception("tool %s raised", self.name)
            note_outcome(CRASH)
            return error_result(f"Tool {self.name} failed with an internal error")
        return self.shape(value)

    def shape(self, value: Any) -> dict[str, Any]:
        if type(value) is str and self.output is None:
            return {"content": [{"type": "text", "text": value}]}  # the common case, directly
        if isinstance(value, ToolResult):
            if value.structured is not None:
                if self.output is not None:
                    try:
                        self.output.check(value.structured)
                    except ValueError as broken:  # pydantic's ValidationError is a ValueError
                        return self._broken_output(str(broken))
                if broken_schema := self._schema_violation(value.structured):
                    return self._broken_output(broken_schema, shown=True)
            return value.to_wire()
        if self.output is not None:
            try:
                structured = self.output.dump(value)
            except ValueError as broken:
                return self._broken_output(str(broken))
            if broken_schema := self._schema_violation(structured):
                return self._broken_output(broken_schema, shown=True)
            # A wrapped value (an int, a list...) is shown as itself, as the official SDK does:
            # the text block says 5, structuredContent {"result": 5}.
            shown = structured["result"] if self.output.wrapped else structured
            text = orjson.dumps(shown).decode()
            return {"content": [{"type": "text", "text": text}], "structuredContent": structured}
        if self.output_check is not None and isinstance(value, dict):
            # An explicit outputSchema and no structured annotation: the dict is the structured
            # result. It is checked (and sent) as the JSON it serialises to, the same JSON as
            # the text block, so what passed the check is exactly what the client reads.
            text = orjson.dumps(value, default=str).decode()
            structured = orjson.loads(text)
            if broken_schema := self._schema_violation(structured):
                return self._broken_output(broken_schema, shown=True)
            return {"content": [{"type": "text", "text": text}], "structuredContent": structured}
        return {"content": [block.to_wire() for block in to_content(value)]}

    def _schema_violation(self, structured: Any) -> str | None:
        """The first way ``structured`` breaks the explicit outputSchema, if there is one."""
        return self.output_check.first_violation(structured) if self.output_check else None

    def _broken_output(self, detail: str, *, shown: bool = False) -> dict[str, Any]:
        """What the tool returned does not fit its own outputSchema: never sent; the client
        gets an error result, the author hears of it in one WARNING per tool (a tool that
        always breaks it must not write a line per call), later breaks at DEBUG."""
        level = logging.DEBUG if self._warned_broken_output else logging.WARNING
        self._warned_broken_output = True
        log.log(
            level, "tool %s returned a value that breaks its outputSchema: %s", self.name, detail
        )
        message = f"Tool {self.name} returned a result that breaks its outputSchema"
        # ``shown``: a violation of an explicit schema is short and quotes no value, so the
        # model may read it; pydantic's messages quote the value, so they stay in the log.
        return error_result(f"{message}: {detail}" if shown else message)


def to_content(value: Any) -> list[ContentBlock]:
    """Whatever a tool returned, as content blocks."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Text(value)]
    if isinstance(value, CONTENT_TYPES):
        return [value]
    if isinstance(value, (list, tuple)):
        blocks: list[ContentBlock] = []
        for item in value:
            blocks.extend(to_content(item))
        return blocks
    return [Text(orjson.dumps(value, default=str).decode())]


def error_result(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}
