"""server.sealing: HMAC-signed tokens the client must hand back unchanged."""

import base64
import time

import orjson
import pytest

from server.errors import InvalidParams
from server.sealing import Sealer

KEY = b"k" * 32


def flip(text: str, index: int) -> str:
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


def test_round_trip():
    sealer = Sealer(KEY)
    token = sealer.seal("cursor", b"tools:100")
    assert sealer.open("cursor", token) == b"tools:100"


def test_token_is_compact_and_readable():
    token = Sealer(KEY).seal("cursor", b"payload")
    body, tag = token.split(".")
    assert "=" not in token
    assert base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)) == b"payload"
    assert len(base64.urlsafe_b64decode(tag + "==")) == 16


def test_short_key_is_refused():
    with pytest.raises(ValueError, match="16 bytes"):
        Sealer(b"short")


def test_other_key_cannot_open():
    token = Sealer(KEY).seal("cursor", b"x")
    assert Sealer(b"o" * 32).open("cursor", token) is None


def test_purposes_are_separated():
    sealer = Sealer(KEY)
    token = sealer.seal("cursor", b"x")
    assert sealer.open("request-state", token) is None


def test_altered_payload_or_tag_is_refused():
    sealer = Sealer(KEY)
    token = sealer.seal("cursor", b"tools:100")
    body, tag = token.split(".")
    assert sealer.open("cursor", f"{flip(body, 0)}.{tag}") is None
    assert sealer.open("cursor", f"{body}.{flip(tag, 3)}") is None
    forged_body = base64.urlsafe_b64encode(b"tools:0").rstrip(b"=").decode()
    assert sealer.open("cursor", f"{forged_body}.{tag}") is None


@pytest.mark.parametrize(
    "token", ["", "nodot", "a.b.c", "%%%.%%%", "é.é", "a.b", None, 5, "x" * 1_000_001]
)
def test_malformed_tokens_are_none(token):
    assert Sealer(KEY).open("cursor", token) is None


def test_seal_json_round_trip_without_expiry():
    sealer = Sealer(KEY)
    token = sealer.seal_json("p", {"a": [1, 2]})
    assert sealer.open_json("p", token, "thing") == {"a": [1, 2]}


def test_open_json_refuses_forgery_with_the_name_given():
    sealer = Sealer(KEY)
    with pytest.raises(InvalidParams, match="Invalid requestState"):
        sealer.open_json("p", "forged.token", "requestState")
    with pytest.raises(InvalidParams, match="Invalid cursor"):
        sealer.open_json("p", 42, "cursor")


def test_open_json_refuses_a_genuine_non_json_payload():
    sealer = Sealer(KEY)
    with pytest.raises(InvalidParams, match="Invalid state"):
        sealer.open_json("p", sealer.seal("p", b"\x00not json"), "state")


def test_expiry(monkeypatch):
    sealer = Sealer(KEY)
    now = 1_000_000.0
    monkeypatch.setattr(time, "time", lambda: now)
    token = sealer.seal_json("p", "v", ttl_s=60)
    payload = sealer.open("p", token)
    assert payload is not None
    document = orjson.loads(payload)
    assert document == {"v": "v", "exp": 1_000_060}
    now = 1_000_059.0
    assert sealer.open_json("p", token, "state") == "v"
    now = 1_000_061.0
    with pytest.raises(InvalidParams, match="Expired state"):
        sealer.open_json("p", token, "state")


def test_only_the_issued_spelling_of_a_token_opens():
    sealer = Sealer(KEY)
    token = sealer.seal("cursor", b"tools:2")
    body, tag = token.split(".")
    assert sealer.open("cursor", f"{body[:2]}!!!!{body[2:]}.{tag}") is None


def test_a_token_another_key_signed_is_refused_with_the_likely_cause():
    # What a worker or replica with a key of its own issued: the operator's fix is named.
    token = Sealer(b"another process key!").seal_json("request-state", {"a": 1})
    with pytest.raises(InvalidParams) as refused:
        Sealer(KEY).open_json("request-state", token, "requestState")
    assert refused.value.message == (
        "Invalid requestState: not signed by this server (changed, or issued by another "
        "process: every worker and replica must have the same MCP_STATE_SECRET)"
    )
