"""The app under test, in process: ``serve`` runs ``create_app`` over httpx's ASGI transport (no
socket), and ``make_catalog`` is the small catalog a test serves when it needs nothing special.

A test module with a catalog or options of its own binds them once with ``serving`` (``serve =
serving(my_catalog, lifespan=False)``) and calls ``serve(**settings)`` like the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from server import Catalog, Context, ToolError
from server.app import Application, create_app
from server.settings import Settings

BASE_URL = "http://127.0.0.1:8000"

Served = AbstractAsyncContextManager[tuple[httpx.AsyncClient, Application]]


def make_catalog(name: str = "test", version: str = "1.0.0") -> Catalog:
    """Tools that answer, refuse (``isError``), crash, ask the client and mirror a parameter
    into a header; a resource, one that crashes, a resource template and a prompt."""
    catalog = Catalog(name, version)

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def refuse() -> str:
        """Fails the way a tool should: a result with isError."""
        raise ToolError("refused on purpose")

    @catalog.tool
    async def explode() -> str:
        """Fails the way a tool should not."""
        raise RuntimeError("tool-secret-detail")

    @catalog.tool
    async def ask(ctx: Context) -> str:
        """Needs elicitation."""
        answer = await ctx.elicit("Name?", {"type": "object", "properties": {}}, key="name")
        return answer.action

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

    @catalog.resource("test://doc", mime_type="text/plain")
    def doc() -> str:
        """A document."""
        return "the doc"

    @catalog.resource("test://broken")
    def broken() -> str:
        """A resource whose handler crashes."""
        raise RuntimeError("resource-secret-detail")

    @catalog.resource_template("test://page/{number}")
    def page(number: str) -> str:
        """A page."""
        return f"page {number}"

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"

    return catalog


@contextlib.asynccontextmanager
async def serve(
    catalog: Catalog | None = None,
    *,
    lifespan: bool = True,
    address: str = "127.0.0.1",
    base_url: str = BASE_URL,
    headers: Mapping[str, str] | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, Application]]:
    """The app of ``Settings(**settings)`` (no .env; records off unless asked) serving
    ``catalog`` (``make_catalog()`` by default), its lifespan running unless ``lifespan`` is
    False, and a client calling it from ``address``."""
    settings.setdefault("records", ["none"])
    app = create_app(
        Settings(_env_file=None, **settings), catalog if catalog is not None else make_catalog()
    )
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with contextlib.AsyncExitStack() as stack:
        if lifespan:
            await stack.enter_async_context(app.starlette.router.lifespan_context(app.starlette))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=transport, base_url=base_url, headers=headers)
        )
        yield client, app


def serving(
    default: Callable[[], Catalog] = make_catalog, **defaults: Any
) -> Callable[..., Served]:
    """``serve`` with a module's own catalog (built afresh for each app) and options."""

    def bound(catalog: Catalog | None = None, **options: Any) -> Served:
        return serve(catalog if catalog is not None else default(), **{**defaults, **options})

    return bound
