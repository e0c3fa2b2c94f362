"""From a Python function to what MCP needs: argument validation and JSON Schemas.

A handler's signature is read once, when it is declared: its parameters become a pydantic
model (validator and ``inputSchema``), its return annotation an optional ``outputSchema`` with
the serializer of its ``structuredContent``; :class:`~server.context.Context` parameters are
injected, not advertised. Numbers are finite everywhere; tool arguments are JSON, so a number
parameter takes a JSON number, never a string or a boolean (``1`` passes for a float, ``3.0``
for an int, as JSON Schema counts it); template variables and prompt arguments are text, so
there numbers are parsed from strings.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Strict,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import SchemaValidator

from server.catalog.content import CONTENT_TYPES, ToolResult


class _CompactSchema(GenerateJsonSchema):
    """pydantic's schema without the auto-generated titles ("A" for field ``a``)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        result = super().generate(schema, mode=mode)
        if isinstance(result, dict):
            result.pop("title", None)
        return result


class ArgumentsInvalid(Exception):
    """Arguments did not validate; the message lists every problem, for the model to read."""


@dataclass(frozen=True, slots=True)
class Parameters:
    """The validated call plan for a handler's parameters."""

    model: type[BaseModel]
    context_param: str | None
    names: tuple[str, ...]
    schema: dict[str, Any]
    validate: Callable[[Mapping[str, Any]], dict[str, Any]]

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The handler's keyword arguments, validated (a fresh dict the caller may extend)."""
        try:
            return self.validate(arguments)
        except ValidationError as exc:
            raise ArgumentsInvalid(describe_validation_error(exc)) from None


