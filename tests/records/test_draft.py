"""server.records: the privacy rules, the Draft that becomes the records, and its line.

No sockets: the Draft's observed ``send`` and ``receive`` are driven with fake ASGI messages,
and the record shapes are checked against the field tables of docs/records.md, read from the
document itself so the two cannot drift apart silently. The lines the writer builds straight
from drafts (server.records.lines) are checked byte for byte against the record built, prepared
and encoded.
"""

import json
import math
import random
import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from server.jsonrpc import MAX_DECLARED_BYTES, MAX_DECLARED_DEPTH
from server.records.draft import Draft
from server.records.lines import (
    DECLARED_MEMO_MAX_BYTES,
    MEMO_MAX_BYTES,
    MEMO_MAX_ENTRIES,
    LineWriter,
    rounded_ms,
)
from server.records.privacy import REDACTED, Privacy
from server.records.recorder import Recorder
from server.records.schema import (
    MAX_CLIENT_STRING,
    MAX_ERROR_MESSAGE,
    SCHEMA_VERSION,
    clip,
    iso_time,
    request_id_of,
)
from tests.support.mcp_client import META_CAPABILITIES, META_INFO, META_VERSION

DOC = Path(__file__).resolve().parents[2] / "docs" / "records.md"
TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
HEX16 = re.compile(r"[0-9a-f]{16}")
# The request fields the table marks "only for batches" / "only on initialize and discover".
OPTIONAL_REQUEST_FIELDS = {
    "batch_size",
    "advertised",
    "target",
    "outcome",
    "task",
    "traceparent",
    "retiring",
    "tenant",
    "transport",
}
# What server/app/application.py passes: the settings' redaction words, normalised the way keys are.
DEFAULT_REDACT = (
    "password",
    "passwd",
    "token",
    "secret",
    "authorization",
    "apikey",
    "cookie",
    "credential",
    "privatekey",
)


