"""server.errors: codes, wire shapes and the single error -> HTTP status table."""

import ast
import logging
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from server import errors
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
    ServiceUnavailable,
    ToolError,
    UnsupportedProtocolVersion,
    WireError,
    http_status,
    retry_after_header,
    wire_error,
)
from server.security.auth import AUTH_ERROR, InsufficientScope, Unauthenticated
from server.security.limits import RateLimited


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


# -- wire_error: every row of the error table (shared/design.md) --------------------------------

WIRE_ROWS = [
    # (row, error, era, status, code)
    ("body not JSON", ParseError("Parse error"), "modern", 400, -32700),
    ("body not JSON, legacy", ParseError("Parse error"), "legacy", 400, -32700),
    ("not a JSON-RPC object", InvalidRequest("Invalid request"), "modern", 400, -32600),
    ("batch where not allowed", InvalidRequest("no batches"), "legacy", 400, -32600),
    ("modern _meta missing", MalformedMeta("params._meta is required"), "modern", 400, -32602),
    ("header != body", HeaderMismatch("Header Mcp-Method does not match"), "modern", 400, -32020),
    (
        "unsupported version",
        UnsupportedProtocolVersion("1999", ["2026-07-28"]),
        "modern",
        400,
        -32022,
    ),
    ("capability missing", MissingClientCapability({"elicitation": {}}), "modern", 400, -32021),
    ("unknown method, modern", MethodNotFound("x/y"), "modern", 404, -32601),
    ("unknown method, legacy", MethodNotFound("x/y"), "legacy", 200, -32601),
    ("bad params", InvalidParams("params.name must be a string"), "modern", 200, -32602),
    ("unknown resource, modern", ResourceNotFound("x://gone"), "modern", 200, -32602),
    ("unknown resource, legacy", ResourceNotFound("x://gone"), "legacy", 200, -32002),
    ("Origin/Host", InvalidRequest("Origin not allowed", http_status=403), "modern", 403, -32600),
    (
        "unknown session",
        InvalidRequest("Session not found", http_status=404),
        "legacy",
        404,
        -32600,
    ),
    ("auth missing", Unauthenticated("Authentication required"), "modern", 401, AUTH_ERROR),
    ("not enough scope", InsufficientScope(["admin"]), "legacy", 403, AUTH_ERROR),
    ("shared state down", ServiceUnavailable("Redis is away"), "legacy", 503, -32000),
]


@pytest.mark.parametrize(
    ("error", "era", "status", "code"),
    [row[1:] for row in WIRE_ROWS],
    ids=[r[0] for r in WIRE_ROWS],
)
def test_wire_error_gives_each_row_of_the_table(error, era, status, code):
    wire = wire_error(error, era)
    assert (wire.status, wire.code, wire.message) == (status, code, error.message)
    assert wire.body == {
        "code": code,
        "message": error.message,
        **({"data": error.data} if error.data is not None else {}),
    }
    # The same as the error's own parts: one table, read the same way everywhere.
    assert wire.status == http_status(error, era)
    assert wire.body == error.to_wire(era)


def test_wire_error_keeps_the_data_the_table_names():
    assert wire_error(UnsupportedProtocolVersion("1999", ["2026-07-28"]), "modern").body[
        "data"
    ] == {"supported": ["2026-07-28"], "requested": "1999"}
    assert wire_error(MissingClientCapability({"sampling": {}}), "modern").body["data"] == {
        "requiredCapabilities": {"sampling": {}}
    }
    assert wire_error(ResourceNotFound("x://gone"), "modern").body["data"] == {"uri": "x://gone"}
    assert "data" not in wire_error(InvalidParams("bad"), "modern").body


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_anything_else_is_internal_error_with_the_traceback_only_in_the_log(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="server.errors")
    try:
        raise RuntimeError("secret-detail")
    except RuntimeError as error:
        wire = wire_error(error, era, "tools/call")  # type: ignore[arg-type]
    assert wire == WireError(
        200, -32603, "Internal error", {"code": -32603, "message": "Internal error"}, []
    )
    assert "secret" not in repr(wire)
    [record] = caplog.records
    assert record.getMessage() == "tools/call failed"
    assert record.exc_info is not None
    assert "secret-detail" in str(record.exc_info[1])


