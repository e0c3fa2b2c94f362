"""A catalog with scoped tools, for the replica test of ``MCP_SCOPED_ITEMS=hidden``
(``tests/e2e/test_scoped_replicas.py``), served as ``tests.support.scoped_catalog:catalog``.

- ``open_a``, ``open_b``: no scopes; ``read_a``: ``mcp:read``; ``write_a``, ``write_b``:
  ``mcp:write``, declared between the others so hidden ones fall on every page of 2.
- ``acme_only``: no scopes, but the rule shows it to tenant ``acme`` alone.
- ``grow``: adds ``write_c`` (``mcp:write``) and ``open_c`` to this replica's catalog (a list
  change; call it on each replica); ``shrink`` removes them again.
- ``open_prompt`` and ``write_prompt`` (``mcp:write``), each with a completion of ``style``;
  ``open://readme``; the template ``notes://{x}`` (``mcp:write``) with a completion of ``x``.
"""

from __future__ import annotations

from typing import Any

from server.catalog import Catalog

catalog = Catalog("scoped-test", "1.0.0")

for _name, _scopes in [
    ("open_a", ()),
    ("write_a", ("mcp:write",)),
    ("read_a", ("mcp:read",)),
    ("write_b", ("mcp:write",)),
    ("acme_only", ()),
    ("open_b", ()),
]:

    def _tool(count: int = 0) -> str:
        return "ok"

    catalog.tool(_tool, name=_name, scopes=_scopes)


@catalog.set_visibility_rule
def tenant_rule(caller: Any, item: Any) -> bool:
    return getattr(item, "name", "") != "acme_only" or caller.tenant == "acme"


@catalog.tool
def grow() -> str:
    """Adds write_c and open_c (once)."""
    if "open_c" not in catalog.tools:
        catalog.tool(lambda: "c", name="write_c", scopes=["mcp:write"])
        catalog.tool(lambda: "c", name="open_c")
    return "grown"


@catalog.tool
def shrink() -> str:
    """Removes write_c and open_c (if there)."""
    catalog.remove_tool("write_c")
    catalog.remove_tool("open_c")
    return "shrunk"


for _name, _prompt_scopes in [("open_prompt", ()), ("write_prompt", ("mcp:write",))]:

    def _prompt(style: str) -> str:
        return style

    catalog.prompt(_prompt, name=_name, scopes=_prompt_scopes)
    catalog.completion(prompt=_name, argument="style")(lambda value, arguments: ["warm"])


@catalog.resource("open://readme")
def readme() -> str:
    return "read me"


@catalog.resource_template("notes://{x}", scopes=["mcp:write"])
def notes(x: str) -> str:
    return x


catalog.completion(template="notes://{x}", argument="x")(lambda value, arguments: ["one"])
