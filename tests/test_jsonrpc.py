"""server.jsonrpc: envelope validation and encoding, without any transport."""

import orjson
import pytest

from server.errors import InvalidRequest, ParseError
from server.jsonrpc import (
    Notification,
    Request,
    Response,
    decode,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    is_valid_id,
    to_message,
)


def body(value):
    return orjson.dumps(value)


@pytest.mark.parametrize("request_id", [1, 0, -5, "abc", ""])
def test_request_keeps_id_type(request_id):
    message = decode(body({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}))
    assert message == Request(request_id, "tools/list", {})
    assert type(message.id) is type(request_id)


def test_params_are_kept():
    message = decode(body({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": [1]}}))
    assert isinstance(message, Request)
    assert message.params == {"a": [1]}


def test_notification_has_no_id():
    message = decode(body({"jsonrpc": "2.0", "method": "notifications/x"}))
    assert message == Notification("notifications/x", {})


def test_result_and_error_responses():
    assert decode(body({"jsonrpc": "2.0", "id": 3, "result": {"ok": 1}})) == Response(
        3, {"ok": 1}, None
    )
    error = {"code": -1, "message": "no"}
    assert decode(body({"jsonrpc": "2.0", "id": "a", "error": error})) == Response("a", None, error)


def test_batch_decodes_to_a_list():
    messages = decode(
        body(
            [
                {"jsonrpc": "2.0", "id": 1, "method": "a"},
                {"jsonrpc": "2.0", "method": "b"},
            ]
        )
    )
    assert messages == [Request(1, "a", {}), Notification("b", {})]


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"\xff\xfe", b'{"a":1}x'])
def test_not_json_is_parse_error(raw):
    with pytest.raises(ParseError) as caught:
        decode(raw)
    assert caught.value.to_wire()["code"] == -32700
    assert caught.value.request_id is None


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({"jsonrpc": "1.0", "id": 7, "method": "m"}, 7),
        ({"id": 7, "method": "m"}, 7),
        ({"jsonrpc": "2.0", "id": "x", "method": ""}, "x"),
        ({"jsonrpc": "2.0", "id": "x", "method": 5}, "x"),
        ({"jsonrpc": "2.0", "id": 9, "method": "m", "params": [1, 2]}, 9),
        ({"jsonrpc": "2.0", "id": 9, "method": "m", "params": "p"}, 9),
        ({"jsonrpc": "2.0", "id": None, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": 4}, 4),
        ({"jsonrpc": "2.0", "id": 4, "result": 1, "error": {"code": 1}}, 4),
        ({"jsonrpc": "2.0", "id": 4, "error": {"message": "no code"}}, 4),
        ({"jsonrpc": "2.0", "id": 4, "error": "text"}, 4),
        ({"jsonrpc": "2.0", "result": 1}, None),
    ],
)
def test_invalid_envelopes_are_invalid_request_and_echo_readable_id(message, expected_id):
    with pytest.raises(InvalidRequest) as caught:
        decode(body(message))
    assert caught.value.to_wire()["code"] == -32600
    assert caught.value.request_id == expected_id


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"x"', b"null", b"[1]"])
def test_non_object_messages_are_invalid_request(raw):
    with pytest.raises(InvalidRequest):
        decode(raw)


def test_null_params_mean_empty_params():
    message = decode(body({"jsonrpc": "2.0", "id": 1, "method": "m", "params": None}))
    assert isinstance(message, Request)
    assert message.params == {}


@pytest.mark.parametrize(("value", "valid"), [(1, True), ("a", True), (True, False), (1.0, False)])
def test_is_valid_id(value, valid):
    assert is_valid_id(value) is valid


def test_encoders_round_trip():
    assert orjson.loads(encode_result(1, {"a": 1})) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"a": 1},
    }
    assert orjson.loads(encode_error(None, {"code": -32700, "message": "x"})) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "x"},
    }
    assert orjson.loads(encode_notification("n")) == {"jsonrpc": "2.0", "method": "n"}
    assert orjson.loads(encode_notification("n", {"p": 1})) == {
        "jsonrpc": "2.0",
        "method": "n",
        "params": {"p": 1},
    }
    assert orjson.loads(encode_request("r", "roots/list", {})) == {
        "jsonrpc": "2.0",
        "id": "r",
        "method": "roots/list",
        "params": {},
    }


def test_encode_result_splices_fragments_verbatim():
    fragment = orjson.Fragment(b'{"precomputed":true}')
    assert encode_result(2, fragment) == b'{"jsonrpc":"2.0","id":2,"result":{"precomputed":true}}'


def test_messages_are_slotted_records():
    # Not frozen (a frozen dataclass costs three times as much to build, on every request),
    # but slotted: a misspelt field is an error, not a new attribute.
    message = Request(1, "m", {})
    with pytest.raises(AttributeError):
        message.metod = "other"  # type: ignore[attr-defined]
    assert not hasattr(message, "__dict__")


def test_a_batch_past_its_cap_is_refused_before_its_messages_are_read():
    # The second element is not even a JSON-RPC message: the length alone refuses the batch.
    batch = body([{"jsonrpc": "2.0", "id": 1, "method": "a"}, 7, 8])
    with pytest.raises(InvalidRequest, match="at most 2 messages; this one holds 3"):
        decode(batch, max_batch=2)
    assert decode(body([{"jsonrpc": "2.0", "id": 1, "method": "a"}]), max_batch=1) == [
        Request(1, "a", {})
    ]


@pytest.mark.parametrize(
    "raw",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "id": "a", "method": "m", "params": {}},
        {"jsonrpc": "2.0", "id": True, "method": "m", "params": {}},
        {"jsonrpc": "2.0", "id": 1.5, "method": "m", "params": {}},
        {"jsonrpc": "2.0", "id": None, "method": "m", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": "", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": 5, "params": {}},
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": []},
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": None},
        {"jsonrpc": "2.0", "id": 1, "method": "m"},
        {"jsonrpc": "1.0", "id": 1, "method": "m", "params": {}},
        {"id": 1, "method": "m", "params": {}},
        {"jsonrpc": "2.0", "method": "m", "params": {}},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
    ],
)
def test_decode_reads_a_single_message_as_to_message_does(raw):
    """decode's one-pass reading of the usual request agrees with to_message on the message
    and its error (with the id it echoes) for anything near it."""
    try:
        expected: object = to_message(raw)
    except InvalidRequest as error:
        expected = (str(error), error.request_id)
    try:
        decoded: object = decode(orjson.dumps(raw))
    except InvalidRequest as error:
        decoded = (str(error), error.request_id)
    assert (type(decoded), decoded) == (type(expected), expected)
