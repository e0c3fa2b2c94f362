"""An explicit ``output_schema=``: checked once at declaration, and every structured result
checked against it (server.catalog.output), with or without a return annotation."""

import logging
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from server import Catalog, ToolResult
from server.catalog.content import Text
from server.catalog.tools import Tool
from server.testing import Client
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}


class Reading(BaseModel):
    city: str
    celsius: Any


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


async def test_a_dict_matching_the_explicit_schema_is_sent_as_structured_content():
    def weather(city: str):  # no return annotation: only the explicit schema describes it
        return {"city": city, "celsius": 21.5}

    tool = Tool.from_function(weather, output_schema=WEATHER)
    result = await tool.call({"city": "Oslo"}, make_context())
    assert result == {
        "content": [{"type": "text", "text": '{"city":"Oslo","celsius":21.5}'}],
        "structuredContent": {"city": "Oslo", "celsius": 21.5},
    }
    assert tool.definition["outputSchema"] == WEATHER


async def test_structured_content_is_the_json_the_text_block_holds():
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    schema = {"type": "object", "properties": {"at": {"type": "string"}}}

    def stamp():
        return {"at": when}

    result = Tool.from_function(stamp, output_schema=schema).shape(stamp())
    assert result["structuredContent"] == {"at": "2026-01-02T03:04:05+00:00"}
    assert orjson.loads(result["content"][0]["text"]) == result["structuredContent"]


async def test_a_mismatch_is_an_error_result_naming_the_violation_and_one_warning(
    caplog: pytest.LogCaptureFixture,
):
    secret = "client-data-" + "x" * 5000

    def weather(city: str):
        return {"city": city, "celsius": city}

    tool = Tool.from_function(weather, output_schema=WEATHER)
    with caplog.at_level(logging.DEBUG, logger="server.catalog.tools"):
        results = [await tool.call({"city": secret}, make_context()) for _ in range(3)]
    for result in results:
        assert result["isError"] is True
        assert "structuredContent" not in result
        text = result["content"][0]["text"]
        assert text.startswith("Tool weather returned a result that breaks its outputSchema")
        assert text.endswith(": at $.celsius, fails type 'number'")
        assert "client-data" not in text
    warned = _warnings(caplog)
    assert len(warned) == 1  # one per tool, not one per call
    assert warned[0].startswith("tool weather returned a value that breaks its outputSchema")
    assert "client-data" not in warned[0]
    assert sum("breaks its outputSchema" in r.getMessage() for r in caplog.records) == 3


async def test_a_tool_result_is_checked_against_the_explicit_schema():
    def full() -> ToolResult:
        return ToolResult([Text("t")], structured={"city": "Oslo"})

    tool = Tool.from_function(full, output_schema=WEATHER)
    result = tool.shape(full())
    assert result["isError"] is True
    assert "required" in result["content"][0]["text"]
    good = ToolResult([Text("t")], structured={"city": "Oslo", "celsius": 3})
    assert tool.shape(good)["structuredContent"] == {"city": "Oslo", "celsius": 3}


async def test_an_annotated_tool_with_an_explicit_schema_is_checked_against_both():
    def read(celsius: Any) -> Reading:
        return Reading(city="Oslo", celsius=celsius)

    tool = Tool.from_function(read, output_schema=WEATHER)
    assert tool.shape(read(4))["structuredContent"] == {"city": "Oslo", "celsius": 4}
    broken = tool.shape(read("warm"))  # fits the annotation (Any), not the declared schema
    assert broken["isError"] is True
    assert "$.celsius" in broken["content"][0]["text"]


async def test_text_returns_stay_text():
    def note() -> str:
        return "plain"

    tool = Tool.from_function(note, output_schema=WEATHER)
    assert tool.shape(note()) == {"content": [{"type": "text", "text": "plain"}]}


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "objet"}, "type"),
        ({"type": "object", "properties": {"n": {"minimum": "zero"}}}, "properties/n/minimum"),
        ({"type": "object", "required": "city"}, "required"),
    ],
)
def test_a_bad_schema_raises_at_declaration(schema: dict[str, Any], where: str):
    with pytest.raises(
        ValueError, match=rf"^w: output_schema is not a valid JSON Schema \(at {where}"
    ):
        Tool.from_function(lambda: {}, name="w", output_schema=schema)


async def test_a_remote_ref_is_never_fetched(monkeypatch: pytest.MonkeyPatch):
    fetched: list[Any] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kw: fetched.append(args))
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/a.json"}}}
    tool = Tool.from_function(lambda: {"a": 1}, name="r", output_schema=schema)
    result = tool.shape({"a": 1})
    assert result["isError"] is True
    assert "cannot be resolved" in result["content"][0]["text"]
    assert fetched == []


async def test_a_local_ref_resolves():
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "integer"}},
    }
    tool = Tool.from_function(lambda: {}, name="r", output_schema=schema)
    assert tool.shape({"a": 1})["structuredContent"] == {"a": 1}
    assert tool.shape({"a": "1"})["isError"] is True


async def test_through_the_catalog_in_both_eras(caplog: pytest.LogCaptureFixture):
    catalog = Catalog("out", "1")

    @catalog.tool(output_schema=WEATHER)
    def weather(city: str):
        """Weather."""
        return {"city": city, "celsius": 1 if city == "Oslo" else "cold"}

    for era in ("modern", "legacy"):
        async with Client(catalog, era=era) as client:
            good = await client.call_tool("weather", {"city": "Oslo"})
            assert good["structuredContent"] == {"city": "Oslo", "celsius": 1}
            with caplog.at_level(logging.WARNING):
                bad = await client.call_tool("weather", {"city": "Bergen"})
            assert bad["isError"] is True
            assert "structuredContent" not in bad
    assert len([w for w in _warnings(caplog) if "breaks its outputSchema" in w]) == 1


async def test_an_annotated_tool_that_keeps_breaking_its_schema_warns_once(
    caplog: pytest.LogCaptureFixture,
):
    def read() -> Reading:
        return {"city": 3}  # type: ignore[return-value]

    tool = Tool.from_function(read)
    with caplog.at_level(logging.WARNING):
        results = [tool.shape(read()) for _ in range(3)]
    assert all(result["isError"] is True for result in results)
    assert results[0]["content"][0]["text"] == (
        "Tool read returned a result that breaks its outputSchema"  # pydantic's detail: logged
    )
    assert len(_warnings(caplog)) == 1


def test_jsonschema_is_loaded_only_by_a_tool_that_declares_an_output_schema() -> None:
    # 3.4 MiB resident that a server whose tools declare no output schema never pays.
    script = (
        "import sys\n"
        "import server.app\n"
        "from server.builtin.probe import catalog\n"
        "assert 'jsonschema' not in sys.modules, 'loaded without an output schema'\n"
        "from server import Catalog\n"
        "c = Catalog('x', '1')\n"
        "@c.tool(output_schema={'type': 'object'})\n"
        "def t() -> dict:\n"
        "    return {}\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
