"""Tests speak MCP through the one shared client, ``tests/support/mcp_client.py``.

Three things a test file outside ``tests/support/`` may not do by hand (the checks read each file
with ``ast``, so comments and docstrings never count):

- build the modern ``_meta``: the string literals ``"io.modelcontextprotocol/protocolVersion"``
  and ``"io.modelcontextprotocol/clientCapabilities"`` both in one file (use ``modern()`` /
  ``modern_meta()``, or the ``META_*`` key constants to write a deliberately malformed one);
- build a legacy session by hand: a JSON-RPC ``initialize`` request written as a dict (with
  ``"jsonrpc"`` and ``"method": "initialize"``), or an ``Mcp-Session-Id`` header written as a
  dict key or set by subscript, in any case (use ``initialize()``, ``initialize_params()``,
  ``LegacySession`` / ``legacy_session()``, or ``legacy_headers(session_id)``, also for a
  deliberately unknown id; ``modern_headers(message, Mcp_Session_Id=...)`` for a modern request
  that carries one);
- parse SSE: a call of ``aiter_lines()`` / ``iter_lines()``, or ``.startswith("data:...")`` or
  ``.removeprefix("data:...")`` with a str or bytes prefix (use ``SSE``, ``sse_frames``,
  ``sse_messages``, ``sse_messages_blocking``, ``frames_of`` or ``messages_of``).

The files in ``ALLOWED`` keep doing one of these, each for the reason given; an entry that no
longer breaks its rule fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.mcp_client import (
    Frame,
    ModernClient,
    frames_of,
    legacy_headers,
    legacy_session,
    messages_of,
    modern,
    modern_headers,
)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
HAND_META = "builds the modern _meta by hand"
HAND_SSE = "parses SSE by hand"
HAND_LEGACY = "builds a legacy initialize or session header by hand"
SESSION_HEADER = "mcp-session-id"

ALLOWED: dict[tuple[str, str], str] = {
    ("tests/e2e/test_hostile_input.py", HAND_META): (
        "the fuzzer's subject: it generates valid and malformed _meta from the key names"
    ),
    ("tests/e2e/test_hostile_input.py", HAND_SSE): (
        "reads raw ASGI body bytes, not an httpx response, and checks each data line's framing"
    ),
    **{
        (f"tests/bench/{name}", HAND_META): (
            "benchmark scripts (outside pytest) keep their own minimal clients; not converted yet"
        )
        for name in (
            "abuse.py",
            "http_bench.py",
            "limits_load.py",
            "live_report_lag.py",
            "records_overhead.py",
            "report_speed.py",
            "streams_bench.py",
        )
    },
    **{
        (path, HAND_SSE): (
            "the 2024-11-05 HTTP+SSE transport's own wire (answers on the one GET stream; the "
            "endpoint event is support/http_sse.py's): mcp_client.py speaks Streamable HTTP"
        )
        for path in (
            "tests/transport/test_legacy_sse.py",
            "tests/e2e/test_sse_clients.py",
            "tests/state/test_bus_faults.py",
            "tests/e2e/test_nginx_forwarded.py",
        )
    },
    ("tests/chaos/http_sse.py", HAND_SSE): (
        "the 2024-11-05 HTTP+SSE transport's own wire (the endpoint event, answers on the one GET "
        "stream): mcp_client.py speaks Streamable HTTP"
    ),
    ("tests/bench/http_bench.py", HAND_SSE): (
        "benchmark script (outside pytest) with its own minimal client; not converted yet"
    ),
    ("tests/bench/abuse.py", HAND_SSE): (
        "benchmark script (outside pytest) with its own minimal client; not converted yet"
    ),
    **{
        (f"tests/bench/{name}", HAND_LEGACY): (
            "benchmark scripts (outside pytest) keep their own minimal clients; not converted yet"
        )
        for name in (
            "app_inprocess.py",
            "http_bench.py",
            "sessions_leak.py",
            "subscriptions_redis.py",
        )
    },
}


def _constant(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _is_session_header(node: ast.expr | None) -> bool:
    value = _constant(node)
    return isinstance(value, str) and value.lower() == SESSION_HEADER


def _builds_initialize(node: ast.Dict) -> bool:
    pairs = {
        _constant(key): _constant(value) for key, value in zip(node.keys, node.values, strict=True)
    }
    return "jsonrpc" in pairs and pairs.get("method") == "initialize"


def breaches(source: str) -> set[str]:
    """Which of the three rules ``source`` breaks."""
    found: set[str] = set()
    strings: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
        if isinstance(node, ast.Dict) and (
            _builds_initialize(node) or any(_is_session_header(key) for key in node.keys)
        ):
            found.add(HAND_LEGACY)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store)
            and _is_session_header(node.slice)
        ):
            found.add(HAND_LEGACY)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in ("aiter_lines", "iter_lines"):
                found.add(HAND_SSE)
            prefix = _constant(node.args[0]) if node.args else None
            if name in ("startswith", "removeprefix") and (
                (isinstance(prefix, str) and prefix.startswith("data:"))
                or (isinstance(prefix, bytes) and prefix.startswith(b"data:"))
            ):
                found.add(HAND_SSE)
    if {VERSION_KEY, CAPABILITIES_KEY} <= strings:
        found.add(HAND_META)
    return found


def checked_files() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if TESTS / "support" not in path.parents and path != Path(__file__).resolve()
    )


@functools.cache  # both checks below read the same files: parse them once a run
def found_breaches() -> frozenset[tuple[str, str]]:
    return frozenset(
        (path.relative_to(ROOT).as_posix(), rule)
        for path in checked_files()
        for rule in breaches(path.read_text(encoding="utf-8"))
    )


def test_no_test_builds_meta_or_sessions_or_parses_sse_by_hand() -> None:
    unexpected = sorted(found_breaches() - ALLOWED.keys())
    assert not unexpected, (
        "use tests/support/mcp_client.py (modern(), modern_meta(), initialize(), "
        f"legacy_headers(), LegacySession, SSE, sse_messages(), ...) instead of: {unexpected}"
    )


def test_every_allowed_file_still_needs_its_exception() -> None:
    stale = sorted(ALLOWED.keys() - found_breaches())
    assert not stale, f"remove these from ALLOWED, they follow the rule now: {stale}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (f"META = {{{VERSION_KEY!r}: 'v', {CAPABILITIES_KEY!r}: {{}}}}", {HAND_META}),
        (f"BAD = {{{VERSION_KEY!r}: 5}}", set()),  # a malformed _meta alone: allowed
        ("from tests.support.mcp_client import META_VERSION, META_CAPABILITIES", set()),
        (f"# {VERSION_KEY} {CAPABILITIES_KEY}\n'''{VERSION_KEY}'''", set()),
        ("async def f(r):\n    async for line in r.aiter_lines():\n        pass", {HAND_SSE}),
        ("def f(r):\n    return [x for x in r.iter_lines()]", {HAND_SSE}),
        ("def f(text):\n    return [x for x in text if x.startswith('data: {')]", {HAND_SSE}),
        ("def f(text):\n    return text.startswith('id:')", set()),
        ("def f(line):\n    return line.startswith(b'data: ')", {HAND_SSE}),
        ("def f(line):\n    return line.removeprefix('data:')", {HAND_SSE}),
        (
            "INIT = {'jsonrpc': '2.0', 'id': 0, 'method': 'initialize', 'params': {}}",
            {HAND_LEGACY},
        ),
        ("H = {**BASE, 'Mcp-Session-Id': sid}", {HAND_LEGACY}),
        ("def f(h, sid):\n    h['mcp-session-id'] = sid", {HAND_LEGACY}),
        # Reading the header an answer carries, or a method named in an assertion: allowed.
        ("sid = response.headers['mcp-session-id']", set()),
        ("assert record['method'] == 'initialize'", set()),
        ("R = {'jsonrpc': '2.0', 'id': 1, 'method': 'ping'}", set()),
        ("from tests.support.mcp_client import initialize, legacy_headers", set()),
    ],
)
def test_the_check_sees_each_breach(source: str, expected: set[str]) -> None:
    assert breaches(source) == expected


# -- the shared client itself ---------------------------------------------------------------


def test_modern_requests_carry_their_meta_and_the_headers_mirror_them() -> None:
    message = modern(
        "tools/call",
        {"name": "echo", "arguments": {}, "_meta": {"progressToken": "p"}},
        7,
        capabilities={"roots": {}},
        client_info={"name": "c", "version": "1"},
    )
    assert message["params"]["_meta"] == {
        VERSION_KEY: "2026-07-28",
        CAPABILITIES_KEY: {"roots": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"},
        "progressToken": "p",
    }
    headers = modern_headers(message, Accept=None, X_Extra="1")
    assert headers == {
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
        "X-Extra": "1",
    }
    read = modern_headers(modern("resources/read", {"uri": "test://a"}))
    assert read["Mcp-Name"] == "test://a"
    assert "Mcp-Name" not in modern_headers(modern("tools/list"))
    assert "MCP-Protocol-Version" not in legacy_headers("s1", "2025-03-26")
    assert legacy_headers("s1")["MCP-Protocol-Version"] == "2025-11-25"


def test_one_sse_parser_reads_ids_retry_comments_and_multi_line_data() -> None:
    text = (
        ": keep-alive\n\n"
        "id: s1_0\ndata: \nretry: 250\n\n"
        'event: message\nid: s1_1\ndata: {"a":\ndata:  1}\n\n'
    )
    frames = frames_of(text)
    assert frames == [Frame("s1_0", "", 250), Frame("s1_1", '{"a":\n 1}', None)]
    assert messages_of(text) == [{"a": 1}]


@pytest.mark.anyio
async def test_the_clients_speak_both_eras_to_the_app() -> None:
    catalog = Catalog("support-test", "1")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    app = create_app(Settings(_env_file=None, records=["none"]), catalog)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.lifespan(app.starlette),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
    ):
        client = ModernClient(http)
        assert [tool["name"] for tool in (await client.call("tools/list"))["result"]["tools"]] == [
            "echo"
        ]
        echoed = await client.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert echoed["result"]["content"] == [{"type": "text", "text": "hi"}]
        session = await legacy_session(http)
        assert session.session_id
        assert (await session.call("ping"))["result"] == {}
