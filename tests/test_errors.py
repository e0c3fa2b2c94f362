"""server.errors: codes, wire shapes and the single error -> HTTP status table."""

import pytest

from server.errors import (
    HeaderMismatch,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MalformedMeta,
    McpError,
    MethodNotFound,
    MissingClientCapability,
    ParseError,
    ResourceNotFound,
    ToolError,
    UnsupportedProtocolVersion,
    http_status,
)


@pytest.mark.parametrize(
    ("error", "code", "modern_status", "legacy_status"),
    [
        (ParseError("x"), -32700, 400, 400),
        (InvalidRequest("x"), -32600, 400, 400),
        (MethodNotFound("tools/list"), -32601, 404, 200),
        (InvalidParams("x"), -32602, 200, 200),
        (MalformedMeta("x"), -32602, 400, 200),
        (InternalError("x"), -32603, 200, 200),
        (HeaderMismatch("x"), -32020, 400, 400),
        (MissingClientCapability({"elicitation": {}}), -32021, 400, 200),
        (UnsupportedProtocolVersion("1999-01-01", ["2026-07-28"]), -32022, 400, 400),
    ],
)
def test_codes_and_status_per_era(error, code, modern_status, legacy_status):
    assert error.to_wire("modern")["code"] == code
    assert http_status(error, "modern") == modern_status
    assert http_status(error, "legacy") == legacy_status


def test_every_error_is_an_mcp_error_and_tool_error_is_not():
    assert issubclass(MalformedMeta, InvalidParams)
    assert issubclass(ResourceNotFound, InvalidParams)
    assert not issubclass(ToolError, McpError)


def test_resource_not_found_code_depends_on_era():
    error = ResourceNotFound("file:///missing")
    assert error.to_wire("modern") == {
        "code": -32602,
        "message": "Resource not found: file:///missing",
        "data": {"uri": "file:///missing"},
    }
    # The legacy wire keeps -32002; the modern wire must never emit it.
    assert error.to_wire("legacy")["code"] == -32002
    assert error.to_wire("legacy")["data"] == {"uri": "file:///missing"}
    assert http_status(error, "modern") == 200


def test_data_is_left_out_when_none():
    assert InvalidParams("Invalid cursor").to_wire() == {
        "code": -32602,
        "message": "Invalid cursor",
    }
    assert "data" in InvalidParams("bad", {"field": "x"}).to_wire()


def test_explicit_http_status_overrides_the_class_default_in_both_eras():
    refused = InvalidRequest("Origin not allowed", http_status=403)
    assert http_status(refused, "modern") == 403
    assert http_status(refused, "legacy") == 403
    assert refused.to_wire()["code"] == -32600


def test_missing_client_capability_carries_required_capabilities():
    error = MissingClientCapability({"sampling": {}, "elicitation": {}}, "needed for x")
    assert error.data == {"requiredCapabilities": {"sampling": {}, "elicitation": {}}}
    assert error.required == {"sampling": {}, "elicitation": {}}
    # Names are sorted in the message so it is stable.
    assert error.message == "Client capability required: elicitation, sampling (needed for x)"


def test_unsupported_version_carries_supported_and_requested():
    error = UnsupportedProtocolVersion("2099-01-01", ["2026-07-28"])
    assert error.to_wire()["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


def test_method_not_found_names_the_method():
    error = MethodNotFound("ping")
    assert error.method == "ping"
    assert "ping" in error.message


def test_request_id_starts_unknown():
    assert ParseError("x").request_id is None
