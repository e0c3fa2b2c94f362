"""A declared prompt: its definition (name, arguments) and how ``prompts/get`` renders it.

Prompt arguments are strings on the wire; they come from the function's parameters (a
parameter without a default is required). A prompt function returns a string (one user
message), a :class:`~server.catalog.content.PromptMessage`, or a list of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from server.catalog.completion import Completer
from server.catalog.content import CONTENT_TYPES, Icon, PromptMessage, Text
from server.catalog.offload import invoker
from server.catalog.signatures import ArgumentsInvalid, description_from_doc, read_parameters
from server.catalog.visibility import Visibility, check_visibility
from server.context import Context
from server.errors import InvalidParams


class PromptOptions(TypedDict, total=False):
    """The keywords of ``Catalog.prompt``, each as :class:`Prompt` takes it."""

    name: str | None
    title: str | None
    description: str | None
    icons: Sequence[Icon] | None
    meta: Mapping[str, Any] | None
    blocking: bool
    scopes: Sequence[str]
    visibility: Visibility | None


class Prompt:
    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        icons: Sequence[Icon] | None = None,
        meta: Mapping[str, Any] | None = None,
        blocking: bool = True,
        scopes: Sequence[str] = (),
        visibility: Visibility | None = None,
    ) -> None:
        self.name = name or func.__name__
        self.scopes = tuple(scopes)
        self.visibility = check_visibility(f"prompt {self.name}", visibility)
        self.handler = func
        self.is_async = inspect.iscoroutinefunction(func)
        self.invoke = invoker(func, blocking=blocking)
        self.parameters = read_parameters(func, name=self.name, strict=False, json_values=False)
        self.completers: dict[str, Completer] = {}
        properties = self.parameters.schema.get("properties", {})
        required = set(self.parameters.schema.get("required", []))
        self.required = required
        arguments = []
        for arg_name in self.parameters.names:
            argument: dict[str, Any] = {"name": arg_name}
            arg_description = properties.get(arg_name, {}).get("description")
            if arg_description:
                argument["description"] = arg_description
            argument["required"] = arg_name in required
            arguments.append(argument)
        definition: dict[str, Any] = {"name": self.name}
        if title:
            definition["title"] = title
        definition["description"] = description or description_from_doc(func.__doc__) or self.name
        if arguments:
            definition["arguments"] = arguments
        if icons:
            definition["icons"] = [icon.to_wire() for icon in icons]
        if meta:
            definition["_meta"] = dict(meta)
        self.definition = definition

    async def get(self, arguments: Mapping[str, Any], context: Context) -> dict[str, Any]:
        missing = sorted(self.required - set(arguments))
        if missing:
            raise InvalidParams(
                f"Missing required argument(s) for prompt {self.name}: {', '.join(missing)}"
            )
        try:
            kwargs = self.parameters.bind(arguments)
        except ArgumentsInvalid as invalid:
            raise InvalidParams(f"Prompt {self.name}: {invalid}") from None
        if self.parameters.context_param:
            kwargs[self.parameters.context_param] = context
        value = await self.invoke(kwargs)
        result: dict[str, Any] = {"messages": [message.to_wire() for message in to_messages(value)]}
        description = self.definition.get("description")
        if description:
            result["description"] = description
        return result


def to_messages(value: Any) -> list[PromptMessage]:
    if isinstance(value, str):
        return [PromptMessage("user", Text(value))]
    if isinstance(value, PromptMessage):
        return [value]
    if isinstance(value, CONTENT_TYPES):
        return [PromptMessage("user", value)]
    if isinstance(value, (list, tuple)):
        messages: list[PromptMessage] = []
        for item in value:
            messages.extend(to_messages(item))
        return messages
    raise TypeError(f"a prompt returned {type(value).__name__}; return str or PromptMessage(s)")