def documented_fields(heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading``."""
    text = DOC.read_text()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    fields: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            fields.update(re.findall(r"`([a-z_]+)`", first_cell))
    assert fields, f"no table under {heading!r}"
    return fields


REQUEST_FIELDS = documented_fields("## Request record")
STREAM_FIELDS = documented_fields("## Stream record")


def privacy(**overrides: Any) -> Privacy:
    options: dict[str, Any] = {"redact": DEFAULT_REDACT, "max_params_bytes": 2048}
    options.update(overrides)
    return Privacy(**options)


def make_draft(**overrides: Any) -> Draft:
    options: dict[str, Any] = {
        "verb": "POST",
        "path": "/mcp",
        "user_agent": "test-agent/1.0",
        "client_address": "127.0.0.1",
        "header_version": "2026-07-28",
    }
    options.update(overrides)
    return Draft(**options)


# -- Privacy ------------------------------------------------------------------------------------


def test_a_small_harmless_record_keeps_its_params_without_meta() -> None:
    record: dict[str, Any] = {
        "bytes_in": 100,
        "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 1}},
        "client": {"name": "c", "capabilities": {"roots": {}}},
    }
    privacy().apply(record)
    assert record["params"] == {"name": "echo", "arguments": {"text": "hi"}}
    assert record["client"]["capabilities"] == {"roots": {}}


def test_session_capabilities_are_redacted_even_when_the_body_is_harmless() -> None:
    # Legacy records carry the capabilities of the session's initialize, not of this body.
    record: dict[str, Any] = {
        "bytes_in": 100,
        "params": {"name": "echo"},
        "client": {"capabilities": {"experimental": {"apiKey": "k-123"}}},
    }
    privacy().apply(record)
    assert record["client"]["capabilities"] == {"experimental": {"apiKey": REDACTED}}
    assert record["params"] == {"name": "echo"}


def test_a_key_written_with_json_escapes_is_still_redacted() -> None:
    params = orjson.loads(rb'{"arguments": {"pass\u0077ord": "hunter2"}}')
    assert "password" in params["arguments"]
    record = {"bytes_in": 60, "params": params}
    privacy().apply(record)
    assert record["params"] == {"arguments": {"password": REDACTED}}


def test_sensitive_key_verdicts_are_remembered_and_bounded() -> None:
    shield = privacy()
    assert shield.has_sensitive_key({"a": [{"b": {"Client_Secret": 1}}]})
    assert not shield.has_sensitive_key({"a": [{"b": {"c": 1}}]})
    for number in range(5000):
        shield.has_sensitive_key({f"key{number}": 1})
    assert shield.has_sensitive_key({"x": {"TOKEN": 1}})
    assert len(shield._verdicts) <= 4096


def test_big_keys_are_judged_but_their_verdicts_never_kept() -> None:
    shield = privacy()
    for number in range(50):
        assert not shield.has_sensitive_key({"k" * 4096 + str(number): 1})
        assert shield.has_sensitive_key({"token" + "k" * 4096 + str(number): 1})
        assert shield.sensitive("secret" + "k" * 4096 + str(number))
    assert len(shield._verdicts) == 0


def test_redaction_reaches_every_depth_including_lists() -> None:
    params: dict[str, Any] = {
        "name": "login",
        "password": "p0",
        "arguments": {
            "user": "ann",
            "nested": [
                {"api_key": "k1", "keep": 1},
                [{"deeper": {"client_secret": "s1", "fine": [1, 2, {"token": "t1"}]}}],
            ],
        },
    }
    cleaned = privacy().clean(params)
    assert cleaned == {
        "name": "login",
        "password": REDACTED,
        "arguments": {
            "user": "ann",
            "nested": [
                {"api_key": REDACTED, "keep": 1},
                [{"deeper": {"client_secret": REDACTED, "fine": [1, 2, {"token": REDACTED}]}}],
            ],
        },
    }
    # The input is not modified in place.
    assert params["password"] == "p0"
    assert params["arguments"]["nested"][0]["api_key"] == "k1"


def test_a_sensitive_key_hides_its_whole_value_even_a_container() -> None:
    cleaned = privacy().clean({"credentials": {"user": "u", "pin": [1, 2, 3]}, "x": 1})
    assert cleaned == {"credentials": REDACTED, "x": 1}


@pytest.mark.parametrize(
    "key",
    [
        "PASSWORD",
        "Password",
        "user_password",
        "X-Api-Key",
        "API_KEY",
        "apiKey",
        "access_token",
        "Refresh-Token",
        "tokenizer",  # substring matching: anything containing "token"
        "client_secret",
        "Authorization",
        "set-cookie",
        "PRIVATE_KEY",
        "private-key",
        "passwd",
        "aws_credential_file",
    ],
)
def test_keys_match_ignoring_case_dashes_and_underscores_as_substrings(key: str) -> None:
    assert privacy().sensitive(key)
    assert privacy().clean({key: "value"}) == {key: REDACTED}


@pytest.mark.parametrize("key", ["name", "pass", "key", "api", "tok", "user", "text", "priv"])
def test_other_keys_are_kept(key: str) -> None:
    assert not privacy().sensitive(key)
    assert privacy().clean({key: "value"}) == {key: "value"}


def test_values_are_never_matched_only_keys() -> None:
    params = {"text": "my password is hunter2", "list": ["token", "secret"]}
    assert privacy().clean(params) == params


def test_scalars_and_none_pass_through() -> None:
    value: Any
    for value in (None, 1, 2.5, "text", True, [], {}):
        assert privacy().clean(value) == value


def test_params_over_the_cap_become_a_truncation_marker_with_their_size() -> None:
    params = {"text": "x" * 100}
    size = len(orjson.dumps(params))
    assert privacy(max_params_bytes=size).clean(params) == params
    assert privacy(max_params_bytes=size - 1).clean(params) == {"_truncated": True, "bytes": size}


def test_the_cap_is_measured_after_redaction() -> None:
    params = {"password": "p" * 5000, "x": 1}
    redacted = {"password": REDACTED, "x": 1}
    cap = len(orjson.dumps(redacted))
    assert privacy(max_params_bytes=cap).clean(params) == redacted
    truncated = privacy(max_params_bytes=10).clean(params)
    assert truncated == {"_truncated": True, "bytes": cap}
    assert "ppp" not in orjson.dumps(truncated).decode()


def test_params_can_be_dropped_entirely() -> None:
    dropped = privacy(keep_params=False)
    assert dropped.clean({"text": "hi"}) is None
    assert dropped.clean({"password": "x"}) is None
    assert dropped.clean(None) is None


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


@pytest.mark.parametrize("container", ["dict", "list", "mixed"])
def test_deep_nesting_is_cut_off_not_a_crash(container: str) -> None:
    value: Any = {"password": "deep-secret"}
    for level in range(5000):
        if container == "dict" or (container == "mixed" and level % 2):
            value = {"a": value}
        else:
            value = [value]
    cleaned = privacy(max_params_bytes=10**9).clean(value)
    assert _depth(cleaned) <= 40
    encoded = orjson.dumps(cleaned)  # serialisable: no recursion limit hit on the way out
    assert b"[too deep]" in encoded
    assert b"deep-secret" not in encoded


# -- record shapes ------------------------------------------------------------------------------


def test_the_documented_tables_are_what_the_test_expects() -> None:
    assert {"v", "kind", "time", "request_id", "status", "params", "advertised"} <= REQUEST_FIELDS
    assert {"v", "kind", "opened", "open_ms", "events", "end"} <= STREAM_FIELDS


def test_request_record_has_exactly_the_documented_fields() -> None:
    draft = make_draft()
    record = draft.request_record()
    assert set(record) == REQUEST_FIELDS - OPTIONAL_REQUEST_FIELDS
    assert record["v"] == SCHEMA_VERSION == 1
    assert record["kind"] == "request"
    assert TIME.fullmatch(record["time"])
    assert HEX16.fullmatch(record["request_id"])
    assert record["request_id"] == draft.request_id
    assert record["verb"] == "POST"
    assert record["path"] == "/mcp"
    assert record["status"] is None
    assert record["era"] is None
    assert record["protocol_version"] == {"header": "2026-07-28", "body": None}
    assert record["method"] is None
    assert record["jsonrpc_id"] is None
    assert record["notification"] is None
    assert record["client"] == {"name": None, "version": None, "capabilities": None}
    assert record["session_id"] is None
    assert record["subject"] is None
    assert record["user_agent"] == "test-agent/1.0"
    assert record["client_address"] == "127.0.0.1"
    assert record["error"] is None
    assert isinstance(record["duration_ms"], float)
    assert record["duration_ms"] >= 0
    assert record["bytes_in"] == 0
    assert record["bytes_out"] == 0
    assert record["streaming"] is False
    assert record["params"] is None
    # Serialisable as one JSON line.
    assert b"\n" not in orjson.dumps(record)


def test_request_record_carries_what_the_request_turned_out_to_be() -> None:
    draft = make_draft()
    draft.era = "legacy"
    draft.body_version = "2025-11-25"
    draft.method = "tools/call"
    draft.jsonrpc_id = "abc"
    draft.notification = False
    draft.set_client({"name": "cli", "version": "2.0", "extra": 1}, {"roots": {}})
    draft.session_id = "sess"
    draft.params = {"name": "echo"}
    draft.error(-32602, "bad")
    record = draft.request_record()
    assert record["era"] == "legacy"
    assert record["protocol_version"] == {"header": "2026-07-28", "body": "2025-11-25"}
    assert record["method"] == "tools/call"
    assert record["jsonrpc_id"] == "abc"
    assert record["notification"] is False
    assert record["client"] == {"name": "cli", "version": "2.0", "capabilities": {"roots": {}}}
    assert record["session_id"] == "sess"
    assert record["params"] == {"name": "echo"}
    assert record["error"] == {"code": -32602, "message": "bad"}


def test_optional_fields_appear_only_when_set() -> None:
    draft = make_draft()
    draft.batch_size = 3
    draft.advertised = ["initialize", "tools/list"]
    draft.method = "tools/call"
    draft.task = {"id": "t-1", "status": "working"}
    draft.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    draft.transport = "sse"
    draft.retiring = "sse"
    draft.tenant = "acme"
    record = draft.request_record()
    assert set(record) == REQUEST_FIELDS
    assert record["transport"] == "sse"
    assert record["retiring"] == "sse"
    assert record["tenant"] == "acme"
    assert record["batch_size"] == 3
    assert record["advertised"] == ["initialize", "tools/list"]
    assert record["task"] == {"id": "t-1", "status": "working"}
    assert record["traceparent"] == draft.traceparent


def test_stream_record_has_exactly_the_documented_fields() -> None:
    draft = make_draft(started=1_700_000_000.25)
    draft.set_client({"name": "cli", "version": "2.0"}, {"sampling": {}})
    draft.era = "modern"
    draft.method = "tools/call"
    draft.streaming = True
    record = draft.stream_record()
    assert set(record) == STREAM_FIELDS - {"transport"}  # only on the HTTP+SSE transport
    draft.transport = "sse"
    assert draft.stream_record()["transport"] == "sse"
    assert record["v"] == 1
    assert record["kind"] == "stream"
    assert record["request_id"] == draft.request_id
    assert record["opened"] == "2023-11-14T22:13:20.250Z"
    assert TIME.fullmatch(record["time"])
    assert record["time"] > record["opened"]
    # The client without its capabilities.
    assert record["client"] == {"name": "cli", "version": "2.0"}
    assert (record["verb"], record["era"], record["method"]) == ("POST", "modern", "tools/call")
    assert record["session_id"] is None
    assert record["user_agent"] == "test-agent/1.0"
    assert record["open_ms"] >= 0
    assert record["events"] == 0
    assert record["bytes_out"] == 0
    assert record["end"] == "complete"


def test_time_is_utc_iso_with_milliseconds() -> None:
    assert make_draft(started=0.5).request_record()["time"] == "1970-01-01T00:00:00.500Z"
    assert make_draft(started=86399.0).request_record()["time"] == "1970-01-01T23:59:59.000Z"


def test_request_ids_are_unique_16_hex() -> None:
    ids = {make_draft().request_id for _ in range(2000)}
    assert len(ids) == 2000
    assert all(HEX16.fullmatch(request_id) for request_id in ids)


def test_client_ignores_what_is_not_the_right_shape() -> None:
    draft = make_draft()
    draft.set_client({"name": 5, "version": ["1"]}, "not a dict")
    assert (draft.client_name, draft.client_version, draft.client_capabilities) == (
        None,
        None,
        None,
    )
    draft.set_client("nope", None)
    assert draft.request_record()["client"] == {
        "name": None,
        "version": None,
        "capabilities": None,
    }


def test_error_messages_are_capped_with_a_marker() -> None:
    draft = make_draft()
    draft.error(-32600, "x" * 1000)
    message = "x" * 300 + "…[truncated, 1000 chars]"
    assert draft.error_message == message  # cut when set: the draft holds no more
    assert draft.request_record()["error"] == {"code": -32600, "message": message}
    draft.error(-32600, "y" * 300)
    assert draft.request_record()["error"]["message"] == "y" * 300


# -- client-chosen strings ----------------------------------------------------------------------


def test_clip_keeps_short_strings_and_marks_long_ones_with_their_length() -> None:
    assert clip("a" * MAX_CLIENT_STRING) == "a" * MAX_CLIENT_STRING
    just_over = "a" * (MAX_CLIENT_STRING + 1)
    assert clip(just_over) == "a" * MAX_CLIENT_STRING + "…[truncated, 257 chars]"
    long = "\u00e9" * (8 * 1024 * 1024)
    assert clip(long) == "\u00e9" * MAX_CLIENT_STRING + "…[truncated, 8388608 chars]"
    assert clip("abcdef", 3) == "abc…[truncated, 6 chars]"
    for value in (None, 7, 2.5, True, ["x" * 1000], {"x": "y" * 1000}):
        assert clip(value) == value


def test_clipping_twice_is_clipping_once() -> None:
    once = clip("z" * 5000)
    assert clip(once) is once
    assert clip(clip("z" * 400, MAX_ERROR_MESSAGE), MAX_ERROR_MESSAGE) == clip(
        "z" * 400, MAX_ERROR_MESSAGE
    )


def test_the_document_states_the_limits_and_the_marker() -> None:
    text = DOC.read_text()
    assert f"**{MAX_CLIENT_STRING} characters**" in text
    assert f"**{MAX_ERROR_MESSAGE}**" in text
    assert "`…[truncated, N chars]`" in text
    # The expression the document gives readers finds the marker, and only there.
    documented = re.search(r"regular expression `([^`]+)`", text)
    assert documented is not None
    assert re.search(documented.group(1), clip("x" * 300))
    assert re.search(documented.group(1), clip("x" * 400, MAX_ERROR_MESSAGE))
    assert not re.search(documented.group(1), "x" * MAX_CLIENT_STRING)
    assert f"larger than {MAX_DECLARED_BYTES // 1024} KiB encoded" in text
    assert f"more than {MAX_DECLARED_DEPTH} levels" in text


def test_a_string_that_only_looks_clipped_is_still_bounded() -> None:
    # What a client could send to pass for a clipped value: bounded all the same.
    forged = "f" * MAX_CLIENT_STRING + "…[truncated, 5 chars]"
    assert clip(forged) == forged
    longer = "f" * MAX_CLIENT_STRING + "…[truncated, 5 chars]" + "g" * 10_000
    assert len(clip(longer)) < MAX_CLIENT_STRING + 40
    shifted = "f" * (MAX_CLIENT_STRING + 1) + "…[truncated, 5 chars]"
    assert clip(shifted).endswith(f"…[truncated, {len(shifted)} chars]")
    zero = "f" * MAX_CLIENT_STRING + "…[truncated, 0 chars]"
    assert clip(zero).endswith(f"…[truncated, {len(zero)} chars]")


EIGHT_MIB = 8 * 1024 * 1024


def test_a_draft_cuts_its_headers_when_it_is_made() -> None:
    draft = make_draft(
        user_agent="u" * EIGHT_MIB,
        client_address="a" * EIGHT_MIB,
        header_version="v" * EIGHT_MIB,
    )
    cut = f"…[truncated, {EIGHT_MIB} chars]"
    assert draft.user_agent == "u" * MAX_CLIENT_STRING + cut
    assert draft.client_address == "a" * MAX_CLIENT_STRING + cut
    assert draft.header_version == "v" * MAX_CLIENT_STRING + cut
    ordinary = make_draft()
    assert (ordinary.user_agent, ordinary.client_address, ordinary.header_version) == (
        "test-agent/1.0",
        "127.0.0.1",
        "2026-07-28",
    )


def long_strings_draft() -> Draft:
    """A draft where every field a client can choose is megabytes long."""
    draft = make_draft(
        verb="P" * EIGHT_MIB,
        user_agent="u" * EIGHT_MIB,
        client_address="a" * EIGHT_MIB,
        header_version="h" * EIGHT_MIB,
    )
    draft.era = "legacy"
    draft.body_version = "b" * EIGHT_MIB
    draft.method = "m" * EIGHT_MIB
    draft.jsonrpc_id = "i" * EIGHT_MIB
    draft.notification = False
    draft.set_client({"name": "n" * EIGHT_MIB, "version": "v" * EIGHT_MIB}, {"roots": {}})
    draft.session_id = "s" * EIGHT_MIB
    draft.subject = "t" * EIGHT_MIB
    draft.params = {"name": "echo"}
    draft.bytes_in = 50
    draft.error(-32601, "Method not found: " + "m" * EIGHT_MIB)
    draft.status = 200
    draft.ended_clock = draft.clock
    return draft


def strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings_in(item)]
    if isinstance(value, list):
        return [text for item in value for text in strings_in(item)]
    return []


def test_every_client_chosen_string_in_a_record_is_clipped() -> None:
    draft = long_strings_draft()
    request = draft.request_record()
    rules = privacy()
    written = LineWriter(rules).line(draft)
    assert written is not None
    general = dict(request)
    rules.apply(general)
    assert written == orjson.dumps(general, option=orjson.OPT_APPEND_NEWLINE)
    assert len(written) < 5000  # against 88 MiB of strings in the draft
    draft.streaming = True
    stream = draft.stream_record()
    for record in (orjson.loads(written), stream):
        for text in strings_in(record):
            assert len(text) <= MAX_ERROR_MESSAGE + len("…[truncated, 16777216 chars]")
    marker = f"…[truncated, {EIGHT_MIB} chars]"
    line = orjson.loads(written)
    assert line["user_agent"] == "u" * MAX_CLIENT_STRING + marker
    assert line["verb"] == "P" * MAX_CLIENT_STRING + marker
    assert line["protocol_version"] == {
        "header": "h" * MAX_CLIENT_STRING + marker,
        "body": "b" * MAX_CLIENT_STRING + marker,
    }
    assert line["method"] == "m" * MAX_CLIENT_STRING + marker
    assert line["jsonrpc_id"] == "i" * MAX_CLIENT_STRING + marker
    assert line["client"]["name"] == "n" * MAX_CLIENT_STRING + marker
    assert line["client"]["version"] == "v" * MAX_CLIENT_STRING + marker
    assert line["session_id"] == "s" * MAX_CLIENT_STRING + marker
    assert line["subject"] == "t" * MAX_CLIENT_STRING + marker
    assert line["client_address"] == "a" * MAX_CLIENT_STRING + marker
    error_text = "Method not found: " + "m" * EIGHT_MIB
    assert line["error"]["message"] == clip(error_text, MAX_ERROR_MESSAGE)
    assert line["error"]["message"].endswith(f"…[truncated, {len(error_text)} chars]")
    assert stream["method"] == line["method"]
    client = line["client"]
    assert stream["client"] == {"name": client["name"], "version": client["version"]}
    assert (stream["user_agent"], stream["session_id"]) == (line["user_agent"], line["session_id"])
    assert stream["verb"] == line["verb"]


def test_strings_set_straight_on_the_draft_are_clipped_in_the_record_too() -> None:
    # The record does not rely on how a field was set: a field assigned after the draft was
    # made (or an error message assigned without error()) is clipped when written.
    draft = make_draft()
    draft.user_agent = "u" * 1000
    draft.error_code, draft.error_message = -32600, "e" * 1000
    draft.ended_clock = draft.clock
    record = draft.request_record()
    assert record["user_agent"] == clip("u" * 1000)
    assert record["error"]["message"] == clip("e" * 1000, MAX_ERROR_MESSAGE)
    assert LineWriter(privacy()).line(draft) == reference_line(draft, privacy())


def test_an_integer_id_is_written_as_it_is() -> None:
    draft = make_draft()
    draft.jsonrpc_id = 10**18
    draft.ended_clock = draft.clock
    assert draft.request_record()["jsonrpc_id"] == 10**18
    assert b'"jsonrpc_id":1000000000000000000,' in (LineWriter(privacy()).line(draft) or b"")


def test_session_capabilities_past_the_cap_become_the_truncation_marker() -> None:
    # A legacy record carries the session's capabilities whatever this body's size: they are
    # measured on their own, so a session cannot put kilobytes into each of its records.
    big = parsed({"experimental": {f"k{number}": {"v": [number]} for number in range(900)}})
    size = len(orjson.dumps(big))
    rules = privacy()
    draft = legacy({"name": "echo"}, capabilities=big)
    draft.status, draft.ended_clock = 200, draft.clock
    record = draft.request_record()
    rules.apply(record)
    assert record["client"]["capabilities"] == {"_truncated": True, "bytes": size}
    assert record["params"] == {"name": "echo"}
    writer = LineWriter(rules)
    for _ in range(2):  # judged, then remembered
        assert writer.line(draft) == reference_line(draft, rules)
        assert f'"capabilities":{{"_truncated":true,"bytes":{size}}}'.encode() in (
            writer.line(draft) or b""
        )
    # Within the cap they are written as declared.
    small = privacy(max_params_bytes=size)
    kept = LineWriter(small).line(draft)
    assert kept == reference_line(draft, small)
    assert orjson.loads(kept or b"null")["client"]["capabilities"] == big


# -- observe, observe_receive, finish -----------------------------------------------------------


class Wire:
    """The real ``send`` behind the observed one, and a scripted ``receive``."""

    def __init__(self, incoming: list[dict[str, Any]] | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.incoming = list(incoming or [])
        self.emitted: list[dict[str, Any]] = []

    async def send(self, message: Any) -> None:
        self.sent.append(message)

    async def receive(self) -> dict[str, Any]:
        return self.incoming.pop(0)

    def emit(self, record: Any) -> None:
        # A finished JSON request hands over its draft; the writer builds the record later.
        self.emitted.append(record if isinstance(record, dict) else record.build())


def start(status: int, content_type: bytes) -> dict[str, Any]:
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type), (b"content-length", b"7")],
    }


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


PRIMING = b"id: s1_0\r\ndata: \r\nretry: 1000\r\n\r\n"
KEEPALIVE = b": \r\n\r\n"


def frame(payload: bytes) -> bytes:
    return b"event: message\r\ndata: " + payload + b"\r\n\r\n"


@pytest.mark.anyio
async def test_a_json_response_is_recorded_once_at_finish() -> None:
    wire = Wire()
    draft = make_draft()
    send = draft.observe(wire.send, wire.emit)
    messages = [start(200, b"application/json"), body(b'{"a":1}')]
    for message in messages:
        await send(message)
    assert wire.sent == messages  # passed through untouched
    assert wire.emitted == []
    assert draft.status == 200
    assert draft.bytes_out == 7
    assert draft.streaming is False
    assert draft.completed is True
    draft.finish(wire.emit)
    assert [record["kind"] for record in wire.emitted] == ["request"]
    record = wire.emitted[0]
    assert (record["status"], record["bytes_out"], record["streaming"]) == (200, 7, False)


@pytest.mark.anyio
async def test_a_json_body_that_looks_like_sse_is_not_counted_as_events() -> None:
    wire = Wire()
    draft = make_draft()
    send = draft.observe(wire.send, wire.emit)
    await send(start(200, b"application/json"))
    await send(body(b'{"text":"data: {x}"}'))
    assert draft.events == 0
    draft.finish(wire.emit)
    assert len(wire.emitted) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content_type", "streaming"),
    [
        (b"text/event-stream", True),
        (b"text/event-stream; charset=utf-8", True),
        (b"application/json", False),
        (b"text/plain", False),
    ],
)
async def test_streaming_is_detected_by_content_type(content_type: bytes, streaming: bool) -> None:
    wire = Wire()
    draft = make_draft()
    await draft.observe(wire.send, wire.emit)(start(200, content_type))
    assert draft.streaming is streaming


@pytest.mark.anyio
async def test_an_empty_response_with_no_headers() -> None:
    wire = Wire()
    draft = make_draft()
    send = draft.observe(wire.send, wire.emit)
    await send({"type": "http.response.start", "status": 202, "headers": []})
    await send({"type": "http.response.body", "body": b""})
    draft.finish(wire.emit)
    assert len(wire.emitted) == 1
    assert wire.emitted[0]["status"] == 202
    assert wire.emitted[0]["bytes_out"] == 0


@pytest.mark.anyio
async def test_a_stream_emits_its_request_record_at_open_and_its_stream_record_at_finish() -> None:
    wire = Wire()
    draft = make_draft()
    draft.params = {"name": "echo"}
    draft.set_client({"name": "c"}, {"roots": {}})
    send = draft.observe(wire.send, wire.emit)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    assert wire.emitted == []  # nothing sent on the stream yet
    await send(body(PRIMING, more=True))
    assert [record["kind"] for record in wire.emitted] == ["request"]
    request = wire.emitted[0]
    assert request["streaming"] is True
    assert request["status"] == 200
    assert request["bytes_out"] == len(PRIMING)
    frames = [
        KEEPALIVE,
        frame(b'{"jsonrpc":"2.0","method":"notifications/progress"}'),
        KEEPALIVE,
        frame(b'{"jsonrpc":"2.0","method":"notifications/message"}'),
        frame(b'{"jsonrpc":"2.0","id":1,"result":{}}'),
    ]
    for data in frames:
        await send(body(data, more=True))
    await send(body(b""))
    # Still only the request record: the stream record waits for finish.
    assert len(wire.emitted) == 1
    assert draft.events == 3
    draft.finish(wire.emit)
    assert [record["kind"] for record in wire.emitted] == ["request", "stream"]
    stream = wire.emitted[1]
    assert stream["request_id"] == request["request_id"]
    # The draft of a stream (open for hours, perhaps) let go of what its request record has.
    assert request["params"] == {"name": "echo"}
    assert request["client"]["capabilities"] == {"roots": {}}
    assert draft.params is None
    assert draft.client_capabilities is None
    assert stream["events"] == 3
    assert stream["bytes_out"] == len(PRIMING) + sum(len(data) for data in frames)
    assert stream["end"] == "complete"


@pytest.mark.anyio
async def test_observe_receive_counts_body_bytes_across_chunks() -> None:
    wire = Wire(
        [
            {"type": "http.request", "body": b"12345", "more_body": True},
            {"type": "http.request", "body": b"678", "more_body": True},
            {"type": "http.request", "more_body": False},
        ]
    )
    draft = make_draft()
    receive = draft.observe_receive(wire.receive)
    for _ in range(3):
        message = await receive()
        assert message["type"] == "http.request"
    assert draft.bytes_in == 8
    assert draft.client_left is False


async def _stream_until(draft: Draft, wire: Wire, *, complete: bool) -> None:
    send = draft.observe(wire.send, wire.emit)
    await send(start(200, b"text/event-stream"))
    await send(body(frame(b'{"jsonrpc":"2.0","method":"x"}'), more=True))
    if complete:
        await send(body(b""))


@pytest.mark.anyio
async def test_a_client_that_leaves_mid_stream_ends_it_client_closed() -> None:
    wire = Wire([{"type": "http.disconnect"}])
    draft = make_draft()
    await _stream_until(draft, wire, complete=False)
    await draft.observe_receive(wire.receive)()
    assert draft.client_left is True
    draft.finish(wire.emit)
    assert [record["kind"] for record in wire.emitted] == ["request", "stream"]
    assert wire.emitted[1]["end"] == "client_closed"
    assert wire.emitted[1]["events"] == 1


@pytest.mark.anyio
async def test_a_disconnect_after_the_response_completed_is_not_client_closed() -> None:
    wire = Wire([{"type": "http.disconnect"}])
    draft = make_draft()
    await _stream_until(draft, wire, complete=True)
    await draft.observe_receive(wire.receive)()
    assert draft.client_left is False
    draft.finish(wire.emit)
    assert wire.emitted[-1]["end"] == "complete"


@pytest.mark.anyio
async def test_a_stream_the_server_did_not_finish_ends_in_error() -> None:
    wire = Wire()
    draft = make_draft()
    await _stream_until(draft, wire, complete=False)
    draft.finish(wire.emit)
    assert wire.emitted[-1]["kind"] == "stream"
    assert wire.emitted[-1]["end"] == "error"


@pytest.mark.anyio
@pytest.mark.parametrize("reason", ["shutdown", "overflow"])
async def test_an_end_reason_set_by_the_server_is_kept(reason: str) -> None:
    wire = Wire([{"type": "http.disconnect"}])
    draft = make_draft()
    await _stream_until(draft, wire, complete=False)
    draft.stream_end = reason
    await draft.observe_receive(wire.receive)()
    draft.finish(wire.emit)
    assert wire.emitted[-1]["end"] == reason


def test_a_request_rejected_before_any_response_is_still_recorded() -> None:
    wire = Wire()
    draft = make_draft()
    draft.finish(wire.emit)
    assert len(wire.emitted) == 1
    assert wire.emitted[0]["status"] is None
    assert wire.emitted[0]["streaming"] is False


@pytest.mark.anyio
async def test_a_client_that_left_before_any_response_has_a_null_status() -> None:
    wire = Wire([{"type": "http.disconnect"}])
    draft = make_draft()
    await draft.observe_receive(wire.receive)()
    draft.finish(wire.emit)
    assert [record["kind"] for record in wire.emitted] == ["request"]
    assert wire.emitted[0]["status"] is None


# -- request lines (server.records.lines) --------------------------------------------------------
#
# The writer builds a finished request's line straight from its draft. Whatever the draft, the
# line must be byte for byte what building the record, applying the privacy rules and encoding
# it gives: that reference is built here field by field, with a Privacy of its own.


def reference_clip(value: Any, limit: int = 256) -> Any:
    """The documented clipping, written out apart from server.records.schema.clip."""
    if not isinstance(value, str) or len(value) <= limit:
        return value
    tail = value[limit:]
    if re.fullmatch(r"…\[truncated, [1-9][0-9]* chars\]", tail) and len(tail) <= 40:
        return value  # clipped already
    return value[:limit] + "…[truncated, " + str(len(value)) + " chars]"


def reference_line(draft: Draft, rules: Privacy) -> bytes:
    """The record field by field, ``rules`` applied by a fresh Privacy, encoded, with the
    writer's fallbacks for what fails."""
    started = draft.started
    cut = reference_clip
    assert draft.ended_clock is not None
    record: dict[str, Any] = {
        "v": 1,
        "kind": "request",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(started)))
        + f".{int(started % 1 * 1000):03d}Z",
        "request_id": draft.request_id,
        "verb": cut(draft.verb),
        "path": cut(draft.path),
        "status": draft.status,
        "era": draft.era,
        "protocol_version": {"header": cut(draft.header_version), "body": cut(draft.body_version)},
        "method": cut(draft.method),
        "jsonrpc_id": cut(draft.jsonrpc_id),
        "notification": draft.notification,
        "client": {
            "name": cut(draft.client_name),
            "version": cut(draft.client_version),
            "capabilities": draft.client_capabilities,
        },
        "session_id": cut(draft.session_id),
        "subject": cut(draft.subject),
        "user_agent": cut(draft.user_agent),
        "client_address": cut(draft.client_address),
        "error": None
        if draft.error_code is None
        else {"code": draft.error_code, "message": cut(draft.error_message, 300)},
        "duration_ms": round((draft.ended_clock - draft.clock) * 1000, 3),
        "bytes_in": draft.bytes_in,
        "bytes_out": draft.bytes_out,
        "streaming": draft.streaming,
        "params": draft.params,
    }
    if draft.batch_size is not None:
        record["batch_size"] = draft.batch_size
    if draft.advertised is not None:
        record["advertised"] = draft.advertised
    if draft.method in ("tools/call", "prompts/get", "resources/read"):
        record["target"] = draft.target
        record["outcome"] = draft.call_outcome()
    if draft.task is not None:
        record["task"] = draft.task
    try:
        Privacy(rules.redact, rules.max_params_bytes, rules.keep_params).apply(record)
    except Exception:
        record["params"] = None
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        record["params"] = None
        record["client"]["capabilities"] = {"_unencodable": True}
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


