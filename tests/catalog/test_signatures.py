"""server.catalog.signatures: a Python signature becomes a validator, inputSchema and
outputSchema."""

import typing
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from server.catalog.content import Image, Text, ToolResult
from server.catalog.signatures import (
    ArgumentsInvalid,
    description_from_doc,
    read_output,
    read_parameters,
)
from server.context import Context


class Point(BaseModel):
    x: int
    y: int


def test_parameters_become_a_compact_object_schema():
    def handler(a: int, b: Annotated[str, Field(description="The b")] = "x") -> str:
        return ""

    plan = read_parameters(handler, name="handler")
    assert plan.schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string", "default": "x", "description": "The b"},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert plan.names == ("a", "b")
    assert plan.context_param is None


def test_no_parameters_still_has_properties():
    plan = read_parameters(lambda: None, name="empty")
    assert plan.schema["type"] == "object"
    assert plan.schema["properties"] == {}


def test_context_parameter_is_injected_not_advertised():
    def handler(ctx: Context, text: str) -> str:
        return text

    plan = read_parameters(handler, name="h")
    assert plan.context_param == "ctx"
    assert plan.names == ("text",)
    assert "ctx" not in plan.schema["properties"]


def test_context_subclass_is_recognised():
    class MyContext(Context):
        pass

    def handler(c: MyContext) -> None:
        return None

    assert read_parameters(handler, name="h").context_param == "c"


def test_bind_validates_and_converts():
    def handler(count: int, ratio: float = 0.5) -> None:
        return None

    plan = read_parameters(handler, name="h")
    assert plan.bind({"count": 3}) == {"count": 3, "ratio": 0.5}
    # JSON does not let a client choose between 1 and 1.0, nor JSON Schema between 3.0 and 3.
    assert plan.bind({"count": 3.0, "ratio": 1}) == {"count": 3, "ratio": 1.0}
    assert type(plan.bind({"count": 3.0})["count"]) is int


def numbers(
    count: int,
    ratio: float,
    ratios: Sequence[float] = (),
    limit: int | None = None,
    scale: Annotated[float, Field(ge=0)] = 1.0,
    weights: dict[str, float] | None = None,
    pair: tuple[int, float] = (0, 0.0),
) -> None:
    return None


@pytest.mark.parametrize(
    ("arguments", "where", "problem"),
    [
        ({"ratio": "NaN"}, "ratio", "valid number"),
        ({"ratio": "nan"}, "ratio", "valid number"),
        ({"ratio": "inf"}, "ratio", "valid number"),
        ({"ratio": "-Infinity"}, "ratio", "valid number"),
        ({"ratio": "1e400"}, "ratio", "valid number"),
        ({"ratio": "0.5"}, "ratio", "valid number"),
        ({"ratio": float("nan")}, "ratio", "finite number"),
        ({"ratio": float("inf")}, "ratio", "finite number"),
        ({"ratio": True}, "ratio", "valid number"),
        ({"count": "3"}, "count", "valid integer"),
        ({"count": True}, "count", "valid integer"),
        ({"count": 2.5}, "count", "valid integer"),
        ({"count": float("inf")}, "count", "valid integer"),
        # orjson reads an integer past 64 bits as a float: refused, not silently rounded.
        ({"count": 1.2345678901234568e29}, "count", "valid integer"),
        ({"ratios": [1, "2"]}, "ratios.1", "valid number"),
        ({"ratios": [1, float("inf")]}, "ratios.1", "finite number"),
        ({"limit": "3"}, "limit", "valid integer"),
        ({"scale": "2"}, "scale", "valid number"),
        ({"weights": {"a": "NaN"}}, "weights.a", "valid number"),
        ({"pair": [1, "inf"]}, "pair.1", "valid number"),
    ],
)
def test_tool_numbers_are_finite_json_numbers(arguments, where, problem):
    plan = read_parameters(numbers, name="h")
    with pytest.raises(ArgumentsInvalid) as caught:
        plan.bind({"count": 1, "ratio": 1.0} | arguments)
    assert str(caught.value) == f"Invalid arguments: {where}: Input should be a {problem}"


