"""Checks and wiring behind the Catalog's decorators, kept out of ``catalog/catalog.py``.

A declaration mistake raises where it is written, at import time, with the fix in the message:
``@catalog.resource`` used bare (no URI) would otherwise register nothing and hand back the
decorator's inner function in place of the author's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.catalog.completion import Completer
from server.catalog.prompts import Prompt
from server.catalog.resources import ResourceTemplate


def require_uri(decorator: str, uri: Any, example: str) -> None:
    """``uri`` must be the URI (or template) string the decorator was called with."""
    if callable(uri):
        name = getattr(uri, "__name__", "the function")
        raise TypeError(
            f"@catalog.{decorator} needs the URI first: write @catalog.{decorator}({example!r}) "
            f"above {name}, not a bare @catalog.{decorator}"
        )
    if not isinstance(uri, str) or ":" not in uri:
        raise TypeError(
            f"@catalog.{decorator}: {uri!r} is not a URI; write @catalog.{decorator}({example!r})"
        )


def attach_completer(
    prompts: Mapping[str, Prompt],
    templates: Mapping[str, ResourceTemplate],
    *,
    argument: str,
    prompt: str | None,
    template: str | None,
    completer: Completer,
) -> None:
    """Give one prompt argument or template variable its completion callback."""
    if prompt is not None:
        target = prompts.get(prompt)
        if target is None:
            raise ValueError(f"no prompt named {prompt!r} to complete")
        if argument not in target.parameters.names:
            raise ValueError(f"prompt {prompt!r} has no argument {argument!r}")
        target.completers[argument] = completer
        return
    assert template is not None
    found = templates.get(template)
    if found is None:
        raise ValueError(f"no template {template!r} to complete")
    if argument not in found.template.variables:
        raise ValueError(f"template {template!r} has no variable {argument!r}")
    found.completers[argument] = completer
