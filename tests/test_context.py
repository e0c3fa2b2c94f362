"""server.context: progress, logging and asking the client, through a recording exchange."""

import contextlib
from typing import Any

import pytest

from server.context import Elicitation, ElicitResult, LogLevel, Roots, Sampling
from server.errors import MissingClientCapability
from tests.support.core_helpers import RecordingExchange, make_context

pytestmark = pytest.mark.anyio

ALL_CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}


# -- progress ------------------------------------------------------------------------------


async def test_no_progress_without_a_token():
    exchange = RecordingExchange()
    await make_context(exchange).report_progress(1, 2)
    assert exchange.sent == []


@pytest.mark.parametrize("token", ["abc", 0, 7])
async def test_progress_carries_the_token(token):
    exchange = RecordingExchange()
    context = make_context(exchange, progress_token=token)
    await context.report_progress(1)
    await context.report_progress(2, 10, "halfway")
    assert exchange.sent == [
        ("notifications/progress", {"progressToken": token, "progress": 1}),
        (
            "notifications/progress",
            {"progressToken": token, "progress": 2, "total": 10, "message": "halfway"},
        ),
    ]


async def test_progress_must_increase():
    exchange = RecordingExchange()
    context = make_context(exchange, progress_token="t")
    for value in [1, 1, 0.5, 3, 2, 3.5]:
        await context.report_progress(value)
    assert [params["progress"] for _, params in exchange.sent] == [1, 3, 3.5]


# -- logging -------------------------------------------------------------------------------


async def test_no_log_messages_without_a_level():
    exchange = RecordingExchange()
    context = make_context(exchange)
    levels: list[LogLevel] = ["debug", "info", "warning", "error", "critical", "alert", "emergency"]
    for level in levels:
        await context.log(level, "x")
    assert exchange.sent == []


async def test_logs_only_at_or_above_the_requested_level():
    exchange = RecordingExchange()
    context = make_context(exchange, log_level="warning")
    await context.debug("d")
    await context.info("i")
    await context.log("notice", "n")
    await context.warning("w", logger="mod")
    await context.error({"detail": 1})
    await context.log("emergency", "e")
    assert exchange.sent == [
        ("notifications/message", {"level": "warning", "data": "w", "logger": "mod"}),
        ("notifications/message", {"level": "error", "data": {"detail": 1}}),
        ("notifications/message", {"level": "emergency", "data": "e"}),
    ]


async def test_debug_level_gets_everything():
    exchange = RecordingExchange()
    context = make_context(exchange, log_level="debug")
    await context.debug("d")
    await context.info("i")
    assert [params["level"] for _, params in exchange.sent] == ["debug", "info"]


# -- finish --------------------------------------------------------------------------------


async def test_nothing_is_sent_after_finish():
    exchange = RecordingExchange()
    context = make_context(exchange, progress_token="t", log_level="debug")
    await context.report_progress(1)
    context.finish()
    await context.report_progress(2)
    await context.error("late")
    assert exchange.sent == [("notifications/progress", {"progressToken": "t", "progress": 1})]


async def test_nothing_is_asked_after_finish():
    exchange = RecordingExchange({"roots": {"roots": []}})
    context = make_context(exchange, client_capabilities=ALL_CAPABILITIES)
    context.finish()
    with contextlib.suppress(Exception):  # refusing by raising is fine; reaching it is not
        await context.list_roots(key="roots")
    assert exchange.asked == []


# -- asking the client ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "capability"),
    [
        (lambda ctx: ctx.elicit("Name?", {"type": "object"}), "elicitation"),
        (lambda ctx: ctx.sample("Hi", 10), "sampling"),
        (lambda ctx: ctx.list_roots(), "roots"),
    ],
)
async def test_ask_refuses_undeclared_capability_before_the_exchange(ask, capability):
    exchange = RecordingExchange()
    others: dict[str, Any] = {name: {} for name in ALL_CAPABILITIES if name != capability}
    context = make_context(exchange, client_capabilities=others)
    with pytest.raises(MissingClientCapability) as caught:
        await ask(context)
    assert caught.value.data == {"requiredCapabilities": {capability: {}}}
    assert caught.value.to_wire()["code"] == -32021
    assert exchange.asked == []
    assert exchange.sent == []