def parsed(value: Any) -> Any:
    """``value`` as the endpoint holds it: freshly parsed JSON (json: deeper than orjson)."""
    return json.loads(json.dumps(value))


def nested_dicts(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


CAPABILITIES = {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}
PROTOCOL_VERSION_KEY = META_VERSION
CAPABILITIES_KEY = META_CAPABILITIES
CLIENT_INFO_KEY = META_INFO
SESSION_CAPABILITIES = parsed({"roots": {}, "experimental": {"x": [1, 2.5, True, None]}})
SECRET_SESSION_CAPABILITIES = parsed({"experimental": {"apiKey": "k-123"}})


def modern(
    arguments: Any = None,
    *,
    capabilities: Any = CAPABILITIES,
    meta: dict[str, Any] | None = None,
    method: str = "tools/call",
    **overrides: Any,
) -> Draft:
    """A modern call as the endpoint describes it: client and version from ``_meta``."""
    raw_meta = {
        PROTOCOL_VERSION_KEY: "2026-07-28",
        CAPABILITIES_KEY: capabilities,
        CLIENT_INFO_KEY: {"name": "bench", "version": "1.2"},
        **(meta or {}),
    }
    params = parsed(
        {"name": "echo", "arguments": {"text": "hello"} if arguments is None else arguments}
        | {"_meta": raw_meta}
    )
    draft = make_draft(**overrides)
    draft.era = "modern"
    draft.method = method
    draft.jsonrpc_id = 7
    draft.notification = False
    draft.params = params
    draft.body_version = params["_meta"][PROTOCOL_VERSION_KEY]
    draft.set_client(params["_meta"][CLIENT_INFO_KEY], params["_meta"][CAPABILITIES_KEY])
    draft.bytes_in = len(json.dumps({"params": params}, separators=(",", ":")))
    return draft


def legacy(params: Any, capabilities: Any = SESSION_CAPABILITIES, **overrides: Any) -> Draft:
    """A call in a legacy session: the capabilities are the session's (the same object on
    every request of the session)."""
    draft = make_draft(**({"header_version": "2025-11-25"} | overrides))
    draft.era = "legacy"
    draft.method = "tools/call"
    draft.jsonrpc_id = "req-1"
    draft.notification = False
    draft.session_id = "3f2a9c1e5b7d4a60"
    draft.body_version = "2025-11-25"
    draft.params = parsed(params)
    draft.set_client({"name": "old-client", "version": "0.9"}, capabilities)
    draft.bytes_in = len(json.dumps({"params": params}, separators=(",", ":")))
    return draft


def task_drafts() -> list[Draft]:
    """A task created, then seen completed."""
    created = modern({"name": "slow", "arguments": {}}, method="tools/call")
    created.task = {"id": "Ab_c-1", "status": "working"}
    seen = modern({"taskId": "Ab_c-1"}, method="tasks/get")
    seen.task = {"id": "Ab_c-1", "status": "completed"}
    return [created, seen]


def long_field_drafts() -> list[Draft]:
    """Drafts whose client-chosen strings run past the limit (some clipped when the draft was
    made, some set afterwards), and legacy sessions whose capabilities exceed the cap."""
    drafts = [
        modern(user_agent="u" * 100_000, header_version="2026-07-28" * 40),
        modern(method="m" * 257),
        legacy({"name": "echo"}, user_agent="a" * 257, client_address="b" * 300, subject="s" * 999),
        legacy({"name": "echo"}, capabilities=parsed({"big": "x" * 3000})),
        legacy({"name": "echo"}, capabilities=parsed({"big": "x" * 3000, "token": "t"})),
        legacy({"name": "echo"}, capabilities=parsed({"_meta": {"x": "y" * 3000}})),
        legacy({"name": "echo"}, capabilities=parsed({"k": "x" * (DECLARED_MEMO_MAX_BYTES + 1)})),
    ]
    draft = legacy({"name": "echo"}, capabilities=parsed({"roots": {}}))
    draft.jsonrpc_id = "j" * 5000
    draft.session_id = "i" * 300
    draft.set_client({"name": "n" * 300, "version": "v" * 256}, draft.client_capabilities)
    draft.body_version = "2025-11-25" * 30
    drafts.append(draft)
    draft = modern()
    draft.error(-32601, "Method not found: " + "q" * 10_000)
    drafts.append(draft)
    draft = modern()
    draft.user_agent = "set-after/" + "z" * 300  # assigned, not passed: clipped when written
    drafts.append(draft)
    return drafts


def line_drafts() -> list[Draft]:
    """Fresh drafts of every kind the endpoint records (finished: status, bytes, end time)."""
    drafts = [
        modern(),
        modern(capabilities={}),
        modern({"query": "hello", "limit": 10, "tags": ["a", {"b": None}], "ratio": 0.5}),
        modern(meta={"progressToken": 12}),
        modern({"login": "ann", "password": "hunter2", "deep": [{"API-Key": "k"}]}),
        modern(capabilities={"experimental": {"apiKey": "k-123"}}),
        modern(capabilities={"_meta": {"x": 1}, "roots": {}}),
        modern({"password": "p"}, capabilities={"_meta": {"x": 1}, "roots": {}}),
        modern({"text": "x" * 5000}),
        modern({"password": "p" * 5000, "x": 1}),
        modern({"text": "y" * 3000}, capabilities={"experimental": {"blob": "z" * 3000}}),
        modern({"a": 1}, capabilities={"a": 1}),
        modern({"a": 1}, capabilities={"a": True}),
        modern({"a": 1}, capabilities={"a": 1.0}),
        modern({"a": 1}, capabilities={"x": 1, "y": 2}),
        modern({"a": 1}, capabilities={"y": 2, "x": 1}),
        modern({"note": "the password is not a key"}, method="tools/call"),
        modern(orjson.loads(rb'{"pass\u0077ord": "hunter2"}')),
        modern({"text": 'h\u00e9llo \u2603 "quoted" \\ back\nslash'}, user_agent="agent \u00e9"),
        modern(nested_dicts(31, {"leaf": 1})),
        modern(nested_dicts(31, {"leaf": {"password": 1}})),
        modern(nested_dicts(40, {"password": "deep"})),
        modern(nested_dicts(300, 1)),
        modern(meta={"progressToken": "abc", "other": [1, {"z": 2}]}),
        modern(method="server/discover"),
        legacy({"name": "echo", "arguments": {"text": "hi"}}),
        legacy({"name": "echo", "arguments": {"text": "hi"}}, subject="user-7"),
        legacy({"name": "echo", "arguments": {"token": "t"}}),
        legacy({"name": "echo"}, capabilities=SECRET_SESSION_CAPABILITIES),
        legacy({"name": "echo", "_meta": {"progressToken": 3}}),
        legacy({"name": "echo", "_meta": 5}),
        legacy({"name": "echo", "_meta": [SESSION_CAPABILITIES]}),
        legacy({"name": "echo", "_meta": {"caps": SESSION_CAPABILITIES}}),
        legacy({"name": "echo"}, capabilities=None, client_address=None, user_agent=None),
        *long_field_drafts(),
    ]
    # Modern whose _meta holds the capabilities under another key than the draft's.
    drafts.append(modern(meta={"caps": parsed(CAPABILITIES)}))
    # initialize (legacy): the capabilities are in the params; the server says what it offers.
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"roots": {"listChanged": True}, "experimental": {"secret": "s"}},
        "clientInfo": {"name": "old-client", "version": "0.9"},
    }
    draft = legacy(initialize, capabilities=None, header_version=None)
    draft.method = "initialize"
    draft.set_client(draft.params["clientInfo"], draft.params["capabilities"])
    draft.advertised = ["initialize", "tools/list", "tools/call"]
    drafts.append(draft)
    # A batch, a client's response, a notification, errors, a rejection, a GET stream.
    draft = make_draft()
    draft.era, draft.method, draft.batch_size = "legacy", "(batch)", 3
    draft.error(-32600, "Invalid request: batches are not supported")
    drafts.append(draft)
    draft = make_draft()
    draft.era, draft.method, draft.jsonrpc_id = "legacy", "(response)", 5
    drafts.append(draft)
    drafts += task_drafts()
    draft = modern(method="notifications/cancelled", status=202)
    draft.notification, draft.jsonrpc_id = True, None
    drafts.append(draft)
    draft = modern({"text": 1})
    draft.error(-32602, "Invalid params: " + "x" * 400)
    drafts.append(draft)
    draft = make_draft(header_version="1999-01-01")
    draft.error(-32600, "Unsupported protocol version")
    drafts.append(draft)
    draft = make_draft(verb="GET", header_version=None)
    draft.era, draft.streaming, draft.session_id = "legacy", True, "s-1"
    drafts.append(draft)
    draft = modern()
    draft.streaming, draft.events = True, 2
    drafts.append(draft)
    # What request lines leave to the general way: params that are not an object, values
    # nested past what orjson encodes, values that are not JSON.
    draft = modern()
    draft.params = [1, {"password": "x"}]
    drafts.append(draft)
    drafts.append(modern(capabilities=nested_dicts(300, 1)))
    draft = modern()
    draft.params = {"odd": {1, 2}}
    drafts.append(draft)
    draft = modern()
    draft.client_capabilities = {"odd": {1, 2}}
    drafts.append(draft)
    for number, draft in enumerate(drafts):
        draft.started = 1_750_000_000.0 + number * 0.3337 + (0.9995 if number % 7 == 0 else 0)
        draft.clock = 1000.0
        draft.ended_clock = 1000.0 + number * 0.0012345 + (0.0000005 if number % 5 == 0 else 0)
        draft.status = draft.status or 200
        draft.bytes_out = 441 + number
    return drafts


