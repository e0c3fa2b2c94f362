"""The composition root: ``create_app`` wires the settings, the catalog, the eras and the HTTP
shell into one ASGI app, :class:`Application`.

One module per concept: :mod:`~server.app.application` builds every part from the settings (the
composition), :mod:`~server.app.lifecycle` starts and stops them (the lifespan, session expiry,
the graceful drain; :mod:`~server.app.exit_signals` lets it hear SIGTERM before the server
does), :mod:`~server.app.routing` sends each request to the MCP endpoint or to Starlette (and
answers 503 while the lifespan has not run).
"""

from server.app.application import PER_PROCESS_KEY, Application, create_app
from server.app.lifecycle import SHUTTING_DOWN
from server.app.routing import NOT_STARTED
from server.catalog.loading import load_catalog

__all__ = [
    "NOT_STARTED",
    "PER_PROCESS_KEY",
    "SHUTTING_DOWN",
    "Application",
    "create_app",
    "load_catalog",
]
