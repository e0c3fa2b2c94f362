"""One trip down and one back: what a request asks of each layer, counted.

A ``tools/call`` goes endpoint -> the era's HTTP half -> validate -> dispatch -> tool, and its
answer back the same way, once: its tool is looked up once (and carried, scopes included),
``serves`` is asked at most once (the modern era's validate asks it; in the legacy era a tool
found is proof enough that tools are served), the call is started eagerly once (one
:class:`~server.dispatch.Handling`, the way both eras run a call),
and ``initialize`` writes its session once, owner included. The endpoint itself names no MCP
method. Everything runs in process (``httpx.ASGITransport``); counts come from spies on the
app's own objects.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import server.transport.endpoint
from server import Catalog
from server.aio import Started
from server.app import create_app
from server.catalog.tools import Tool
from server.dispatch import Handling
from server.legacy.sessions import Session
from server.protocol import LEGACY_METHODS, MODERN_METHODS
from server.settings import Settings
from tests.support.app import serving
from tests.support.mcp_client import (
    LegacySession,
    ModernClient,
    initialize,
    legacy,
    legacy_headers,
    modern,
    modern_meta,
)

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
TOKEN = "a-one-trip-test-token-0123456789"
# The settings of a server that wants a token, and the client's header that carries it.
AUTH = {
    "auth": "tokens",
    "auth_tokens": "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest(),
    "auth_token_scopes": ["mcp", "tools:admin"],
    "headers": {"Authorization": f"Bearer {TOKEN}"},
}


def one_trip_catalog() -> Catalog:
    catalog = Catalog("one-trip-test", "1.0.0")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool(scopes=["tools:admin"])
    async def wipe() -> str:
        """Needs the tools:admin scope."""
        return "wiped"

    @catalog.tool(
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
            "required": ["region"],
        }
    )
    async def pick(region: str) -> str:
        """A tool with a header-mirrored parameter."""
        return f"picked {region}"

    @catalog.resource("test://doc", mime_type="text/plain", ttl_ms=1234)
    def doc() -> str:
        """A document with its own ttl."""
        return "the doc"

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"

    return catalog


serve = serving(one_trip_catalog, base_url="http://127.0.0.1")


async def post_modern(
    client: httpx.AsyncClient, method: str, params: dict[str, Any], **headers: str
) -> dict[str, Any]:
    """One modern request (the Authorization the client carries, ``headers`` added)."""
    response = await ModernClient(client).post(modern(method, params), **headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


class CountingDict(dict[str, Any]):
    """A catalog's table that counts the lookups by name."""

    gets = 0

    def get(self, key: Any, default: Any = None) -> Any:
        self.gets += 1
        return super().get(key, default)


