"""The redaction of request records: a key is matched whatever its spelling."""

from __future__ import annotations

from typing import Any

import pytest

from server.memo import SMALL_KEY_BYTES
from server.records.privacy import HARMLESS_KEYS, REDACTED, Privacy
from server.settings import Settings

SHAPES = [
    "api.key",
    "API Key",
    "private.key",
    "apiKey",
    "ApiKey",
    "api-key",
    "API_KEY",
    "x.api.key",
    "Private Key",
    "privateKey",
    "client.secret",
    "Access Token",
    "pass.word",
    "api\u200bkey",  # a zero-width space between the words
    "\uff21\uff30\uff29\uff3f\uff2b\uff25\uff39",  # full-width API_KEY
    "api..key",
    "api / key",
]


def privacy() -> Privacy:
    return Privacy(tuple(Settings().records_redact), max_params_bytes=2048)


@pytest.mark.parametrize("key", SHAPES)
def test_a_secret_under_any_spelling_of_its_key_is_redacted(key: str) -> None:
    record = {"bytes_in": 100, "params": {"arguments": {key: "s3cr3t-value", "city": "Oslo"}}}
    privacy().apply(record)
    assert record["params"] == {"arguments": {key: REDACTED, "city": "Oslo"}}


@pytest.mark.parametrize("key", ["API Key", "private.key"])
def test_a_spelled_key_is_redacted_in_the_capabilities_too(key: str) -> None:
    record: dict[str, Any] = {
        "bytes_in": 100,
        "params": {},
        "client": {"capabilities": {"x": {key: "s3cr3t"}}},
    }
    privacy().apply(record)
    assert record["client"]["capabilities"] == {"x": {key: REDACTED}}


def test_a_redaction_word_is_normalised_like_the_keys() -> None:
    record = {"bytes_in": 100, "params": {"Session.ID": "abc", "city": "Oslo"}}
    Privacy(("session_id", "", "-"), max_params_bytes=2048).apply(record)
    assert record["params"] == {"Session.ID": REDACTED, "city": "Oslo"}


def test_ordinary_keys_stay() -> None:
    record = {"bytes_in": 100, "params": {"keyboard": "qwerty", "city": "Oslo", "api": 1}}
    privacy().apply(record)
    assert record["params"] == {"keyboard": "qwerty", "city": "Oslo", "api": 1}


def test_normal_key() -> None:
    from server.records.privacy import normal_key

    assert {normal_key(key) for key in ("api.key", "API Key", "apiKey", "API_KEY")} == {"apikey"}


def test_the_harmless_keys_it_remembers_stay_bounded_and_judge_like_the_walk() -> None:
    rules = Privacy(redact=("password",), max_params_bytes=2048)
    for number in range(HARMLESS_KEYS + 100):
        assert not rules.has_sensitive_key({f"key{number}": 1})
    assert 0 < len(rules._harmless) <= HARMLESS_KEYS
    long_key = "k" * (SMALL_KEY_BYTES + 1)
    assert not rules.has_sensitive_key({long_key: 1})
    assert long_key not in rules._harmless
    # Known harmless only with every key judged before and nothing deeper than flat arguments.
    assert rules.known_harmless({"name": "x", "arguments": {"key1": 1}}) is False  # unjudged
    rules.has_sensitive_key({"name": "x", "arguments": {"key1": 1}})
    assert rules.known_harmless({"name": "x", "arguments": {"key1": 1}}) is True
    assert rules.known_harmless({"name": "x", "arguments": {"key1": [1]}}) is False
    assert rules.known_harmless({"name": "x", "arguments": {"key1": {"name": 1}}}) is False
    assert rules.has_sensitive_key({"name": "x", "arguments": {"Pass-Word": 1}})
    assert rules.known_harmless({"name": "x", "arguments": {"Pass-Word": 1}}) is False
