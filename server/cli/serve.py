"""``python -m server serve`` (the default command): serve a catalog with uvicorn.

``serve --host --port --catalog`` override ``MCP_HOST``, ``MCP_PORT`` and ``MCP_CATALOG``
(``--reload`` restarts on changes, for development). Like uvicorn (its ``--app-dir``), it puts
the current folder first on the import path, so ``--catalog my_server:catalog`` finds
``./my_server.py`` from the installed script too. A ``./server.py`` (or ``./server/``) there
shadows this package, which is named ``server``: that is said in one line (:func:`shadowing`).
The serving modules are imported inside :func:`serve`, so the other commands never load them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from server.errors import ConfigurationError

log = logging.getLogger("server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to listen on (overrides MCP_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (overrides MCP_PORT)")
    parser.add_argument(
        "--catalog",
        help="probe, conformance or module:attribute, looked up from the current folder "
        "(overrides MCP_CATALOG)",
    )
    parser.add_argument(
        "--reload", action="store_true", help="restart when a file changes (development)"
    )


def serve(
    *,
    host: str | None = None,
    port: int | None = None,
    catalog: str | None = None,
    reload: bool = False,
) -> int:
    """Serve; a configuration error is one line (the traceback only at debug level), exit 2."""
    folder = Path.cwd()
    if str(folder) not in (os.path.abspath(entry) for entry in sys.path):
        sys.path.insert(0, str(folder))  # as uvicorn's --app-dir (python -m does it already)
    shadow = shadowing(folder)
    if shadow is not None:
        print(
            f"mcp-http-server: {shadow} shadows this server's package, which is named 'server' "
            "(python -m server runs your file instead, and its 'from server import ...' imports "
            "itself: a circular import); rename it, say to my_server.py, and serve it with "
            "--catalog my_server:catalog",
            file=sys.stderr,
        )
    from server.logs import configure as configure_logs
    from server.serving import serve as run
    from server.settings import logging_choice

    # Configured before the settings load, so a refusal to start is told in the chosen format.
    level, log_format = logging_choice()
    configure_logs(log_format, level)
    overrides: dict[str, object] = {"host": host, "port": port}
    overrides = {name: value for name, value in overrides.items() if value is not None}
    try:
        run(catalog, reload=reload, **overrides)
    except ConfigurationError as error:
        log.critical("cannot start: %s", error)  # shown at every MCP_LOG_LEVEL
        log.debug("the configuration error in full", exc_info=True)
        return 2
    return 0


def shadowing(folder: Path) -> Path | None:
    """``folder``'s own ``server.py`` or ``server/`` package, which is not this one: first on
    the import path, it is what ``python -m server`` and ``import server`` would load."""
    ours = Path(__file__).resolve().parents[1]  # server/ (this is server/cli/serve.py)
    module, package = folder / "server.py", folder / "server" / "__init__.py"
    if module.is_file():
        return module
    if package.is_file() and package.resolve().parent != ours:
        return package.parent
    return None
