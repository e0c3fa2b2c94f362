"""Mistakes a catalog author can make are told, not passed over: at import time for
declarations, as an error result for a tool output that breaks its own outputSchema."""

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from server import Catalog, Context, InvalidParams, ResourceNotFound, ToolResult
from server.testing import Client, ErrorAnswer

ERAS = ["modern", "legacy"]


class Sum(BaseModel):
    total: float


class Person(BaseModel):
    name: str
    age: int


def test_a_bare_resource_decorator_raises_with_the_fix() -> None:
    catalog = Catalog("mistakes", "1")
    with pytest.raises(TypeError, match=r"@catalog.resource\('file:///notes.txt'\) above notes"):

        @catalog.resource  # type: ignore[arg-type]
        def notes() -> str:
            return "n"

    assert catalog.resources == {}


def test_a_bare_template_decorator_or_a_non_uri_raises() -> None:
    catalog = Catalog("mistakes", "1")
    with pytest.raises(TypeError, match="needs the URI first"):

        @catalog.resource_template  # type: ignore[arg-type]
        def note(name: str) -> str:
            return name

    with pytest.raises(TypeError, match="is not a URI"):
        catalog.resource("notes.txt")


def output_catalog() -> Catalog:
    catalog = Catalog("outputs", "1")

    @catalog.tool
    async def good(a: float, b: float) -> Sum:
        """Adds."""
        return Sum(total=a + b)

    @catalog.tool
    async def coerced() -> Sum:
        """A dict that fits the model is fine."""
        return {"total": 3}  # type: ignore[return-value]

    @catalog.tool
    async def broken() -> Sum:
        """Returns what its outputSchema does not allow."""
        return {"sum": "three"}  # type: ignore[return-value]

    @catalog.tool
    async def broken_result() -> Sum:
        """A ToolResult whose structured content breaks the schema."""
        return ToolResult(content=[], structured={"sum": 1})  # type: ignore[return-value]

    @catalog.tool
    async def wrapped() -> int:
        """A wrapped scalar."""
        return "many"  # type: ignore[return-value]

    return catalog


@pytest.mark.anyio
async def test_structured_content_is_checked_against_the_output_schema(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Client(output_catalog()) as client:
        assert (await client.call_tool("good", {"a": 1, "b": 2}))["structuredContent"] == {
            "total": 3.0
        }
        assert (await client.call_tool("coerced"))["structuredContent"] == {"total": 3.0}
        with caplog.at_level(logging.WARNING):
            results = [
                await client.call_tool(name) for name in ("broken", "broken_result", "wrapped")
            ]
    for result in results:
        assert result["isError"] is True
        assert "structuredContent" not in result
        assert "breaks its outputSchema" in result["content"][0]["text"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("breaks its outputSchema" in line for line in warned) == 3


def asking_catalog() -> Catalog:
    catalog = Catalog("asking", "1")

    @catalog.tool
    async def register(ctx: Context) -> str:
        """Asks with a pydantic model."""
        answer = await ctx.elicit("Who are you?", Person)
        if answer.action != "accept":
            return answer.action
        person = answer.data
        assert isinstance(person, Person)
        return f"{person.name} is {person.age}"

    @catalog.resource("notes://missing")
    def missing() -> str:
        raise ResourceNotFound("notes://missing")

    @catalog.prompt
    def strict(level: str) -> str:
        """Rejects a bad argument."""
        if level not in ("low", "high"):
            raise InvalidParams("level must be low or high")
        return level

    return catalog


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_elicit_with_a_pydantic_model_gives_an_instance(era: Any) -> None:
    asked: list[dict[str, Any]] = []

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["requestedSchema"])
        return {"action": "accept", "content": {"name": "Ada", "age": 36}}

    async with Client(asking_catalog(), era=era, elicit=answer) as client:
        result = await client.call_tool("register")
    assert result["content"][0]["text"] == "Ada is 36"
    assert asked[0]["properties"]["age"]["type"] == "integer"
    assert asked[0]["required"] == ["name", "age"]


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_that_breaks_the_model_is_an_error(era: Any) -> None:
    def answer(_params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"name": "Ada", "age": "old"}}

    async with Client(asking_catalog(), era=era, elicit=answer) as client:
        if era == "modern":
            with pytest.raises(ErrorAnswer, match="does not fit its schema"):
                await client.call_tool("register")
        else:
            result = await client.call_tool("register")
            assert result["isError"] is True
            assert "does not fit its schema" in result["content"][0]["text"]


@pytest.mark.anyio
@pytest.mark.parametrize(("era", "code"), [("modern", -32602), ("legacy", -32002)])
async def test_resource_not_found_and_invalid_params_are_exported(era: Any, code: int) -> None:
    async with Client(asking_catalog(), era=era) as client:
        with pytest.raises(ErrorAnswer) as missing:
            await client.read_resource("notes://missing")
        with pytest.raises(ErrorAnswer) as invalid:
            await client.get_prompt("strict", {"level": "medium"})
    assert missing.value.code == code
    assert "notes://missing" in missing.value.error["message"]
    assert invalid.value.code == -32602
    assert invalid.value.error["message"] == "level must be low or high"
