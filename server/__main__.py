"""``python -m server``: the command line, :func:`server.cli.main.main` (the ``mcp-http-server``
script calls it too)."""

from __future__ import annotations

import sys

from server.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
