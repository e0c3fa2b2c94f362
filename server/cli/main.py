"""``python -m server`` (and the ``mcp-http-server`` script): parse the command line and run the
command it names.

``python -m server`` (or ``serve``) serves (:mod:`server.cli.serve`); configuration comes from
``MCP_*`` environment variables (see ``.env.example``), and ``serve --host --port --catalog``
override theirs. ``python -m server report FILE...`` reads request records back (see
``docs/records.md``, :mod:`server.cli.report`) and needs no configuration. ``python -m server
token`` prints a new random bearer token and the digest line for ``MCP_AUTH_TOKENS``
(:mod:`server.cli.token`). ``python -m server call METHOD [PARAMS_JSON] --url URL`` sends one
modern-era request with its headers and ``_meta`` filled in (:mod:`server.cli.call`). The
serving modules are imported only to serve, so a report does not load the web stack.
"""

from __future__ import annotations

import argparse

from server.cli import call, report, serve, token
from server.cli import doctor as doctor_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server", description="A dual-era MCP server for HTTP."
    )
    commands = parser.add_subparsers(dest="command", metavar="{serve,report,token,call,doctor}")
    serve.add_arguments(
        commands.add_parser("serve", help="serve the configured catalog (the default)")
    )
    report.add_arguments(
        commands.add_parser("report", help="per-client report from request record files")
    )
    commands.add_parser("token", help="print a new random token and its MCP_AUTH_TOKENS digest")
    call.add_arguments(
        commands.add_parser("call", help="send one request (modern era) and print its result")
    )
    doctor_command.add_arguments(
        commands.add_parser("doctor", help="check the proxy path to a server, from a client's side")
    )
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor_command.run(args)
    if args.command == "call":
        from server.settings import local_endpoint_url

        return call.run(args, local_endpoint_url())
    if args.command == "report":
        return report.run(args)
    if args.command == "token":
        return token.run()
    return serve.serve(
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        catalog=getattr(args, "catalog", None),
        reload=getattr(args, "reload", False),
    )
