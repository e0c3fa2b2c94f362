"""``python -m server``: serve the configured catalog with uvicorn, or report on its records.

``python -m server`` (or ``serve``) serves; configuration comes only from ``MCP_*``
environment variables (see ``.env.example``). ``python -m server report FILE...`` reads
request records back (see ``docs/records.md``) and needs no configuration. ``python -m
server token`` prints a new random bearer token and the digest line for ``MCP_AUTH_TOKENS``.
The serving modules are imported only to serve, so a report does not load the web stack.
"""

from __future__ import annotations

import argparse
import logging
import sys

from server.report import cli as report_cli


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
    from server.app import create_app
    from server.serving import server_for
    from server.settings import Settings

    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server_for(create_app(settings)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