async def test_one_missing_capability_refuses_the_whole_batch():
    exchange = RecordingExchange()
    context = make_context(exchange, client_capabilities={"roots": {}})
    with pytest.raises(MissingClientCapability):
        await context.ask(Roots("r"), Sampling("hi", 5, key="s"))
    assert exchange.asked == []


async def test_elicit_returns_the_parsed_answer():
    exchange = RecordingExchange({"name": {"action": "accept", "content": {"name": "Ada"}}})
    context = make_context(exchange, client_capabilities={"elicitation": {}})
    answer = await context.elicit("Name?", {"type": "object"}, key="name")
    assert answer == ElicitResult("accept", {"name": "Ada"})
    (asked,) = exchange.asked
    assert asked["name"].to_wire() == {
        "method": "elicitation/create",
        "params": {"message": "Name?", "requestedSchema": {"type": "object"}},
    }


async def test_ask_several_returns_answers_in_order_with_generated_keys():
    exchange = RecordingExchange(
        {
            "roots-1": {"roots": [{"uri": "file:///a"}]},
            "sampling-2": {"role": "assistant", "content": {"type": "text", "text": "x"}},
        }
    )
    context = make_context(exchange, client_capabilities=ALL_CAPABILITIES)
    roots, sample = await context.ask(Roots(None), Sampling("q", 5))
    assert roots == [{"uri": "file:///a"}]
    assert sample["content"]["text"] == "x"
    assert list(exchange.asked[0]) == ["roots-1", "sampling-2"]


async def test_duplicate_keys_are_refused():
    context = make_context(client_capabilities=ALL_CAPABILITIES)
    with pytest.raises(ValueError, match="share the key"):
        await context.ask(Roots("k"), Roots("k"))


def test_client_supports():
    context = make_context(client_capabilities={"roots": {"listChanged": True}})
    assert context.client_supports("roots")
    assert not context.client_supports("sampling")


# -- input requests ------------------------------------------------------------------------


def test_sampling_params():
    request = Sampling(
        "hello",
        100,
        system_prompt="sys",
        model_preferences={"speedPriority": 1},
        temperature=0.2,
        stop_sequences=["END"],
    )
    assert request.to_wire() == {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
            "maxTokens": 100,
            "systemPrompt": "sys",
            "modelPreferences": {"speedPriority": 1},
            "temperature": 0.2,
            "stopSequences": ["END"],
        },
    }
    explicit = [{"role": "user", "content": {"type": "text", "text": "a"}}]
    assert Sampling(explicit, 5).params() == {"messages": explicit, "maxTokens": 5}


def test_roots_request_params():
    assert Roots("r").to_wire() == {"method": "roots/list", "params": {}}


@pytest.mark.parametrize(
    ("answer", "parsed"),
    [
        ({"action": "accept", "content": {"a": 1}}, ElicitResult("accept", {"a": 1})),
        ({"action": "accept"}, ElicitResult("accept", {})),
        ({"action": "decline"}, ElicitResult("decline", None)),
        ({"action": "cancel"}, ElicitResult("cancel", None)),
    ],
)
def test_elicitation_parse(answer, parsed):
    assert Elicitation("m", {}).parse(answer) == parsed


@pytest.mark.parametrize(
    ("request_obj", "answer"),
    [
        (Elicitation("m", {}), {"action": "maybe"}),
        (Elicitation("m", {}), "accept"),
        (Elicitation("m", {}), {"action": "accept", "content": [1]}),
        (Sampling("q", 1), {"content": {}}),
        (Sampling("q", 1), None),
        (Roots("r"), {"roots": "nope"}),
        (Roots("r"), {"roots": [{"name": "no uri"}]}),
        (Roots("r"), []),
    ],
)
def test_malformed_answers_raise_value_error(request_obj, answer):
    with pytest.raises(ValueError):  # noqa: PT011 - each parser has its own message
        request_obj.parse(answer)