def test_numbers_the_json_way_still_pass():
    plan = read_parameters(numbers, name="h")
    bound = plan.bind(
        {
            "count": 2**60,
            "ratio": 1,
            "ratios": [1, 2.5, -3],
            "limit": 4.0,
            "scale": 0,
            "weights": {"a": 1},
            "pair": [5.0, 6],
        }
    )
    assert bound == {
        "count": 2**60,
        "ratio": 1.0,
        "ratios": [1.0, 2.5, -3.0],
        "limit": 4,
        "scale": 0.0,
        "weights": {"a": 1.0},
        "pair": (5, 6.0),
    }


def test_strict_numbers_leave_the_schema_as_it_was():
    plan = read_parameters(numbers, name="h")
    properties = plan.schema["properties"]
    assert properties["count"] == {"type": "integer"}
    assert properties["ratio"] == {"type": "number"}
    assert properties["ratios"]["items"] == {"type": "number"}
    assert properties["scale"] == {"type": "number", "minimum": 0, "default": 1.0}


def test_text_arguments_are_parsed_but_finite():
    # Template variables and prompt arguments are strings on the wire.
    def handler(count: int, ratio: float = 0.5) -> None:
        return None

    plan = read_parameters(handler, name="h", json_values=False)
    assert plan.bind({"count": "3", "ratio": "2.5"}) == {"count": 3, "ratio": 2.5}
    for text in ("nan", "inf", "-Infinity", "1e400"):
        with pytest.raises(ArgumentsInvalid, match="ratio: Input should be a finite number"):
            plan.bind({"count": "3", "ratio": text})


def test_an_explicit_field_setting_wins_over_strict_numbers():
    def handler(count: Annotated[int, Field(strict=False)]) -> None:
        return None

    assert read_parameters(handler, name="h").bind({"count": "3"}) == {"count": 3}


def test_bind_reports_every_problem_by_location():
    def handler(count: int, name: str) -> None:
        return None

    plan = read_parameters(handler, name="h")
    with pytest.raises(ArgumentsInvalid) as caught:
        plan.bind({"count": "many"})
    message = str(caught.value)
    assert message.startswith("Invalid arguments: ")
    assert "count:" in message
    assert "name:" in message


class Tree(BaseModel):
    name: str
    children: list["Tree"] = []


def plain(
    count: int,
    point: Point,
    tags: Sequence[str] = (),
    ratio: Annotated[float, Field(ge=0)] = 0.5,
) -> None:
    return None


def nested(count: int, point: Point, tree: Tree | None = None, tags: Sequence[str] = ()) -> None:
    return None


ARGUMENTS: list[dict[str, Any]] = [
    {"count": "3", "point": {"x": 1, "y": "2"}},
    {"count": 3.0, "point": {"x": 1, "y": 2}, "ratio": "NaN"},
    {"count": 1, "point": {"x": 1, "y": 2}, "ratio": 1},
    {"count": 1, "point": Point(x=1, y=2), "tree": {"name": "a", "children": [{"name": "b"}]}},
    {"count": 1, "point": {"x": 1, "y": 2}, "tags": ["a"], "ratio": 2, "extra": True},
    {"count": 1, "point": {"x": 1}},
    {"count": 1, "point": {"x": 1, "y": 2}, "ratio": -1},
    {"count": 1, "point": {"x": 1, "y": 2}, "tree": {"children": []}},
    {},
]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    ("handler", "way"), [(plain, "validate_fields"), (nested, "validate_instance")]
)
def test_bind_gives_what_the_model_itself_validates(handler: Any, way: str, strict: bool):
    """bind skips building the model instance where it can (plain fields); what it returns
    and what it refuses are the model's own, with nested, self-referencing models too."""
    plan = read_parameters(handler, name="h", strict=strict)
    assert plan.validate.__name__ == way
    for arguments in ARGUMENTS:
        try:
            expected: Any = dict(plan.model.model_validate(arguments).__dict__)
        except ValueError as exc:
            expected = ("refused", str(exc).splitlines()[1:])
        try:
            bound: Any = plan.bind(arguments)
        except ArgumentsInvalid:
            bound = ("refused", expected[1] if isinstance(expected, tuple) else None)
        assert bound == expected, arguments