def fields_validator(model: type[BaseModel]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """What validating ``model`` yields as its field dict (exactly the declared parameters,
    in order, defaults filled in), without building the throwaway model instance: pydantic's
    own validator for the model's fields, with the model's config (a third of the time). A
    model whose schema is not plain fields (definitions, wrapped validators) uses the model's
    validator and takes the instance's dict."""
    core = model.__pydantic_core_schema__
    if core["type"] == "model" and core["schema"]["type"] == "model-fields":
        validator = SchemaValidator(core["schema"], core.get("config"))

        def validate_fields(arguments: Mapping[str, Any]) -> dict[str, Any]:
            fields: dict[str, Any] = validator.validate_python(arguments)[0]
            return fields

        return validate_fields
    validate_model = model.__pydantic_validator__.validate_python

    def validate_instance(arguments: Mapping[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = validate_model(arguments).__dict__
        return fields

    return validate_instance


def describe_validation_error(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return "Invalid arguments: " + "; ".join(problems)


def is_context_annotation(annotation: Any) -> bool:
    from server.context import Context  # local: context imports signatures' siblings

    return annotation is Context or (
        isinstance(annotation, type) and issubclass(annotation, Context)
    )


# Past 2**53 a float no longer holds every integer: such a JSON number (orjson also parses
# integers past 64 bits as floats) would reach the handler as a different integer.
_EXACT_FLOAT_INTEGERS = 2**53


def _integral_float(value: Any) -> Any:
    if type(value) is float and value.is_integer() and abs(value) <= _EXACT_FLOAT_INTEGERS:
        return int(value)
    return value


_JSON_FLOAT: Any = Annotated[float, Strict(), AllowInfNan(False)]
_JSON_INT: Any = Annotated[int, Strict(), BeforeValidator(_integral_float)]


def json_numbers(annotation: Any) -> Any:
    """``annotation`` with every ``int`` and ``float`` in it (through generics, unions and
    ``Annotated``) taking JSON numbers only. The user's own ``Annotated`` metadata comes after
    ours, so an explicit ``Field(strict=False)`` still wins."""
    if annotation is float:
        return _JSON_FLOAT
    if annotation is int:
        return _JSON_INT
    origin = get_origin(annotation)
    if origin is None or origin is typing.Literal:
        return annotation
    args = get_args(annotation)
    if origin is Annotated:
        return Annotated[(json_numbers(args[0]), *annotation.__metadata__)]
    rewritten = tuple(json_numbers(arg) for arg in args)
    if rewritten == args:
        return annotation
    if origin in (typing.Union, types.UnionType):
        return typing.Union[rewritten]  # noqa: UP007 (a tuple of members; X | Y needs two)
    if isinstance(annotation, types.GenericAlias):
        return types.GenericAlias(origin, rewritten)
    copy_with = getattr(annotation, "copy_with", None)
    return copy_with(rewritten) if callable(copy_with) else annotation


def read_parameters(
    func: Callable[..., Any], *, name: str, strict: bool = True, json_values: bool = True
) -> Parameters:
    """The parameter plan; ``strict`` rejects unknown arguments (off when an explicit schema
    is advertised, since it may name properties the function does not take).
    ``json_values`` is for JSON arguments (tools: numbers must be JSON numbers); without it
    the arguments are text (template variables, prompt arguments) and numbers are parsed."""
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{name}: *args and **kwargs cannot be described as a tool input")
        annotation = hints.get(param.name, Any)
        if is_context_annotation(annotation):
            context_param = param.name
            continue
        if param.name.startswith("_"):
            raise TypeError(f"{name}: parameter {param.name!r} starts with '_'")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (json_numbers(annotation) if json_values else annotation, default)
    config = ConfigDict(extra="forbid" if strict else "ignore", allow_inf_nan=False)
    model = create_model(f"{name}_arguments", __config__=config, **fields)
    schema = model.model_json_schema(schema_generator=_CompactSchema)
    schema.setdefault("properties", {})
    return Parameters(model, context_param, tuple(fields), schema, fields_validator(model))


_UNSTRUCTURED = (str, ToolResult, *CONTENT_TYPES)


def _is_unstructured(annotation: Any) -> bool:
    if annotation in (inspect.Signature.empty, None, type(None), Any):
        return True
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_is_unstructured(arg) for arg in get_args(annotation))
    if origin in (list, tuple, typing.Sequence, typing.Iterable) or (
        origin is not None and getattr(origin, "__name__", "") in ("Sequence", "Iterable")
    ):
        args = get_args(annotation)
        return bool(args) and all(_is_unstructured(arg) for arg in args if arg is not Ellipsis)
    return isinstance(annotation, type) and issubclass(annotation, _UNSTRUCTURED)


@dataclass(frozen=True, slots=True)
class Output:
    """How a structured return value becomes ``structuredContent``."""

    schema: dict[str, Any]
    adapter: TypeAdapter[Any]
    wrapped: bool

    def dump(self, value: Any) -> Any:
        """``value`` as ``structuredContent``, checked against the declared type first (a
        pydantic ValidationError if it does not fit: serialising it anyway would send content
        that breaks the tool's own outputSchema)."""
        data = self.adapter.dump_python(self.adapter.validate_python(value), mode="json")
        return {"result": data} if self.wrapped else data

    def check(self, structured: Any) -> None:
        """Raise a pydantic ValidationError if ``structured`` (already wire data, from a
        ToolResult) does not fit the declared type."""
        if self.wrapped:
            if not isinstance(structured, dict) or "result" not in structured:
                raise ValueError("structuredContent needs the 'result' member of its outputSchema")
            structured = structured["result"]
        self.adapter.validate_python(structured)


def read_output(func: Callable[..., Any]) -> Output | None:
    """The output plan for ``func``'s return annotation, or None for content-returning tools."""
    hints = typing.get_type_hints(func, include_extras=True)
    annotation = hints.get("return", inspect.Signature.empty)
    if get_origin(annotation) in (collections.abc.Awaitable, collections.abc.Coroutine):
        annotation = get_args(annotation)[-1]
    if _is_unstructured(annotation):
        return None
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    schema = adapter.json_schema(mode="serialization", schema_generator=_CompactSchema)
    # 2025-11-25 requires an object at the root; wrapping keeps one schema valid in both eras.
    if schema.get("type") != "object":
        wrapped_schema: dict[str, Any] = {
            "type": "object",
            "properties": {"result": schema},
            "required": ["result"],
        }
        defs = schema.pop("$defs", None)
        if defs:
            wrapped_schema["$defs"] = defs
        return Output(wrapped_schema, adapter, wrapped=True)
    return Output(schema, adapter, wrapped=False)


def description_from_doc(doc: str | None) -> str | None:
    """The docstring as a description: dedented, trailing whitespace removed."""
    if not doc:
        return None
    return inspect.cleandoc(doc).strip() or None
