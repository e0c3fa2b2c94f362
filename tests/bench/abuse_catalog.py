"""The catalog of ``tests/bench/abuse.py``'s ``template`` class: the ``probe`` catalog plus one
resource template with two variables not separated by ``/``, ``weather://{city}.{format}``.

The probe catalog's only template (``probe://echo/{text}``) has one variable, so it cannot show
what such a template costs to match. Served with ``MCP_CATALOG=abuse_catalog:catalog`` and this
directory on ``PYTHONPATH`` (the bench script sets both). The template is named
``abuse-weather`` so the bench can tell it from the catalog's own. ``abuse_log`` logs its
argument (the ``log-injection`` class).
"""

from __future__ import annotations

import logging

from server.builtin.probe import catalog


@catalog.resource_template(
    "weather://{city}.{format}", name="abuse-weather", mime_type="text/plain"
)
def weather(city: str, format: str) -> str:  # the parameter names are the template's variables
    """Weather in a city, in a format (two variables joined by a dot, as in the report)."""
    return f"Sunny in {city} ({format})"


_log = logging.getLogger("abuse_catalog")


@catalog.tool
async def abuse_log(text: str) -> str:
    """Log the text as a warning, as a catalog that logs its arguments does (the bench's
    ``log-injection`` class: what a client's values do to the server's log lines)."""
    _log.warning("asked to log: %s", text)
    return "logged"
