"""A catalog that writes where it should not, for the logging tests (``tests/e2e/test_logs.py``).

Served as ``MCP_CATALOG=tests.support.noisy_catalog:catalog``. It prints to stdout when it is
imported and when ``shout`` runs (a careless catalog: with ``MCP_RECORDS=stdout`` that must
not reach stdout), logs a warning from inside a request (``warn``: the line must name the
request), and ``crash`` raises, which the server logs with its traceback.
"""

from __future__ import annotations

import logging

from server import Catalog

log = logging.getLogger("noisy_catalog")
catalog = Catalog("noisy", "1.0.0")

print("noisy catalog imported")  # on purpose: a stray print at import


@catalog.tool
async def shout(text: str) -> str:
    """Print the text to stdout, and answer with it."""
    print(f"shouting {text}")  # on purpose: a stray print in a request
    return text


@catalog.tool
async def warn(text: str) -> str:
    """Log a warning from inside the request."""
    log.warning("warned about %s", text)
    return text


@catalog.tool
async def crash() -> str:
    """Raise: the server logs the traceback and answers with an error result."""
    raise RuntimeError("the noisy catalog crashed\non two lines")
