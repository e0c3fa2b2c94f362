"""Sans-IO JSON-RPC 2.0 codec: bytes to messages, results and errors to bytes.

Messages are slotted, unfrozen dataclasses (docs/decisions.md#slotted-messages). Parsing
validates the envelope (version, id type, method, params shape) and raises
:mod:`server.errors` exceptions that carry the request id whenever it could be read, so the
boundary can echo it. Encoding uses orjson and accepts ``orjson.Fragment`` values, how
precomputed results are spliced in. What a client declares in ``initialize`` is bounded here
(:func:`declared_problem`): a legacy session keeps it for its whole life, where a modern
request's ``_meta`` is bounded by the body cap and kept no longer than its answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from server.errors import InvalidParams, InvalidRequest, McpError, ParseError, RequestId


@dataclass(slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@dataclass(slots=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(slots=True)
class Response:
    """A client's answer to a server-to-client request (legacy era only)."""

    id: RequestId
    result: Any = None
    error: dict[str, Any] | None = None


Message = Request | Notification | Response


def is_valid_id(value: Any) -> bool:
    # bool is an int subclass; JSON true/false is not a valid id, nor is null or a float.
    return isinstance(value, (str, int)) and not isinstance(value, bool)


# Real clients declare tens to a few hundred bytes of capabilities, a few levels deep, and a
# clientInfo of about as much (the spec allows icons as ``data:`` URIs: a small image fits).
# Parsed, an object takes up to ~24 times its encoding (``[{},{},...]``), so a session holds at
# most ~0.4 MiB for each of the two, against ~70 MiB for what a 4 MiB body could declare.
MAX_DECLARED_BYTES = 16 * 1024
# Levels of objects and arrays, the declared object itself being the first. The records'
# privacy rules look 32 levels down; orjson stops encoding past 254 (a Redis session store
# could not save deeper ones).
MAX_DECLARED_DEPTH = 32


def declared_problem(
    name: str,
    value: dict[str, Any],
    max_bytes: int = MAX_DECLARED_BYTES,
    max_depth: int = MAX_DECLARED_DEPTH,
) -> str | None:
    """What is wrong with a declared object (parsed JSON) named ``name``, or None: larger than
    ``max_bytes`` encoded, or nested more than ``max_depth`` levels. Linear in its size; a
    usual one costs one encoding and two byte counts."""
    try:
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError:
        # Parsed JSON fails to encode only when nested past orjson's limit.
        if _deeper_than(value, max_depth):
            return f"{name} nested too deep: more than {max_depth} levels"
        return f"{name} cannot be encoded as JSON"
    if len(encoded) > max_bytes:
        return f"{name} too large: {len(encoded):,} bytes, at most {max_bytes:,}"
    # Each level needs an object or an array of its own: with few of them, no walk is needed.
    if encoded.count(b"{") + encoded.count(b"[") > max_depth and _deeper_than(value, max_depth):
        return f"{name} nested too deep: more than {max_depth} levels"
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels (itself: 1); an
    iterative walk that stops at the first container past the limit."""
    if type(value) is not dict and type(value) is not list:
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        for item in container.values() if type(container) is dict else container:
            if type(item) is dict or type(item) is list:
                stack.append((item, depth + 1))
    return False


def decode(body: bytes, *, max_batch: int | None = None) -> Message | list[Message]:
    """Parse one POST body: a single message, or a batch (the caller decides if allowed) of
    at most ``max_batch`` messages, refused before any of them is read."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ParseError(f"Parse error: body is not valid JSON ({exc.msg})") from None
    if type(raw) is dict:
        # The usual message, a request, in one pass: to_message says the same of it (and of
        # anything else) with every check in its order.
        method, request_id, params = raw.get("method"), raw.get("id"), raw.get("params")
        if (
            type(method) is str
            and method
            and (type(request_id) is int or type(request_id) is str)
            and type(params) is dict
            and raw.get("jsonrpc") == "2.0"
        ):
            return Request(request_id, method, params)
        return to_message(raw)
    if isinstance(raw, list):
        if not raw:
            raise InvalidRequest("Invalid request: empty batch")
        if max_batch is not None and len(raw) > max_batch:
            raise InvalidRequest(
                f"Invalid request: a batch may hold at most {max_batch} messages; "
                f"this one holds {len(raw)}"
            )
        return [to_message(item) for item in raw]
    return to_message(raw)


def to_message(raw: Any) -> Message:
    """Validate one decoded JSON value as a JSON-RPC 2.0 message."""
    if not isinstance(raw, dict):
        raise InvalidRequest("Invalid request: a JSON-RPC message must be an object")
    raw_id = raw.get("id")
    readable_id: RequestId | None = raw_id if is_valid_id(raw_id) else None
    try:
        if raw.get("jsonrpc") != "2.0":
            raise InvalidRequest('Invalid request: "jsonrpc" must be "2.0"')
        method = raw.get("method")
        if method is None:
            return _to_response(raw, raw_id)
        if not isinstance(method, str) or not method:
            raise InvalidRequest('Invalid request: "method" must be a non-empty string')
        params = raw.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise InvalidRequest('Invalid request: "params" must be an object')
        if "id" not in raw:
            return Notification(method, params)
        if readable_id is None:
            raise InvalidRequest('Invalid request: "id" must be a string or an integer')
        return Request(readable_id, method, params)
    except McpError as error:
        error.request_id = readable_id
        raise


def _to_response(raw: dict[str, Any], raw_id: Any) -> Response:
    if not is_valid_id(raw_id):
        raise InvalidRequest("Invalid request: a response needs a string or integer id")
    has_result, has_error = "result" in raw, "error" in raw
    if has_result == has_error:
        raise InvalidRequest('Invalid request: a message needs "method", "result" or "error"')
    error = raw.get("error")
    if has_error and not (isinstance(error, dict) and isinstance(error.get("code"), int)):
        raise InvalidRequest('Invalid request: "error" must be an object with an integer code')
    return Response(raw_id, raw.get("result"), error if has_error else None)


def encode_result(request_id: RequestId, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: RequestId | None, error: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def encode_notification(method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return orjson.dumps(message)


def encode_request(request_id: RequestId, method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def require_str(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"params.{key} must be a non-empty string")
    return value


def optional_object(params: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = params.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidParams(f"params.{key} must be an object")
    return value
