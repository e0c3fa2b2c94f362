"""Finding the catalog to serve by name: a built-in one, or ``package.module:attribute``.

``MCP_CATALOG`` (and ``--catalog``) name it. The package of this server is called ``server``,
a name a user's own file may well have too; when the name given points there, the error says
so in one line instead of leaving a bare import error. A skills folder the catalog serves and
this server refuses (:class:`~server.catalog.frontmatter.SkillError`, raised while the module
is imported or its factory runs) is one line too, naming the file: it is configuration, not a
bug to trace.
"""

from __future__ import annotations

import importlib
from typing import Any

from server.catalog.catalog import Catalog
from server.catalog.frontmatter import SkillError
from server.errors import ConfigurationError


class CatalogNotFound(ConfigurationError):
    """The catalog named cannot be loaded; the message says why in one line."""


BUILTIN_CATALOGS = {
    "probe": "server.builtin.probe:catalog",
    "conformance": "server.builtin.conformance:catalog",
}


def load_catalog(spec: str) -> Catalog:
    """A built-in catalog by name, or ``package.module:attribute`` (a Catalog or a factory)."""
    target = BUILTIN_CATALOGS.get(spec, spec)
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise CatalogNotFound(
            f"MCP_CATALOG={spec!r}: use probe, conformance or package.module:attribute"
        )
    if module_name == "server":
        raise CatalogNotFound(_shadowed(spec))  # this package holds no catalog of yours
    try:
        found: Any = importlib.import_module(module_name)
    except SkillError as refused:
        raise CatalogNotFound(f"MCP_CATALOG={spec!r}: {refused}") from None
    except ModuleNotFoundError as error:
        # The named module (or a package on its way) does not exist, as opposed to one that
        # exists and fails to import something of its own (raised as it is).
        if error.name != module_name and not module_name.startswith(f"{error.name}."):
            raise
        if module_name.startswith("server."):
            raise CatalogNotFound(_shadowed(spec)) from error
        raise CatalogNotFound(
            f"MCP_CATALOG={spec!r}: no module {module_name!r} on the import path (python -m "
            "server and mcp-http-server look in the current folder, then PYTHONPATH)"
        ) from error
    where = module_name
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise CatalogNotFound(f"MCP_CATALOG={spec!r}: {where} has no attribute {part!r}")
        found = getattr(found, part)
        where = f"{where}.{part}"
    if callable(found) and not isinstance(found, Catalog):
        try:
            found = found()
        except SkillError as refused:
            raise CatalogNotFound(f"MCP_CATALOG={spec!r}: {refused}") from None
    if not isinstance(found, Catalog):
        raise CatalogNotFound(f"MCP_CATALOG={spec!r} names a {type(found).__name__}, not a Catalog")
    return found


def _shadowed(spec: str) -> str:
    # A user's own server.py (or server/ package) cannot be imported under this package's name,
    # and shadows the package wherever it comes first on the import path.
    return (
        f"MCP_CATALOG={spec!r}: 'server' is the name of this package (mcp-http-server), so your "
        "own server.py or server/ cannot be imported under it; rename it (say my_server.py) "
        "and set MCP_CATALOG=my_server:catalog"
    )
