"""server.catalog.prompts: prompt definitions and prompts/get rendering."""

from typing import Annotated

import pytest
from pydantic import Field

from server.catalog.content import Icon, Image, PromptMessage, Text, assistant, user
from server.catalog.prompts import Prompt, to_messages
from server.context import Context
from server.errors import InvalidParams
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio


def summarize(
    topic: Annotated[str, Field(description="What to summarize")], style: str = "brief"
) -> list[PromptMessage]:
    """Summarize a topic."""
    return [user(f"Summarize {topic} ({style})."), assistant("OK.")]


def test_definition_lists_arguments_with_required_flags():
    prompt = Prompt(summarize, title="Summary", icons=[Icon("https://i")], meta={"m": 1})
    assert prompt.definition == {
        "name": "summarize",
        "title": "Summary",
        "description": "Summarize a topic.",
        "arguments": [
            {"name": "topic", "description": "What to summarize", "required": True},
            {"name": "style", "required": False},
        ],
        "icons": [{"src": "https://i"}],
        "_meta": {"m": 1},
    }


def test_prompt_without_arguments_has_no_arguments_key_and_context_is_hidden():
    def hello(ctx: Context) -> str:
        return "hi"

    prompt = Prompt(hello, name="hi", description="Say hi")
    assert prompt.definition == {"name": "hi", "description": "Say hi"}
    assert prompt.parameters.context_param == "ctx"


async def test_get_renders_messages_and_description():
    result = await Prompt(summarize).get({"topic": "MCP"}, make_context())
    assert result == {
        "description": "Summarize a topic.",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "Summarize MCP (brief)."}},
            {"role": "assistant", "content": {"type": "text", "text": "OK."}},
        ],
    }


async def test_missing_required_argument_is_invalid_params():
    with pytest.raises(InvalidParams, match="topic"):
        await Prompt(summarize).get({"style": "long"}, make_context())


async def test_unknown_arguments_are_ignored():
    result = await Prompt(summarize).get({"topic": "t", "other": "x"}, make_context())
    assert result["messages"][0]["content"]["text"] == "Summarize t (brief)."


async def test_arguments_are_converted_by_type_and_bad_ones_are_invalid_params():
    def repeat(word: str, times: int) -> str:
        return word * times

    prompt = Prompt(repeat)
    result = await prompt.get({"word": "ab", "times": "3"}, make_context())
    assert result["messages"][0]["content"]["text"] == "ababab"
    with pytest.raises(InvalidParams, match="Prompt repeat"):
        await prompt.get({"word": "ab", "times": "many"}, make_context())


async def test_async_prompt_gets_context():
    seen = []

    async def contextual(ctx: Context, name: str) -> str:
        seen.append(ctx.request_id)
        return f"hi {name}"

    context = make_context(request_id="r-9", method="prompts/get")
    result = await Prompt(contextual).get({"name": "x"}, context)
    assert result["messages"][0]["content"]["text"] == "hi x"
    assert seen == ["r-9"]


def test_to_messages_accepts_the_documented_shapes():
    image = Image(b"1", "image/png")
    assert to_messages("s") == [PromptMessage("user", Text("s"))]
    assert to_messages(assistant("a")) == [PromptMessage("assistant", Text("a"))]
    assert to_messages(image) == [PromptMessage("user", image)]
    assert to_messages(["a", [assistant("b")]]) == [
        PromptMessage("user", Text("a")),
        PromptMessage("assistant", Text("b")),
    ]
    with pytest.raises(TypeError, match="int"):
        to_messages(5)
