"""``python -m server call METHOD [PARAMS_JSON] --url URL``: one modern-era request from a shell.

It fills in what 2026-07-28 asks of every request (``params._meta``, the
``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers, built by
:func:`server.modern.headers.modern_request`), sends it, and prints the result as JSON. Exit
status: 0 for a result, 1 for a JSON-RPC error or an ``isError`` result, 2 when no answer came.
An input-required result is printed like any other: send its ``requestState`` and your
``inputResponses`` back for the next round. What a server sends is printed with terminal
escapes and bidirectional overrides escaped; ``--timeout`` bounds the whole command. The
default ``--url`` is the server configured here, passed in by :mod:`server.cli.main`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from server.modern.headers import modern_request

EXIT_RESULT, EXIT_ERROR, EXIT_NO_ANSWER = 0, 1, 2
DEFAULT_URL = "http://127.0.0.1:8000/mcp"
# What a terminal acts on rather than shows: C0 (but newline and tab), DEL, C1, and the
# bidirectional embeddings, overrides and isolates.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# In JSON text C0 is escaped already (json.dumps), and every control sits inside a string.
_JSON_CONTROLS = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape."""
    return _CONTROLS.sub(lambda found: ascii(found.group())[1:-1], text)


def shown_json(value: Any) -> str:
    """``value`` as indented JSON that a terminal shows as it is (still valid JSON)."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _JSON_CONTROLS.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


@dataclass
class Event:
    """One server-sent event."""

    id: str | None
    event: str
    data: str

    def message(self) -> dict[str, Any] | None:
        """Its data as a JSON object; None for anything else."""
        try:
            value = json.loads(self.data)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class EventParser:
    """Server-sent events out of the text of a stream, piece by piece as it arrives (or all
    of it at once): this command's and the doctor's reader. Lines end at CRLF, LF or CR
    only (not at U+2028, which JSON text may hold as it is)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.kind = "message"
        self.data: list[str] = []
        self._rest = ""  # the start of a line whose end has not come yet

    def feed(self, text: str) -> list[Event]:
        """The events the next piece of the stream ends (comments skipped)."""
        text = self._rest + text
        held = ""
        if text.endswith("\r"):  # maybe the first half of a CRLF: wait for the next piece
            text, held = text[:-1], "\r"
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._rest = lines.pop() + held
        return [event for line in lines if (event := self._line(line)) is not None]

    def _line(self, line: str) -> Event | None:
        if line == "":
            found = Event(self.id, self.kind, "\n".join(self.data)) if self.data else None
            self.id, self.kind, self.data = None, "message", []
            return found
        if line.startswith("id:"):
            self.id = line[3:].strip()
        elif line.startswith("event:"):
            self.kind = line[6:].strip()
        elif line.startswith("data:"):
            self.data.append(line[5:].removeprefix(" "))
        return None


def response_of(content_type: str, body: bytes, request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to ``request_id`` in a JSON or an SSE answer (None: not there;
    ValueError for data that is not JSON)."""
    if content_type.startswith("text/event-stream"):
        # A body read to its end: its last event counts even without the blank line after it.
        for event in EventParser().feed(body.decode("utf-8", "replace") + "\n\n"):
            message = json.loads(event.data)
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
    parser.add_argument(
        "--url",
        help=f"the MCP endpoint (default: the server configured here by MCP_HOST, MCP_PORT and "
        f"MCP_PATH, else {DEFAULT_URL})",
    )
    parser.add_argument("--token", help="a bearer token (sent as Authorization: Bearer ...)")
    parser.add_argument(
        "--capabilities",
        default="{}",
        help="the client capabilities as JSON, e.g. '{\"elicitation\": {}}' to be asked",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds the whole command may take"
    )


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


def run(args: argparse.Namespace, default_url: str = DEFAULT_URL) -> int:
    """The ``call`` command: 0, 1 or 2 as the module says."""
    params, capabilities = (
        _object(args.params, "PARAMS_JSON"),
        _object(args.capabilities, "--capabilities"),
    )
    if params is None or capabilities is None:
        return EXIT_NO_ANSWER
    if not args.timeout > 0:
        print("call: --timeout must be a number of seconds above 0", file=sys.stderr)
        return EXIT_NO_ANSWER
    url = args.url or default_url
    message, headers = modern_request(args.method, params, capabilities=capabilities)
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    try:
        status, content_type, body = asyncio.run(
            _post(url, json.dumps(message), headers, args.timeout)
        )
    except TimeoutError:
        print(f"call: no answer from {shown(url)} within {args.timeout:g} s", file=sys.stderr)
        return EXIT_NO_ANSWER
    except Exception as failed:  # httpx's errors, and an unusable URL
        print(f"call: no answer from {shown(url)}: {shown(str(failed))}", file=sys.stderr)
        return EXIT_NO_ANSWER
    try:
        response = response_of(content_type, body, message["id"])
    except ValueError:
        response = None
    if response is None or ("result" not in response and "error" not in response):
        print(f"call: HTTP {status} without a JSON-RPC answer", file=sys.stderr)
        print(shown(body[:2000].decode("utf-8", "replace")), file=sys.stderr)
        return EXIT_NO_ANSWER
    if "error" in response:
        print(shown_json(response["error"]))
        return EXIT_ERROR
    result = response["result"]
    print(shown_json(result))
    failed_tool = isinstance(result, dict) and result.get("isError") is True
    return EXIT_ERROR if failed_tool else EXIT_RESULT


async def _post(
    url: str, body: str, headers: Mapping[str, str], seconds: float
) -> tuple[int, str, bytes]:
    """The answer's status, Content-Type and body, all of it within ``seconds`` (TimeoutError
    past them): httpx's own timeouts bound each wait, not their sum."""
    import httpx

    async with asyncio.timeout(seconds), httpx.AsyncClient(timeout=seconds) as client:
        answer = await client.post(url, content=body, headers=dict(headers))
        return answer.status_code, answer.headers.get("content-type", ""), answer.content
