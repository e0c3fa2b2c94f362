"""``python -m server``: serve the configured catalog with uvicorn, or report on its records.

``python -m server`` (or ``serve``) serves; configuration comes only from ``MCP_*``
environment variables (see ``.env.example``). ``python -m server report FILE...`` reads
request records back (see ``docs/records.md``) and needs no configuration. ``python -m
server token`` prints a new random bearer token and the digest line for ``MCP_AUTH_TOKENS``.
The serving modules are imported only to serve, so a report does not load the web stack.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import TYPE_CHECKING

from server.errors import ConfigurationError
from server.report import cli as report_cli

if TYPE_CHECKING:
    from server.app import Application
    from server.settings import Settings

log = logging.getLogger("server")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server", description="A dual-era MCP server for HTTP."
    )
    commands = parser.add_subparsers(dest="command", metavar="{serve,report,token}")
    commands.add_parser("serve", help="serve the configured catalog (the default)")
    report_cli.add_arguments(
        commands.add_parser("report", help="per-client report from request record files")
    )
    commands.add_parser("token", help="print a new random token and its MCP_AUTH_TOKENS digest")
    args = parser.parse_args(argv)
    if args.command == "report":
        return report_cli.run(args)
    if args.command == "token":
        return token()
    return serve()


def token() -> int:
    from server.security.auth import new_token

    secret, digest = new_token()
    print("# The token: clients send it as 'Authorization: Bearer <token>'. Keep it secret.")
    print(secret)
    print("# Its digest, for MCP_AUTH_TOKENS (comma-separate several):")
    print(digest)
    return 0


def serve() -> int:
    """Serve; a configuration error is one line (the traceback only at debug level), exit 2."""
    from server import logs
    from server.serving import server_for
    from server.settings import load_settings, logging_choice, unknown_variables

    level, log_format = logging_choice()
    logs.configure(log_format, level)
    try:
        settings = load_settings()
        for warning in unknown_variables():
            log.warning(warning)
        app = _app(settings)
    except ConfigurationError as error:
        log.critical("cannot start: %s", error)  # shown at every MCP_LOG_LEVEL
        log.debug("the configuration error in full", exc_info=True)
        return 2
    server_for(app).run()
    return 0


def _app(settings: Settings) -> Application:
    """The app; when the records go to stdout, whatever else would be printed there (a
    catalog's ``print``) goes to stderr, so stdout carries records only."""
    from server.app import create_app, load_catalog

    if "stdout" not in settings.records:
        return create_app(settings)
    with contextlib.redirect_stdout(sys.stderr):
        catalog = load_catalog(settings.catalog)
    app = create_app(settings, catalog)  # its stdout sink keeps the real stdout
    sys.stdout = sys.stderr
    return app


if __name__ == "__main__":
    sys.exit(main())