def test_strict_rejects_unknown_arguments_and_lax_ignores_them():
    def handler(a: int) -> None:
        return None

    with pytest.raises(ArgumentsInvalid, match="b: Extra inputs"):
        read_parameters(handler, name="h").bind({"a": 1, "b": 2})
    assert read_parameters(handler, name="h", strict=False).bind({"a": 1, "b": 2}) == {"a": 1}


def test_var_args_and_private_names_are_refused():
    def star(*args: int) -> None:
        return None

    def double_star(**kwargs: int) -> None:
        return None

    def private(_hidden: int) -> None:
        return None

    with pytest.raises(TypeError, match="args"):
        read_parameters(star, name="s")
    with pytest.raises(TypeError, match="args"):
        read_parameters(double_star, name="d")
    with pytest.raises(TypeError, match="_hidden"):
        read_parameters(private, name="p")


@pytest.mark.parametrize(
    "annotation",
    [
        str,
        None,
        Any,
        ToolResult,
        Text,
        Image,
        list[Text],
        Sequence[Text],
        tuple[Text, ...],
        list[Any],
        Text | Image,
        str | None,
    ],
)
def test_content_returning_functions_have_no_output_schema(annotation):
    def handler():
        return None

    handler.__annotations__["return"] = annotation
    assert read_output(handler) is None


def test_unannotated_return_has_no_output_schema():
    def handler():
        return None

    assert read_output(handler) is None


def test_object_return_is_not_wrapped():
    def handler() -> Point:
        return Point(x=1, y=2)

    output = read_output(handler)

    assert output is not None
    assert output is not None
    assert output.wrapped is False
    assert output.schema == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
    }
    assert output.dump(Point(x=1, y=2)) == {"x": 1, "y": 2}


def test_dict_return_is_an_object():
    def handler() -> dict[str, int]:
        return {}

    output = read_output(handler)

    assert output is not None
    assert output.schema == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert output.dump({"a": 1}) == {"a": 1}


def test_non_object_return_is_wrapped_in_result():
    def handler() -> int:
        return 1

    output = read_output(handler)

    assert output is not None
    assert output.wrapped is True
    assert output.schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    assert output.dump(5) == {"result": 5}


def test_wrapped_schema_keeps_definitions_at_the_root():
    def handler() -> list[Point]:
        return []

    output = read_output(handler)

    assert output is not None
    assert output.schema["properties"]["result"]["items"] == {"$ref": "#/$defs/Point"}
    assert "Point" in output.schema["$defs"]
    assert output.dump([Point(x=1, y=2)]) == {"result": [{"x": 1, "y": 2}]}


def test_async_function_return_annotation_is_used():
    async def handler() -> int:
        return 1

    output = read_output(handler)
    assert output is not None
    assert output.wrapped is True


def test_awaitable_return_annotation_is_unwrapped():
    def handler() -> typing.Awaitable[int]:
        raise NotImplementedError

    output = read_output(handler)

    assert output is not None
    assert output is not None
    assert output.schema["properties"]["result"] == {"type": "integer"}


def test_description_from_doc():
    assert description_from_doc(None) is None
    assert description_from_doc("   \n  ") is None
    assert description_from_doc("\n    First line.\n\n    More text.\n    ") == (
        "First line.\n\nMore text."
    )
