"""The apps the embedding and any-server tests serve: one catalog, served every way there is.

Imported by the servers those tests start (``uvicorn tests.e2e.embedding_apps:app``,
``--factory``, gunicorn, ``python -m server serve --catalog ...``) and by the in-thread tests.
The apps are built on first use (a module ``__getattr__``), so importing the module for one
of them builds no other:

- ``app``: ``create_app`` as is; ``factory``: the same, for ``uvicorn --factory``;
- ``starlette_host`` and ``fastapi_host``: host apps with a route of their own and the MCP
  app mounted at ``/ai`` (so the endpoint is ``/ai/mcp``), passing its lifespan on: the one
  line docs/deployment.md asks for;
- ``forgetful_host``: the same Starlette host without that line.

The catalog's own lifespan appends ``enter <pid>`` and ``exit <pid>`` to the file named by
``EMBED_LIFESPAN_LOG`` (if set), so a test can count how often each process ran it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from server import Catalog, Context, create_app
from server.app import Application
from server.settings import Settings

MOUNT = "/ai"


def _note(what: str) -> None:
    path = os.environ.get("EMBED_LIFESPAN_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{what} {os.getpid()}\n")


@contextlib.asynccontextmanager
async def lifespan(catalog: Catalog) -> AsyncIterator[dict[str, Any]]:
    _note("enter")
    try:
        yield {"pool": "open", "pid": os.getpid()}
    finally:
        _note("exit")


def embedding_catalog() -> Catalog:
    catalog = Catalog("embedding-test", "1.0.0", lifespan=lifespan)

    @catalog.tool
    def echo(text: str) -> str:
        """Sends the text back."""
        return text

    @catalog.tool
    async def slow(seconds: float, ctx: Context) -> str:
        """Reports progress once, then takes ``seconds``."""
        await ctx.report_progress(0, 1, "started")
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @catalog.tool
    def toggle() -> str:
        """Adds the tool ``extra``, or removes it: a tools/list_changed either way."""
        if catalog.remove_tool("extra"):
            return "removed"
        catalog.tool(extra)
        return "added"

    @catalog.tool
    def lifespan_state() -> dict[str, Any]:
        """What the catalog's lifespan yielded, as a tool sees it."""
        return dict(catalog.lifespan.state or {})

    return catalog


def extra() -> str:
    """Present every other time toggle runs."""
    return "extra"


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host's own route")


def build_app(settings: Settings | None = None) -> Application:
    return create_app(settings, embedding_catalog())


def build_starlette_host(settings: Settings | None = None) -> tuple[Starlette, Application]:
    mcp = build_app(settings)
    host = Starlette(
        routes=[Route("/hello", _hello), Mount(MOUNT, app=mcp)],
        lifespan=mcp.lifespan,  # the one line
    )
    return host, mcp


def build_fastapi_host(settings: Settings | None = None) -> tuple[Any, Application]:
    from fastapi import FastAPI

    mcp = build_app(settings)
    host = FastAPI(lifespan=mcp.lifespan)  # the one line
    host.get("/hello")(lambda: "the host's own route")
    host.mount(MOUNT, mcp)
    return host, mcp


def build_forgetful_host(settings: Settings | None = None) -> tuple[Starlette, Application]:
    mcp = build_app(settings)
    return Starlette(routes=[Route("/hello", _hello), Mount(MOUNT, app=mcp)]), mcp


def factory() -> Application:
    return build_app()


_BUILDERS: dict[str, Callable[[], Any]] = {
    "app": build_app,
    "starlette_host": lambda: build_starlette_host()[0],
    "fastapi_host": lambda: build_fastapi_host()[0],
    "forgetful_host": lambda: build_forgetful_host()[0],
}


def __getattr__(name: str) -> Any:
    builder = _BUILDERS.get(name)
    if builder is None:
        raise AttributeError(name)
    built = builder()
    globals()[name] = built  # once per process, however often it is asked for
    return built
