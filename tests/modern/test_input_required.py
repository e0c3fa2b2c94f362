"""server.modern.input_required: replaying handlers with recorded answers, and the sealed
requestState."""

import time

import pytest

from server.context import Elicitation, Roots
from server.errors import InvalidParams
from server.modern.input_required import (
    InputRequired,
    ReplayExchange,
    RequestStates,
    SpentInMemory,
    read_input_responses,
)
from server.sealing import Sealer
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio

ROOTS_ANSWER = {"roots": [{"uri": "file:///a"}]}


async def no_notify(method, params):
    raise AssertionError("nothing should be sent")


@pytest.fixture
def states():
    return RequestStates(Sealer(b"s" * 32), ttl_s=600)


# -- ReplayExchange ------------------------------------------------------------------------


async def test_unanswered_question_suspends_with_the_missing_requests():
    exchange = ReplayExchange({}, no_notify)
    roots = Roots("roots")
    with pytest.raises(InputRequired) as caught:
        await exchange.ask({"roots": roots})
    assert caught.value.requests == {"roots": roots}
    assert exchange.used == {}


async def test_input_required_is_not_an_exception():
    # A handler's own "except Exception" must not swallow the suspension.
    assert not issubclass(InputRequired, Exception)
    assert issubclass(InputRequired, BaseException)


async def test_answered_questions_are_parsed_and_recorded():
    exchange = ReplayExchange({"roots": ROOTS_ANSWER, "unused": 1}, no_notify)
    assert await exchange.ask({"roots": Roots("roots")}) == {"roots": [{"uri": "file:///a"}]}
    assert exchange.used == {"roots": ROOTS_ANSWER}


async def test_partly_answered_batch_suspends_for_the_rest_and_keeps_what_was_used():
    exchange = ReplayExchange({"roots": ROOTS_ANSWER}, no_notify)
    elicit = Elicitation("Name?", {"type": "object"})
    with pytest.raises(InputRequired) as caught:
        await exchange.ask({"roots": Roots("roots"), "name": elicit})
    assert caught.value.requests == {"name": elicit}
    assert exchange.used == {"roots": ROOTS_ANSWER}


async def test_malformed_answer_is_invalid_params_naming_the_key():
    exchange = ReplayExchange({"roots": {"roots": "nope"}}, no_notify)
    with pytest.raises(InvalidParams) as caught:
        await exchange.ask({"roots": Roots("roots")})
    assert caught.value.data == {"inputResponse": "roots"}


async def test_notify_goes_to_the_callback():
    sent = []

    async def notify(method, params):
        sent.append((method, params))

    await ReplayExchange({}, notify).notify("notifications/progress", {"progress": 1})
    assert sent == [("notifications/progress", {"progress": 1})]


async def test_context_over_replay_exchange_asks_then_answers():
    context = make_context(ReplayExchange({}, no_notify), client_capabilities={"roots": {}})
    with pytest.raises(InputRequired) as caught:
        await context.list_roots()
    assert list(caught.value.requests) == ["roots-1"]
    # Replayed with the answer under the same generated key, the handler gets it.
    replay = make_context(
        ReplayExchange({"roots-1": ROOTS_ANSWER}, no_notify), client_capabilities={"roots": {}}
    )
    assert await replay.list_roots() == [{"uri": "file:///a"}]


# -- RequestStates -------------------------------------------------------------------------


def test_seal_and_open_round_trip(states):
    token = states.seal("tools/call", "book", {"a": 1}, {"k": {"x": 1}}, {"step": 2})
    assert states.open(token, "tools/call", "book", {"a": 1})[:2] == ({"k": {"x": 1}}, {"step": 2})


def test_argument_order_does_not_matter(states):
    token = states.seal("tools/call", "t", {"a": 1, "b": 2}, {}, {})
    assert states.open(token, "tools/call", "t", {"b": 2, "a": 1})[:2] == ({}, {})