def test_a_tool_error_is_not_a_protocol_error():
    # A ToolError becomes an isError result inside the tool (catalog.tools); should one ever
    # reach the boundary, it is a bug like any other: nothing of it goes on the wire.
    wire = wire_error(ToolError("model-visible text"), "modern")
    assert (wire.status, wire.code, wire.message) == (200, -32603, "Internal error")


# -- the drawn tree names every McpError subclass of the package -----------------------------

SERVER = Path(__file__).resolve().parents[1] / "server"
BRANCH = re.compile(r"^(?P<indent>(?:│   |    )*)(?:├── |└── )(?P<name>\w+)")


def drawn_tree(docstring: str) -> dict[str, str]:
    """Each class of the docstring's tree, with the class it is drawn under."""
    lines = docstring.split("    McpError\n", 1)[1].split("\n\n", 1)[0].splitlines()
    parents = ["McpError"]
    drawn: dict[str, str] = {}
    for line in lines:
        found = BRANCH.match(line.removeprefix("    "))
        if found is None:
            continue  # a description's second line
        depth = len(found["indent"]) // 4
        del parents[depth + 1 :]
        drawn[found["name"]] = parents[depth]
        parents.append(found["name"])
    return drawn


def subclasses_in(sources: Iterable[str], root: str = "McpError") -> dict[str, str]:
    """Every class of ``sources`` that derives from ``root``, with its base (read with ``ast``,
    so modules behind optional extras count too)."""
    bases: dict[str, str] = {}
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                for named in node.bases:
                    name = (
                        named.attr if isinstance(named, ast.Attribute) else getattr(named, "id", "")
                    )
                    bases.setdefault(node.name, name)
    found: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, parent in bases.items():
            if name not in found and (parent == root or parent in found):
                found[name] = parent
                grew = True
    return found


def test_the_drawn_tree_is_read_with_its_nesting() -> None:
    tree = "x\n\n    McpError\n    ├── A  1\n    │   └── B  2\n    │       words\n    └── C\n\nz"
    assert drawn_tree(tree) == {"A": "McpError", "B": "A", "C": "McpError"}
    assert subclasses_in(["class A(McpError): ...\nclass B(errors.A): ...\nclass C(B): ..."]) == {
        "A": "McpError",
        "B": "A",
        "C": "B",
    }


def test_the_errors_docstring_draws_every_mcp_error_subclass_under_its_base() -> None:
    sources = [path.read_text(encoding="utf-8") for path in sorted(SERVER.rglob("*.py"))]
    defined = subclasses_in(sources)
    drawn = drawn_tree(errors.__doc__ or "")
    assert sorted(defined.keys() - drawn.keys()) == [], "add them to the tree in server/errors.py"
    assert sorted(drawn.keys() - defined.keys()) == [], "the tree names classes that are gone"
    assert drawn == defined


@pytest.mark.parametrize(
    ("seconds", "header"), [(0.0, "1"), (0.01, "1"), (1.0, "1"), (1.2, "2"), (59.99, "60")]
)
def test_retry_after_header(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_an_error_that_says_when_to_retry_carries_retry_after_on_both_wires(era: str) -> None:
    # A 503 raised inside a call (a task refused at a drain, Redis away) went out without the
    # header that a refusal before the call carried: the client was not told to retry.
    unavailable = wire_error(ServiceUnavailable("busy", retry_after=2.5), era)  # type: ignore[arg-type]
    assert (unavailable.status, unavailable.headers) == (503, [(b"retry-after", b"3")])
    limited = wire_error(RateLimited(0.2), era)  # type: ignore[arg-type]
    assert (limited.status, limited.headers) == (429, [(b"retry-after", b"1")])
    assert wire_error(InvalidParams("no"), era).headers == []  # type: ignore[arg-type]
