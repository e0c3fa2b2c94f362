"""The composition root: ``create_app`` wires the settings, the catalog, the eras and the HTTP
shell into one ASGI app, :class:`Application` (:mod:`server.app.application`)."""

from server.app.application import (
    NOT_STARTED,
    PER_PROCESS_KEY,
    SHUTTING_DOWN,
    Application,
    create_app,
)
from server.catalog.loading import load_catalog

__all__ = [
    "NOT_STARTED",
    "PER_PROCESS_KEY",
    "SHUTTING_DOWN",
    "Application",
    "create_app",
    "load_catalog",
]
