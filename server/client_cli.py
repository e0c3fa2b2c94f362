"""``python -m server call METHOD [PARAMS_JSON] --url URL``: one modern-era request from a shell.

It fills in what protocol 2026-07-28 asks of every request (``params._meta`` with the protocol
version and client capabilities; the ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name``
headers), sends it, and prints the result as JSON on stdout. Exit status: 0 for a result, 1 for
a JSON-RPC error or a tool result with ``isError`` (printed the same way), 2 when no answer came
(bad arguments, no connection, an answer that is not JSON-RPC).

An input-required result is printed like any other: send its ``requestState`` and your
``inputResponses`` back in PARAMS_JSON for the next round. :func:`modern_request` is the part
that builds the request, shared with :mod:`server.testing`.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import sys
from collections.abc import Mapping
from typing import Any

from server.protocol import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    MODERN_VERSION,
    NAME_FIELD_BY_METHOD,
)

EXIT_RESULT, EXIT_ERROR, EXIT_NO_ANSWER = 0, 1, 2
_ids = itertools.count(1)


def header_value(value: Any) -> str:
    """A body value as a header carries it: visible ASCII as is, anything else base64-encoded
    between the sentinels the server decodes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text.isascii() and text.isprintable() and text == text.strip(" \t"):
        return text
    return "=?base64?" + base64.b64encode(text.encode()).decode("ascii") + "?="


def modern_request(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    request_id: int | str | None = None,
    capabilities: Mapping[str, Any] | None = None,
    client_info: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """A modern-era request and its headers; ``_meta`` keys already in ``params`` win."""
    body_params = dict(params or {})
    meta = {
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_CAPABILITIES: dict(capabilities or {}),
        META_CLIENT_INFO: dict(client_info or {"name": "mcp-http-server-call", "version": "1"}),
    }
    meta.update(body_params.get("_meta") or {})
    body_params["_meta"] = meta
    message = {
        "jsonrpc": "2.0",
        "id": next(_ids) if request_id is None else request_id,
        "method": method,
        "params": body_params,
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": str(meta[META_PROTOCOL_VERSION]),
        "Mcp-Method": method,
    }
    name_field = NAME_FIELD_BY_METHOD.get(method)
    if name_field is not None and body_params.get(name_field) is not None:
        headers["Mcp-Name"] = header_value(body_params[name_field])
    return message, headers


def response_of(content_type: str, body: bytes, request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to ``request_id`` in a JSON or an SSE answer (None: not there)."""
    if content_type.startswith("text/event-stream"):
        for event in body.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(
                line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")
            )
            if not data:
                continue
            message = json.loads(data)
            if isinstance(message, dict) and message.get("id") == request_id:
                return message
        return None
    message = json.loads(body)
    return message if isinstance(message, dict) else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("method", help="the JSON-RPC method, e.g. tools/list or tools/call")
    parser.add_argument(
        "params", nargs="?", default="{}", help='the params as JSON, e.g. \'{"name": "echo"}\''
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000/mcp", help="the MCP endpoint")
    parser.add_argument("--token", help="a bearer token (sent as Authorization: Bearer ...)")
    parser.add_argument(
        "--capabilities",
        default="{}",
        help="the client capabilities as JSON, e.g. '{\"elicitation\": {}}' to be asked",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")


def _object(text: str, what: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as bad:
        print(f"call: {what} is not JSON: {bad}", file=sys.stderr)
        return None
    if not isinstance(value, dict):
        print(f"call: {what} must be a JSON object", file=sys.stderr)
        return None
    return value


def run(args: argparse.Namespace) -> int:
    import httpx

    params, capabilities = (
        _object(args.params, "PARAMS_JSON"),
        _object(args.capabilities, "--capabilities"),
    )
    if params is None or capabilities is None:
        return EXIT_NO_ANSWER
    message, headers = modern_request(args.method, params, capabilities=capabilities)
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    try:
        answer = httpx.post(
            args.url, content=json.dumps(message), headers=headers, timeout=args.timeout
        )
        response = response_of(
            answer.headers.get("content-type", ""), answer.content, message["id"]
        )
    except httpx.HTTPError as failed:
        print(f"call: no answer from {args.url}: {failed}", file=sys.stderr)
        return EXIT_NO_ANSWER
    except ValueError:
        response = None
    if response is None or ("result" not in response and "error" not in response):
        print(f"call: HTTP {answer.status_code} without a JSON-RPC answer", file=sys.stderr)
        print(answer.text[:2000], file=sys.stderr)
        return EXIT_NO_ANSWER
    if "error" in response:
        print(json.dumps(response["error"], indent=2, ensure_ascii=False))
        return EXIT_ERROR
    result = response["result"]
    print(json.dumps(result, indent=2, ensure_ascii=False))
    failed_tool = isinstance(result, dict) and result.get("isError") is True
    return EXIT_ERROR if failed_tool else EXIT_RESULT
