"""``python -m server`` (and the ``mcp-http-server`` script): parse the command line and run the
command it names.

``serve`` (the default, :mod:`server.cli.serve`; its options work without the word:
``python -m server --port 9000``), ``report`` (:mod:`server.cli.report`), ``token``
(:mod:`server.cli.token`) and ``call`` (:mod:`server.cli.call`); configuration comes from the
``MCP_*`` variables. The serving modules are imported only to serve, so a report does not load
the web stack, and the doctor (httpx) only for the doctor, so a replica starts on less CPU.
When whoever reads stdout goes away (``... | head``), the command stops quietly with status
141, as a Unix tool killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import sys

from server.cli import call, report, serve, token

COMMANDS = ("serve", "report", "token", "call", "doctor")
# 128 + SIGPIPE: what a shell reports for a tool whose reader went away.
EXIT_PIPE_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments and arguments[0].startswith("-") and arguments[0] not in ("-h", "--help"):
        arguments.insert(0, "serve")  # the default command, with its options
    try:
        status = _run(arguments)
        sys.stdout.flush()  # here, so a closed pipe is caught, not reported at exit
    except BrokenPipeError:
        # Nothing more can reach the reader; stdout is pointed at /dev/null so the
        # interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    return status


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server",
        description="A dual-era MCP server for HTTP. Without a command it serves, and takes "
        "serve's options (python -m server --port 9000).",
    )
    commands = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
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
    doctor = commands.add_parser(
        "doctor", help="check the proxy path to a server, from a client's side"
    )
    if argv[:1] == ["doctor"]:
        # Only then: it loads httpx (and what httpx's CLI brings), ~75 ms that every replica's
        # start would pay, while the others serve on the same cores (issue 35's rollout).
        from server.cli import doctor as doctor_command

        doctor_command.add_arguments(doctor)
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from server.cli import doctor as doctor_command

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