class LinesSink:
    name = "lines"

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, lines: list[bytes]) -> None:
        self.lines.extend(lines)

    def close(self) -> None:
        pass


def line_written(draft: Draft, **recorder_options: Any) -> bytes:
    """The line the records writer writes for ``draft``, by its own path: queue, drain, sink."""
    sink = LinesSink()
    recorder = Recorder([sink], capacity=1, **recorder_options)
    recorder.record(draft)
    recorder._drain()
    return sink.lines[-1]


RULES = [
    privacy(),
    privacy(max_params_bytes=60),
    privacy(keep_params=False),
    privacy(redact=("eta", "rootz")),  # "_meta" itself is a sensitive key
    privacy(redact=()),
]


@pytest.mark.parametrize("rules", RULES, ids=["default", "small-cap", "no-params", "meta", "none"])
def test_request_lines_are_byte_identical_to_the_record_built_and_prepared(
    rules: Privacy,
) -> None:
    writer = LineWriter(rules)
    # Twice, in two orders, so that what the writer remembers is used as well as filled.
    for drafts in (line_drafts(), line_drafts()[::-1], line_drafts()):
        for draft in drafts:
            written = writer.line(draft)
            expected = reference_line(draft, rules)
            assert written in (None, expected), (written, expected)
            general = Privacy(rules.redact, rules.max_params_bytes, rules.keep_params)
            # What the writer wrote before: build, prepare, encode.
            assert line_written(draft, prepare=general.apply) == expected
            assert line_written(draft, prepare=rules.apply, line=writer.line) == expected


