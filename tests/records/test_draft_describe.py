"""server.records.draft.Draft.describe: what a request record says of a body, without HTTP.

The endpoint calls ``describe`` on every decoded body before anything can refuse it, so a
refused request's record still names its method, id and client. These tests hand it decoded
messages directly.
"""

from typing import Any

import pytest

from server.jsonrpc import Notification, Request, Response, decode
from server.records.draft import Draft
from server.records.schema import MAX_KEPT_BODY
from tests.support.mcp_client import META_CAPABILITIES, META_INFO, META_VERSION

VERSION_KEY = META_VERSION
INFO_KEY = META_INFO
CAPS_KEY = META_CAPABILITIES
INFO = {"name": "cli", "version": "2.0"}


def draft() -> Draft:
    return Draft("POST", "/mcp", "agent/1", "127.0.0.1", None)


def described(message: Any) -> Draft:
    described = draft()
    described.describe(message)
    return described


def test_a_modern_request_names_method_id_version_and_client() -> None:
    params = {
        "name": "echo",
        "_meta": {VERSION_KEY: "2026-07-28", INFO_KEY: INFO, CAPS_KEY: {"sampling": {}}},
    }
    record = described(Request(7, "tools/call", params))
    assert (record.method, record.jsonrpc_id, record.notification) == ("tools/call", 7, False)
    assert record.body_version == "2026-07-28"
    assert (record.client_name, record.client_version) == ("cli", "2.0")
    assert record.client_capabilities == {"sampling": {}}
    assert record.params is params  # raw: the writer applies the privacy rules later
    assert record.batch_size is None


def test_initialize_is_described_from_its_own_params() -> None:
    params = {"protocolVersion": "2025-11-25", "clientInfo": INFO, "capabilities": {"roots": {}}}
    record = described(Request("i", "initialize", params))
    assert (record.method, record.jsonrpc_id) == ("initialize", "i")
    assert record.body_version == "2025-11-25"
    assert (record.client_name, record.client_capabilities) == ("cli", {"roots": {}})


def test_a_notification_has_no_id() -> None:
    record = described(Notification("notifications/initialized", {}))
    assert (record.method, record.notification, record.jsonrpc_id) == (
        "notifications/initialized",
        True,
        None,
    )
    assert record.body_version is None
    assert record.params == {}


def test_a_response_and_a_batch_are_named_as_such() -> None:
    response = described(Response("s-1", {"action": "accept"}, None))
    assert (response.method, response.jsonrpc_id, response.params) == ("(response)", "s-1", None)
    batch = described(decode(b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]'))
    assert (batch.method, batch.batch_size, batch.jsonrpc_id) == ("(batch)", 2, None)


@pytest.mark.parametrize(
    "meta",
    [
        "not an object",
        {VERSION_KEY: 2026, INFO_KEY: "nope", CAPS_KEY: ["x"]},
        {INFO_KEY: {"name": 5, "version": None}},
    ],
)
def test_what_is_not_the_right_shape_is_left_out(meta: Any) -> None:
    record = described(Request(1, "tools/list", {"_meta": meta}))
    assert record.method == "tools/list"
    assert record.body_version is None
    assert (record.client_name, record.client_version, record.client_capabilities) == (
        None,
        None,
        None,
    )


def test_initialize_ignores_meta_and_a_version_that_is_not_a_string() -> None:
    params = {"protocolVersion": 20251125, "_meta": {VERSION_KEY: "2026-07-28"}}
    record = described(Request(1, "initialize", params))
    assert record.body_version is None


def test_the_record_built_from_a_described_draft() -> None:
    params = {"_meta": {VERSION_KEY: "2026-07-28", INFO_KEY: INFO, CAPS_KEY: {}}}
    record = described(Request(3, "server/discover", params)).request_record()
    assert record["method"] == "server/discover"
    assert record["jsonrpc_id"] == 3
    assert record["protocol_version"] == {"header": None, "body": "2026-07-28"}
    assert record["client"] == {"name": "cli", "version": "2.0", "capabilities": {}}


@pytest.mark.parametrize("method", ["initialize", "tools/call"])
def test_a_huge_body_is_kept_by_its_size_only(method: str) -> None:
    # A 3.7 MB initialize held hundreds of MiB while its record was queued, and cost the
    # writer seconds: past MAX_KEPT_BODY neither params nor capabilities are kept.
    huge = {f"k{n}": "v" * 100 for n in range(37_000)}
    params: dict[str, Any] = {"capabilities": huge, "clientInfo": INFO}
    if method != "initialize":
        params = {"name": "echo", "arguments": huge, "_meta": {VERSION_KEY: "2026-07-28"}}
        params["_meta"][CAPS_KEY] = huge
    before = draft()
    before.bytes_in = MAX_KEPT_BODY + 1
    before.describe(Request(1, method, params))
    marker = {"_truncated": True, "bytes": MAX_KEPT_BODY + 1}
    assert before.params == marker
    assert before.client_capabilities == marker
    record = before.request_record()
    assert record["params"] == marker
    assert record["client"]["capabilities"] == marker


def test_a_body_at_the_limit_keeps_its_params() -> None:
    kept = draft()
    kept.bytes_in = MAX_KEPT_BODY
    params = {"name": "echo", "arguments": {"text": "hi"}}
    kept.describe(Request(1, "tools/call", params))
    assert kept.params == params
