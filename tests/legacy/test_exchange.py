"""server.legacy.exchange: server-to-client requests and notifications on one call's stream,
and the era matching the client's answers to them (LegacyEra.accept_response)."""

import asyncio
from typing import Any

import anyio
import pytest

from server.context import Elicitation, ElicitResult, Roots, Sampling
from server.errors import ToolError
from server.jsonrpc import Response
from server.legacy.exchange import ClientRequestFailed
from tests.legacy.test_era import NAME_SCHEMA, harness, make_era, next_message, published

pytestmark = pytest.mark.anyio


async def test_notify_publishes_on_the_call_stream_until_it_finishes() -> None:
    h = await harness()
    await h.exchange.notify("notifications/progress", {"progressToken": 1, "progress": 1})
    h.stream.finish()
    await h.exchange.notify("notifications/progress", {"progressToken": 1, "progress": 2})
    assert published(h.stream) == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1},
        }
    ]


async def test_close_stream_ends_connections_but_not_the_stream() -> None:
    h = await harness()
    h.exchange.close_stream()
    assert h.stream.generation == 1
    assert not h.stream.finished


async def test_a_question_is_a_request_on_the_stream_resolved_by_the_answer() -> None:
    h = await harness()
    asking = asyncio.ensure_future(h.exchange.ask({"name": Elicitation("Your name?", NAME_SCHEMA)}))
    question = await next_message(h.stream, 0)
    first = question["id"]  # srv-<runtime>-<n>: unique across replicas of the session
    assert isinstance(first, str)
    assert first.startswith("srv-")
    assert first.endswith("-1")
    assert question == {
        "jsonrpc": "2.0",
        "id": first,
        "method": "elicitation/create",
        "params": {"message": "Your name?", "requestedSchema": NAME_SCHEMA},
    }
    assert set(h.runtime.pending) == {first}
    answer = Response(first, {"action": "accept", "content": {"name": "Ada"}})
    assert h.era.accept_response(h.runtime, answer) is True
    with anyio.fail_after(2):
        assert await asking == {"name": ElicitResult("accept", {"name": "Ada"})}
    assert h.runtime.pending == {}
    # The same answer again finds nobody waiting.
    assert h.era.accept_response(h.runtime, answer) is False

    # The next question gets a fresh id.
    again = asyncio.ensure_future(h.exchange.ask({"roots": Roots(None)}))
    second = await next_message(h.stream, 1)
    assert second["id"] == first.removesuffix("1") + "2"
    assert second["method"] == "roots/list"
    h.era.accept_response(h.runtime, Response(second["id"], {"roots": [{"uri": "file:///tmp"}]}))
    with anyio.fail_after(2):
        assert await again == {"roots": [{"uri": "file:///tmp"}]}


async def test_several_questions_at_once_each_get_their_own_id() -> None:
    h = await harness()
    asking = asyncio.ensure_future(
        h.exchange.ask(
            {"sample": Sampling("Say hi", 10), "name": Elicitation("Name?", NAME_SCHEMA)}
        )
    )
    await next_message(h.stream, 1)
    questions = published(h.stream)
    sample_id, name_id = (q["id"] for q in questions)
    assert [q["method"] for q in questions] == ["sampling/createMessage", "elicitation/create"]
    assert sample_id != name_id
    assert not asking.done()
    h.era.accept_response(h.runtime, Response(name_id, {"action": "decline"}))
    await asyncio.sleep(0)
    assert not asking.done()
    sampled = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
    h.era.accept_response(h.runtime, Response(sample_id, sampled))
    with anyio.fail_after(2):
        assert await asking == {"sample": sampled, "name": ElicitResult("decline", None)}
    assert h.runtime.pending == {}