def test_only_what_the_general_way_must_handle_takes_it() -> None:
    rules = privacy()
    writer = LineWriter(rules)
    drafts = line_drafts()
    taken = [draft for draft in drafts if writer.line(draft) is None]
    assert len(taken) == 4
    assert all(draft is expected for draft, expected in zip(taken, drafts[-4:], strict=True))
    assert b'"params":[1,{"password":"[redacted]"}]' in reference_line(taken[0], rules)
    assert b'"capabilities":{"a":{"a":' in reference_line(taken[1], rules)
    assert b"[too deep]" in reference_line(taken[1], rules)
    assert b'"params":null' in reference_line(taken[2], rules)
    assert b'"capabilities":{"_unencodable":true}' in reference_line(taken[3], rules)


def test_only_a_draft_gets_a_line_from_the_writer() -> None:
    writer = LineWriter(privacy())
    assert writer.line(line_drafts()[0]) is not None
    assert writer.line({"kind": "request"}) is None  # a record already built: the general way


def test_what_request_lines_remember_stays_bounded() -> None:
    rules = privacy()
    writer = LineWriter(rules)
    memo = writer.memo
    for number in range(MEMO_MAX_ENTRIES * 3):
        draft = modern(capabilities={"experimental": {f"feature{number}": {}}})
        draft.user_agent = f"agent/{number}"
        draft.ended_clock = draft.clock
        assert writer.line(draft) == reference_line(draft, rules)
    huge = modern(capabilities={"experimental": {"blob": "z" * DECLARED_MEMO_MAX_BYTES}})
    huge.ended_clock = huge.clock
    assert writer.line(huge) == reference_line(huge, rules)
    for remembered in (memo.declared, memo.metas, memo.templates):
        assert 0 < len(remembered) <= MEMO_MAX_ENTRIES
    assert all(len(encoded) <= DECLARED_MEMO_MAX_BYTES for encoded in memo.declared)
    assert all(len(encoded) <= MEMO_MAX_BYTES for encoded in memo.metas)


