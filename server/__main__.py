"""``python -m server``: serve the configured catalog with uvicorn.

Configuration comes only from ``MCP_*`` environment variables (see ``.env.example``).

May import: app, serving, settings.
"""

from __future__ import annotations

import argparse
import logging
import sys

from server.app import create_app
from server.serving import server_for
from server.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server", description=__doc__)
    parser.add_argument("command", nargs="?", default="serve", choices=["serve"])
    parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server_for(create_app(settings)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