async def test_an_error_answer_fails_the_question_and_leaves_nothing_pending() -> None:
    h = await harness()
    asking = asyncio.ensure_future(h.exchange.ask({"s": Sampling("Say hi", 10)}))
    question = await next_message(h.stream, 0)
    error = {"code": -1, "message": "User rejected sampling"}
    assert h.era.accept_response(h.runtime, Response(question["id"], error=error)) is True
    with pytest.raises(ClientRequestFailed, match="User rejected sampling") as raised:
        await asking
    assert "sampling/createMessage" in str(raised.value)
    assert isinstance(raised.value, ToolError)
    assert h.runtime.pending == {}


async def test_no_answer_in_time_fails_the_question_and_leaves_nothing_pending() -> None:
    h = await harness(make_era(timeout_s=0.05))
    with pytest.raises(ClientRequestFailed, match=r"within 0\.05 s"):
        await h.exchange.ask({"s": Sampling("Say hi", 10)})
    assert h.runtime.pending == {}
    # A late answer is simply not matched.
    late = Response("srv-1", {"role": "assistant", "content": {"type": "text", "text": "hi"}})
    assert h.era.accept_response(h.runtime, late) is False


@pytest.mark.parametrize(
    ("request_", "answer"),
    [
        (Elicitation("Name?", NAME_SCHEMA), {"action": "maybe"}),
        (Elicitation("Name?", NAME_SCHEMA), {"action": "accept", "content": "Ada"}),
        (Sampling("Say hi", 10), {"role": "assistant"}),
        (Sampling("Say hi", 10), None),
        (Roots(None), {"roots": [{"name": "no uri"}]}),
        (Roots(None), []),
    ],
)
async def test_a_malformed_answer_fails_the_question(request_: Any, answer: Any) -> None:
    h = await harness()
    asking = asyncio.ensure_future(h.exchange.ask({"q": request_}))
    question = await next_message(h.stream, 0)
    assert h.era.accept_response(h.runtime, Response(question["id"], answer)) is True
    with pytest.raises(ClientRequestFailed, match="malformed"):
        await asking
    assert h.runtime.pending == {}


async def test_answers_to_unknown_ids_are_not_matched() -> None:
    h = await harness()
    asking = asyncio.ensure_future(h.exchange.ask({"r": Roots(None)}))
    await next_message(h.stream, 0)
    for wrong in ("srv-2", "srv-0", 1, "1"):
        assert h.era.accept_response(h.runtime, Response(wrong, {"roots": []})) is False
    assert not asking.done()
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    assert h.runtime.pending == {}


async def test_ending_the_session_releases_a_waiting_question() -> None:
    h = await harness()
    asking = asyncio.ensure_future(h.exchange.ask({"r": Roots(None)}))
    await next_message(h.stream, 0)
    h.runtime.close()
    with anyio.fail_after(2), pytest.raises(asyncio.CancelledError):
        await asking
    assert h.runtime.pending == {}


async def test_a_refused_question_is_an_is_error_tool_result() -> None:
    h = await harness(capabilities={"elicitation": {}})
    calling = asyncio.ensure_future(h.call("tools/call", {"name": "ask_name", "arguments": {}}))
    question = await next_message(h.stream, 0)
    assert question["method"] == "elicitation/create"
    error = {"code": -32600, "message": "no UI here"}
    h.era.accept_response(h.runtime, Response(question["id"], error=error))
    with anyio.fail_after(2):
        result = await calling
    assert result["isError"] is True
    assert "no UI here" in result["content"][0]["text"]


async def test_a_tool_gets_the_answer_through_its_context() -> None:
    h = await harness(capabilities={"elicitation": {}})
    calling = asyncio.ensure_future(h.call("tools/call", {"name": "ask_name", "arguments": {}}))
    question = await next_message(h.stream, 0)
    answer = Response(question["id"], {"action": "accept", "content": {"name": "Ada"}})
    h.era.accept_response(h.runtime, answer)
    with anyio.fail_after(2):
        result = await calling
    assert result["content"] == [{"type": "text", "text": "Hello Ada"}]
    assert not result.get("isError")