@contextlib.contextmanager
def counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Iterator[list[Any]]:
    """Every call of ``owner.name`` in the block, by its first argument."""
    calls: list[Any] = []
    original = getattr(owner, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else None)
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, counting)
        yield calls


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every Started made while the test runs (a Handling is one, made by its own __init__)."""
    made: list[Any] = []
    for kind in (Started, Handling):
        init = kind.__init__

        def counting(self: Started[Any], *args: Any, _init: Any = init) -> None:
            made.append(self)
            _init(self, *args)

        monkeypatch.setattr(kind, "__init__", counting)
    return made


# -- the modern era -------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [{}, AUTH], ids=["no-auth", "auth"])
@pytest.mark.parametrize(
    ("params", "headers", "text"),
    [
        ({"name": "echo", "arguments": {"text": "hi"}}, {}, "hi"),
        ({"name": "wipe", "arguments": {}}, {}, "wiped"),
        ({"name": "pick", "arguments": {"region": "eu"}}, {"Mcp-Param-Region": "eu"}, "picked eu"),
    ],
)
async def test_a_modern_tools_call_looks_its_tool_up_once(
    settings: dict[str, Any], params: dict[str, Any], headers: dict[str, str], text: str
) -> None:
    async with serve(**settings) as (client, app):
        tools = app.catalog.tools = CountingDict(app.catalog.tools)
        body = await post_modern(client, "tools/call", params, **headers)
    assert body["result"]["content"] == [{"type": "text", "text": text}]
    assert tools.gets == 1


async def test_a_modern_tool_call_is_served_and_started_once(
    monkeypatch: pytest.MonkeyPatch, starts: list[Any]
) -> None:
    async with serve() as (client, app):
        with counted(monkeypatch, app.modern.dispatcher, "serves") as served:
            body = await post_modern(
                client, "tools/call", {"name": "echo", "arguments": {"text": "x"}}
            )
            # A tool that resolves is a tool served: the capability is not asked; a name that
            # does not resolve asks it once (and the handler names the unknown tool).
            assert served == []
            unknown = await post_modern(client, "tools/call", {"name": "nope", "arguments": {}})
            assert served == ["tools/call"]
    assert body["result"]["content"] == [{"type": "text", "text": "x"}]
    assert "nope" in unknown["error"]["message"]
    assert len(starts) == 2
    assert all(type(started) is Handling for started in starts)


async def test_prompts_and_resources_are_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async with serve() as (client, app):
        prompts = app.catalog.prompts = CountingDict(app.catalog.prompts)
        got = await post_modern(
            client, "prompts/get", {"name": "greet", "arguments": {"name": "A"}}
        )
        with counted(monkeypatch, app.catalog, "find_resource") as found:
            read = await post_modern(client, "resources/read", {"uri": "test://doc"})
    assert got["result"]["messages"][0]["content"]["text"] == "Hello A"
    assert prompts.gets == 1
    assert read["result"]["contents"][0]["text"] == "the doc"
    assert read["result"]["ttlMs"] == 1234  # the resource's own, from the lookup validate made
    assert found == ["test://doc"]


# -- the legacy era -------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [{}, AUTH], ids=["no-auth", "auth"])
async def test_a_legacy_tools_call_looks_its_tool_up_once_and_is_served_and_started_once(
    settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch, starts: list[Any]
) -> None:
    async with serve(**settings) as (client, app):
        session = await LegacySession(client).initialize()
        tools = app.catalog.tools = CountingDict(app.catalog.tools)
        starts.clear()
        with counted(monkeypatch, app.modern.dispatcher, "serves") as served:
            body = await session.call("tools/call", {"name": "wipe", "arguments": {}})
    assert body["result"]["content"] == [{"type": "text", "text": "wiped"}]
    assert tools.gets == 1
    # A plain tool's call (Dispatcher.plain_tool) is not asked about: its tool was found.
    assert served == []
    assert len(starts) == 1
    assert all(type(started) is Handling for started in starts)


async def test_initialize_writes_its_session_once_with_its_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serve(**AUTH) as (client, app):
        writes: list[tuple[str, str | None]] = []
        create, save = app.sessions.create, app.sessions.save

        async def counting_create(*args: Any, **kwargs: Any) -> Session:
            session = await create(*args, **kwargs)
            writes.append(("create", session.owner))
            return session

        async def counting_save(session: Session) -> None:
            writes.append(("save", session.owner))
            await save(session)

        monkeypatch.setattr(app.sessions, "create", counting_create)
        monkeypatch.setattr(app.sessions, "save", counting_save)
        session = await LegacySession(client).initialize(notify=False)
        assert session.session_id is not None
        found = await app.sessions.get(session.session_id)
    assert found is not None
    assert found.owner is not None
    assert writes == [("create", found.owner)]


async def test_a_batch_checks_the_tool_scopes_of_every_request_before_any_starts() -> None:
    token = "a-token-without-the-admin-scope-0123"
    plain = {
        "auth": "tokens",
        "auth_tokens": "sha256:" + hashlib.sha256(token.encode()).hexdigest(),
        "auth_token_scopes": ["mcp"],
    }
    async with serve(**plain) as (client, _):
        client.headers["Authorization"] = f"Bearer {token}"
        session = await LegacySession(client, "2025-03-26").initialize()
        echo = legacy("tools/call", {"name": "echo", "arguments": {"text": "a"}}, 1)
        allowed = await session.post([echo], accept="application/json")
        wipe = legacy("tools/call", {"name": "wipe"}, 2)
        refused = await session.post([echo, wipe], accept="application/json")
    assert allowed.status_code == 200
    assert allowed.json()[0]["result"]["content"][0]["text"] == "a"
    assert refused.status_code == 403
    assert refused.json()["error"]["data"] == {
        "error": "insufficient_scope",
        "scope": "tools:admin",
    }
    assert "insufficient_scope" in refused.headers["www-authenticate"]


@pytest.mark.parametrize("verb", ["POST", "DELETE"])
async def test_an_unexpected_failure_before_the_answer_is_an_internal_error(
    verb: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve() as (client, app):
        session = await LegacySession(client).initialize()

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("store-secret-detail")

        monkeypatch.setattr(app.legacy.era, "initialize", broken)
        monkeypatch.setattr(app.sessions, "delete", broken)
        if verb == "POST":
            response = await client.post(
                "/mcp",
                json=initialize(),
                headers=legacy_headers(version=None, accept="application/json"),
            )
        else:
            headers = legacy_headers(session.session_id, Content_Type=None, Accept=None)
            response = await client.delete("/mcp", headers=headers)
    assert response.status_code == 200
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 0 if verb == "POST" else None,
        "error": {"code": -32603, "message": "Internal error"},
    }
    assert "store-secret-detail" not in response.text
    assert any("store-secret-detail" in str(record.exc_info) for record in caplog.records)


# -- the endpoint -------------------------------------------------------------------------------


def test_the_endpoint_names_no_mcp_method() -> None:
    path = Path(server.transport.endpoint.__file__)
    methods = set(MODERN_METHODS) | set(LEGACY_METHODS)
    named = {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value in methods or node.value.startswith("notifications/"))
    }
    assert named == set()


def test_a_tool_carried_by_validate_is_the_catalog_s() -> None:
    catalog = one_trip_catalog()
    app = create_app(Settings(_env_file=None, records=["none"]), catalog)
    from server.jsonrpc import Request

    request = Request(1, "tools/call", {"name": "echo", "_meta": modern_meta()})
    headers = {b"mcp-protocol-version": MODERN.encode(), b"mcp-method": b"tools/call"}
    headers[b"mcp-name"] = b"echo"
    call = app.modern.validate(request, headers)
    assert isinstance(call.target, Tool)
    assert call.target is catalog.tools["echo"]
