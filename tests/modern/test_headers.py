"""The headers that mirror a modern request's body: how a value is compared with the body's."""

from __future__ import annotations

import base64

import pytest

from server.errors import HeaderMismatch
from server.modern.headers import (
    HeaderMirror,
    decode_header_value,
    header_matches,
    header_value,
)


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def test_decode_header_value_and_header_matches():
    assert decode_header_value("X", "  plain\t") == "plain"
    assert decode_header_value("X", b64("Zürich")) == "Zürich"
    assert decode_header_value("X", "=?base64??=") == ""
    assert header_matches("5", 5)
    assert header_matches("005", 5)
    assert not header_matches("5.0", 5)
    assert not header_matches("five", 5)
    assert header_matches("true", True)
    assert header_matches("false", False)
    assert not header_matches("True", True)
    assert not header_matches("1", True)
    assert header_matches("a", "a")
    assert not header_matches("A", "a")
    assert not header_matches("a", None)
    assert not header_matches("1.5", 1.5)


def test_a_matching_pair_is_remembered_and_a_mismatch_never_is():
    mirror = HeaderMirror()
    headers = {b"mcp-method": b"tools/call", b"mcp-name": b"other"}
    mirror.check(headers, b"mcp-method", "Mcp-Method", "tools/call")
    assert (b"tools/call", "tools/call") in mirror.matched
    for _ in range(2):  # refused every time: a mismatch is never kept as a match
        with pytest.raises(HeaderMismatch, match="does not match"):
            mirror.check(headers, b"mcp-name", "Mcp-Name", "echo")
    assert (b"other", "echo") not in mirror.matched
    with pytest.raises(HeaderMismatch, match="is required"):
        mirror.check({}, b"mcp-name", "Mcp-Name", "echo")
    mirror.check({}, b"mcp-name", "Mcp-Name", None)  # nothing to mirror


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "Zürich",
        " padded ",
        "=?base64?aGVsbG8=?=",  # the sentinel form itself: would decode to "hello"
        "=?base64??=",
        "=?base64?not base64?=",  # would be refused as invalid base64
        "=?base64?",
        "?=",
    ],
)
def test_header_value_round_trips_through_the_decoder(text: str) -> None:
    assert decode_header_value("Mcp-Name", header_value(text)) == text


def test_header_value_leaves_plain_ascii_as_is_and_encodes_a_sentinel_look_alike() -> None:
    assert header_value("echo") == "echo"
    assert header_value(5) == "5"
    assert header_value(False) == "false"
    assert header_value("=?base64?aGVsbG8=?=") == b64("=?base64?aGVsbG8=?=")