def test_each_writer_remembers_for_its_own_rules() -> None:
    # One memo per set of rules: a capabilities object judged harmless under one set is not
    # taken as harmless under another that redacts it.
    secret = modern(capabilities={"experimental": {"apiKey": "k-123"}})
    secret.ended_clock = secret.clock
    lenient, strict = privacy(redact=()), privacy()
    assert b"k-123" in (LineWriter(lenient).line(secret) or b"")
    strict_writer = LineWriter(strict)
    assert strict_writer.line(secret) == reference_line(secret, strict)
    assert b"k-123" not in (strict_writer.line(secret) or b"")


@pytest.mark.parametrize(
    "timestamp",
    [
        0.0,
        0.5,
        0.9995,
        1.0,
        59.999,
        86399.9999,
        1_750_000_000.0,
        1_750_000_000.9996,
        -0.5,
        -86400.25,
    ]
    + [random.Random(seed).uniform(0, 4e9) for seed in range(50)],
)
def test_iso_time_is_the_plain_formatting(timestamp: float) -> None:
    expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(timestamp)))
    expected += f".{int(timestamp % 1 * 1000):03d}Z"
    assert iso_time(timestamp) == expected
    assert iso_time(timestamp) == expected  # and again, from the second it remembered


def test_rounded_ms_is_round_to_the_bit() -> None:
    generator = random.Random(7)
    values = [0.0, -0.0, 1e-300, -1e-7, 2.5e-7, 0.0012345, 1e6, 2.2e6, 3e9, math.inf, math.nan]
    values += [generator.uniform(0, 10) for _ in range(20000)]
    values += [generator.uniform(0, 3000) for _ in range(20000)]
    # Close to the halves where rounding to the microsecond could go either way.
    for _ in range(20000):
        micros = generator.randrange(0, 10**9) + 0.5
        values.append(micros / 1e6 + generator.choice([0.0, 1e-15, -1e-15, 1e-13, -1e-13]))
    for seconds in values:
        expected = round(seconds * 1000, 3)
        assert orjson.dumps(rounded_ms(seconds)) == orjson.dumps(expected), seconds


