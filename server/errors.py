"""The errors the server can answer with, and the one table from error to HTTP status.

Every protocol failure is an :class:`McpError` subclass carrying its JSON-RPC code, and the
HTTP status it implies on the modern wire (the legacy era answers most JSON-RPC errors with
200; :func:`http_status` is the single place that decides). Handlers raise these; exactly
one boundary per era turns them into wire errors, so no code path invents codes elsewhere.

Hierarchy, with every subclass the package defines (the modern wire's status; a test keeps
the tree complete)::

    McpError
    ├── ParseError                  -32700  400  body is not JSON
    ├── InvalidRequest              -32600  400  not a JSON-RPC request / refused at HTTP level
    │   └── DuplicateId             -32600  400  a legacy request id still running (transport)
    ├── MethodNotFound              -32601  404  unknown, removed or not-advertised method
    ├── InvalidParams               -32602  200  bad params, cursor, name, state
    │   ├── MalformedMeta           -32602  400  modern ``_meta`` missing required fields
    │   ├── ResourceNotFound        -32602  200  (legacy wire: -32002), ``data.uri``
    │   └── SubscriptionLimit       -32602  200  a session's subscriptions (legacy.sessions)
    ├── InternalError               -32603  200  anything unexpected; details only in the log
    ├── HeaderMismatch              -32020  400  MCP-* headers missing, invalid or != body
    ├── MissingClientCapability     -32021  400  ``data.requiredCapabilities``
    ├── UnsupportedProtocolVersion  -32022  400  ``data.supported`` / ``data.requested``
    ├── ServiceUnavailable          -32000  503  shared state (Redis) down, or a cap reached;
    │   │                                        ``Retry-After`` says when to try again
    │   ├── CommandRefused          -32000  503  Redis refused a command (state.redis.link)
    │   ├── SessionLimit            -32000  503  the session cap (legacy.sessions)
    │   └── TaskLimit               -32000  503  the task caps (tasks.store)
    ├── AuthError                   -32001  401  with ``WWW-Authenticate`` (security.auth)
    │   ├── Unauthenticated         -32001  401  no bearer token, or not a valid one
    │   ├── InsufficientScope       -32001  403  a good token without the scopes needed
    │   ├── NoTenant                -32001  403  a good token that names no tenant (jwt)
    │   └── InvalidAuthRequest      -32600  400  a malformed ``Authorization``
    ├── JwksUnavailable             -32603  503  no signing keys loaded (security.jwt)
    ├── RateLimited                 -32000  429  ``data.retryAfter`` (security.limits)
    │   └── QuotaExceeded           -32000  429  a tenant's quota for a tool (security.quotas)
    ├── TooManyStreams              -32000  429  open streams per client (security.limits)
    ├── TooManySessions             -32000  429  sessions per client (security.limits)
    ├── TooManyPending              -32000  429  running per HTTP+SSE session (security.limits)
    ├── Retired                     -32000  410  a retired item, as problem+json (retirement.wire)
    └── TaskFailure                 (its)   200  a failed task's own error (legacy.tasks)

``ToolError`` is not a protocol error: raised inside a tool, it becomes a result with
``isError: true``, which is what the spec wants for failures the model should see.

:func:`wire_error` is the one way from an exception to what goes on the wire (status, code,
message, the JSON-RPC ``error`` member): every boundary that answers a failure asks it, and
anything that is not an :class:`McpError` becomes -32603 "Internal error", its traceback
logged and never sent.

:class:`ConfigurationError` is no wire error either: a setting the server cannot start with.
``python -m server`` prints its message as one line and exits 2, so each message names the
``MCP_*`` variable and what to set instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

log = logging.getLogger(__name__)

Era = Literal["modern", "legacy"]
RequestId = str | int

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
LEGACY_RESOURCE_NOT_FOUND = -32002
HEADER_MISMATCH = -32020
MISSING_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
SERVER_UNAVAILABLE = -32000


class ConfigurationError(ValueError):
    """A configuration the server must not start with; the message names the ``MCP_*``
    variable and the fix, on one line."""


class McpError(Exception):
    """A failure that is answered with a JSON-RPC error object."""

    code: ClassVar[int] = INTERNAL_ERROR
    status: ClassVar[int] = 200

    def __init__(self, message: str, data: Any = None, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        # An HTTP-level refusal (403, 406, 413, 415, ...) reuses a JSON-RPC class but
        # carries its own status; None means "the class default".
        self.http_status = http_status
        # The id of the request this error answers, when it could be read (set by the codec
        # or the boundary), so every error response can echo it.
        self.request_id: RequestId | None = None
        # Seconds after which the same request may succeed (a cap, a dependency away): sent
        # as ``Retry-After`` wherever the error is still the response's own status.
        self.retry_after: float | None = None

    def to_wire(self, era: Era = "modern") -> dict[str, Any]:
        """The JSON-RPC ``error`` member for this failure."""
        wire: dict[str, Any] = {"code": self.wire_code(era), "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire

    def wire_code(self, era: Era) -> int:
        return self.code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, data={self.data!r})"


class ParseError(McpError):
    code = PARSE_ERROR
    status = 400


class InvalidRequest(McpError):
    code = INVALID_REQUEST
    status = 400


class MethodNotFound(McpError):
    code = METHOD_NOT_FOUND
    status = 404

    def __init__(self, method: str) -> None:
        super().__init__(f"Method not found: {method}")
        self.method = method


class InvalidParams(McpError):
    code = INVALID_PARAMS


class MalformedMeta(InvalidParams):
    status = 400


class ResourceNotFound(InvalidParams):
    def __init__(self, uri: str) -> None:
        super().__init__(f"Resource not found: {uri}", {"uri": uri})
        self.uri = uri

    def wire_code(self, era: Era) -> int:
        # SEP-2164 moved "not found" to -32602 and forbids -32002 on the modern wire only.
        return INVALID_PARAMS if era == "modern" else LEGACY_RESOURCE_NOT_FOUND


class InternalError(McpError):
    code = INTERNAL_ERROR


class HeaderMismatch(McpError):
    code = HEADER_MISMATCH
    status = 400


class MissingClientCapability(McpError):
    code = MISSING_CLIENT_CAPABILITY
    status = 400

    def __init__(self, required: Mapping[str, Any], why: str = "") -> None:
        names = ", ".join(sorted(required))
        message = f"Client capability required: {names}" + (f" ({why})" if why else "")
        super().__init__(message, {"requiredCapabilities": dict(required)})
        self.required = dict(required)


class UnsupportedProtocolVersion(McpError):
    code = UNSUPPORTED_PROTOCOL_VERSION
    status = 400

    def __init__(self, requested: Any, supported: list[str]) -> None:
        super().__init__(
            f"Unsupported protocol version: {requested!r}",
            {"supported": supported, "requested": requested},
        )


class ServiceUnavailable(McpError):
    """The request cannot be served right now (a dependency is down, or a cap is reached);
    the same request may succeed later. 503 on both wires, with ``Retry-After``."""

    code = SERVER_UNAVAILABLE
    status = 503

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ToolError(Exception):
    """Raise inside a tool to fail the call with a message the client (and model) sees."""


# The legacy era keeps JSON-RPC errors on 200 except where its transport rules say otherwise;
# the modern era maps the codes the 2026-07-28 transport names. One table, read only here.
_LEGACY_STATUS: dict[type[McpError], int] = {
    MethodNotFound: 200,
    MalformedMeta: 200,
    HeaderMismatch: 400,
    MissingClientCapability: 200,
    UnsupportedProtocolVersion: 400,
}


def http_status(error: McpError, era: Era) -> int:
    """The HTTP status that carries ``error`` on the wire of ``era``."""
    if error.http_status is not None:
        return error.http_status
    if era == "legacy":
        for cls in type(error).__mro__:
            if cls in _LEGACY_STATUS:
                return _LEGACY_STATUS[cls]
    return error.status


@dataclass(frozen=True, slots=True)
class WireError:
    """A failure as the wire carries it: the HTTP status (when it is still the response's
    own), the JSON-RPC code and message (also what the request record keeps), and the
    ``error`` member of the JSON-RPC body."""

    status: int
    code: int
    message: str
    body: dict[str, Any]
    # What the response carries beside the body when the error sets its status (Retry-After).
    headers: list[tuple[bytes, bytes]]


def wire_error(error: BaseException, era: Era, doing: str = "a request") -> WireError:
    """What ``error`` is on the wire of ``era``. An exception that is not an :class:`McpError`
    is a bug: it is logged with its traceback (as "``doing`` failed") and answered as
    -32603 "Internal error", with nothing of it in the answer."""
    if not isinstance(error, McpError):
        log.error("%s failed", doing, exc_info=error)
        error = InternalError("Internal error")
    wire = error.to_wire(era)
    status = http_status(error, era)
    return WireError(status, wire["code"], error.message, wire, retry_headers(error))


def retry_headers(error: McpError) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for an error that says when the same request may succeed; else none."""
    if error.retry_after is None:
        return []
    return [(b"retry-after", retry_after_header(error.retry_after).encode())]


def retry_after_header(seconds: float) -> str:
    """The ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))