@pytest.mark.parametrize(
    ("method", "target", "arguments"),
    [
        ("prompts/get", "book", {"a": 1}),
        ("tools/call", "other", {"a": 1}),
        ("tools/call", "book", {"a": 2}),
        ("tools/call", "book", {"a": 1, "b": 0}),
        ("tools/call", "book", None),
    ],
)
def test_state_is_bound_to_method_target_and_arguments(states, method, target, arguments):
    token = states.seal("tools/call", "book", {"a": 1}, {"k": 1}, {})
    with pytest.raises(InvalidParams, match="another request"):
        states.open(token, method, target, arguments)


@pytest.mark.parametrize("token", ["", "garbage", "a.b", 12, None, {"a": 1}])
def test_forged_state_is_invalid_params(states, token):
    with pytest.raises(InvalidParams) as caught:
        states.open(token, "tools/call", "t", {})
    assert caught.value.to_wire()["code"] == -32602


def test_tampered_state_is_refused(states):
    token = states.seal("tools/call", "t", {}, {"k": "yes"}, {})
    body, tag = token.split(".")
    tampered = ("A" if body[0] != "A" else "B") + body[1:]
    with pytest.raises(InvalidParams, match="Invalid requestState"):
        states.open(f"{tampered}.{tag}", "tools/call", "t", {})


def test_state_from_another_key_is_refused(states):
    other = RequestStates(Sealer(b"o" * 32), ttl_s=600)
    token = other.seal("tools/call", "t", {}, {}, {})
    with pytest.raises(InvalidParams):
        states.open(token, "tools/call", "t", {})


def test_a_cursor_is_not_a_request_state():
    sealer = Sealer(b"s" * 32)
    states = RequestStates(sealer, ttl_s=600)
    cursor = sealer.seal_json("cursor", {"b": "x", "a": {}, "s": {}})
    with pytest.raises(InvalidParams):
        states.open(cursor, "tools/call", "t", {})


def test_state_expires(monkeypatch):
    now = 5_000.0
    monkeypatch.setattr(time, "time", lambda: now)
    states = RequestStates(Sealer(b"s" * 32), ttl_s=30)
    token = states.seal("tools/call", "t", {}, {}, {})
    now = 5_029.0
    assert states.open(token, "tools/call", "t", {})[:2] == ({}, {})
    now = 5_031.0
    with pytest.raises(InvalidParams, match="Expired requestState"):
        states.open(token, "tools/call", "t", {})


async def test_a_state_is_spent_once_and_the_memory_of_it_is_bounded(monkeypatch):
    now = 1_000.0
    monkeypatch.setattr(time, "time", lambda: now)
    spent = SpentInMemory(capacity=2)
    assert await spent.spend("a", 1_010)
    assert not await spent.spend("a", 1_010)
    assert await spent.spend("b", 1_020)
    # Full: "a" is forgotten, and with it every state that expires no later than it.
    assert await spent.spend("c", 1_030)
    assert not await spent.spend("a", 1_010)
    assert not await spent.spend("d", 1_010)
    assert not await spent.spend("b", 1_020)
    now = 1_025.0  # "b" expired: its room is free, and "b" itself would be refused as expired
    assert await spent.spend("e", 1_040)
    assert len(spent._spent) == 2


async def test_spending_a_used_state_is_invalid_params(states):
    token = states.seal("tools/call", "t", {}, {}, {})
    _, _, spend = states.open(token, "tools/call", "t", {})
    await states.spend(*spend)
    with pytest.raises(InvalidParams, match="used already; send the request again without it"):
        await states.spend(*spend)


# -- inputResponses ------------------------------------------------------------------------


def test_read_input_responses():
    assert read_input_responses({}) == {}
    assert read_input_responses({"inputResponses": {"k": {"a": 1}}}) == {"k": {"a": 1}}


@pytest.mark.parametrize("responses", [None, [1], "x"])
def test_present_but_malformed_input_responses_are_invalid_params(responses):
    with pytest.raises(InvalidParams, match="inputResponses"):
        read_input_responses({"inputResponses": responses})


def test_each_input_response_must_be_an_object():
    with pytest.raises(InvalidParams) as caught:
        read_input_responses({"inputResponses": {"ok": {}, "bad": "text"}})
    assert caught.value.data == {"inputResponse": "bad"}