def test_request_ids_keep_their_format() -> None:
    first, second = request_id_of(1), request_id_of(0x1_0000_00AB)
    assert HEX16.fullmatch(first)
    assert HEX16.fullmatch(second)
    assert first[:8] == second[:8]  # the per-process prefix
    assert (first[8:], second[8:]) == ("00000001", "000000ab")


@pytest.mark.anyio
@pytest.mark.parametrize("serial", [0, 1, 0xFFFF_FFFF, 0x1_0000_00AB, 123_456_789])
async def test_the_x_request_id_header_carries_the_records_id(serial: int) -> None:
    """The header's id is made as bytes directly (draft.observe): the same as the record's."""
    wire = Wire()
    draft = make_draft()
    draft.serial = serial
    await draft.observe(wire.send, wire.emit)(start(200, b"application/json"))
    assert draft.inbound_id is None
    assert dict(wire.sent[0]["headers"])[b"x-request-id"] == request_id_of(serial).encode()
    assert draft.request_id == request_id_of(serial)


def test_request_ids_written_a_piece_at_a_time_are_the_whole_format() -> None:
    # The header and the line write an id as a remembered head and the last byte's two digits:
    # across a head's 256 serials, past 32 bits, and out of order, it is still the one format.
    writer = LineWriter(privacy())
    for serial in (1, 255, 256, 257, 0xFFFF, 2**32 - 1, 2**32, 2**32 + 0x1AB, 5, 300, 256):
        draft = modern()
        draft.serial = serial
        draft.ended_clock = draft.clock
        sent: list[dict[str, Any]] = []
        observed = draft.observe(sent.append, lambda record: None)  # type: ignore[arg-type]
        observed(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        assert dict(sent[0]["headers"])[b"x-request-id"] == request_id_of(serial).encode()
        assert orjson.loads(writer.line(draft) or b"{}")["request_id"] == request_id_of(serial)
