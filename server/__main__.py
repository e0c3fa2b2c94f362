"""``python -m server`` (and the ``mcp-http-server`` script): serve a catalog with uvicorn, or
report on its records.

``python -m server`` (or ``serve``) serves; configuration comes from ``MCP_*`` environment
variables (see ``.env.example``), and ``serve --host --port --catalog`` override theirs
(``--reload`` restarts on changes, for development). Like uvicorn (its ``--app-dir``), it
puts the current folder first on the import path, so ``--catalog my_server:catalog`` finds
``./my_server.py`` from the installed script too. A ``./server.py`` (or ``./server/``) there
shadows this package, which is named ``server``: that is said in one line (:func:`shadowing`).
``python -m server report FILE...`` reads request records back (see ``docs/records.md``) and
needs no configuration. ``python -m server token`` prints a new random bearer token and the
digest line for ``MCP_AUTH_TOKENS``. ``python -m server call METHOD [PARAMS_JSON] --url URL``
sends one modern-era request with its headers and ``_meta`` filled in
(:mod:`server.client_cli`). The serving modules are imported only to serve, so a
report does not load the web stack.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from server import client_cli
from server.errors import ConfigurationError
from server.report import cli as report_cli

log = logging.getLogger("server")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server", description="A dual-era MCP server for HTTP."
    )
    commands = parser.add_subparsers(dest="command", metavar="{serve,report,token,call}")
    serving = commands.add_parser("serve", help="serve the configured catalog (the default)")
    serving.add_argument("--host", help="address to listen on (overrides MCP_HOST)")
    serving.add_argument("--port", type=int, help="port to listen on (overrides MCP_PORT)")
    serving.add_argument(
        "--catalog",
        help="probe, conformance or module:attribute, looked up from the current folder "
        "(overrides MCP_CATALOG)",
    )
    serving.add_argument(
        "--reload", action="store_true", help="restart when a file changes (development)"
    )
    report_cli.add_arguments(
        commands.add_parser("report", help="per-client report from request record files")
    )
    commands.add_parser("token", help="print a new random token and its MCP_AUTH_TOKENS digest")
    client_cli.add_arguments(
        commands.add_parser("call", help="send one request (modern era) and print its result")
    )
    args = parser.parse_args(argv)
    if args.command == "call":
        from server.settings import local_endpoint_url

        return client_cli.run(args, local_endpoint_url())
    if args.command == "report":
        return report_cli.run(args)
    if args.command == "token":
        return token()
    return serve(
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        catalog=getattr(args, "catalog", None),
        reload=getattr(args, "reload", False),
    )


def token() -> int:
    from server.security.auth import new_token

    secret, digest = new_token()
    print("# The token: clients send it as 'Authorization: Bearer <token>'. Keep it secret.")
    print(secret)
    print("# Its digest, for MCP_AUTH_TOKENS (comma-separate several):")
    print(digest)
    return 0


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
    from server import logs
    from server.serving import serve as run
    from server.settings import logging_choice

    # Configured before the settings load, so a refusal to start is told in the chosen format.
    level, log_format = logging_choice()
    logs.configure(log_format, level)
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
    ours = Path(__file__).resolve().parent
    module, package = folder / "server.py", folder / "server" / "__init__.py"
    if module.is_file():
        return module
    if package.is_file() and package.resolve().parent != ours:
        return package.parent
    return None


if __name__ == "__main__":
    sys.exit(main())
