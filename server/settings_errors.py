"""What goes wrong with the settings, in the words of the variables: the start-up messages.

``python -m server`` prints a setting it cannot start with as one line (a
:class:`~server.errors.ConfigurationError`), so each message must name the ``MCP_*`` variable
and what it takes, not pydantic's field path and error type. :func:`explain` turns pydantic's
report into that line, and :func:`unknown_warnings` words the warning for a variable no
setting reads. These are pure functions of what they are given: reading the environment stays
in :mod:`server.settings`, the only module that does, which calls them.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo


def explain(
    invalid: ValidationError,
    fields: Mapping[str, FieldInfo],
    *,
    prefix: str,
    hidden: Collection[str] = (),
) -> str:
    """pydantic's report on the settings ``fields`` as one line: ``MCP_PORT='abc' is not
    valid: use a whole number from 0 to 65535 (default 8000)``; a validator's own message
    (which names its variables and the fix) as it is. The values of ``hidden`` fields (secrets,
    or what may hold one) are never repeated."""
    problems: list[str] = []
    for error in invalid.errors(include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        name = str(error["loc"][0]) if error["loc"] else ""
        if name not in fields:
            problems.append(message)  # a check across settings: it names them itself
            continue
        variable = f"{prefix}{name.upper()}"
        if error["type"] == "value_error":
            problems.append(message if variable in message else f"{variable}: {message}")
            continue
        shown = "(hidden)" if name in hidden else _shown(error["input"])
        problems.append(f"{variable}={shown} is not valid: use {expected(fields[name])}")
    return "; ".join(problems)


def _shown(value: object) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def expected(field: FieldInfo) -> str:
    """What a setting takes, in words: its kind, its bounds and its default."""
    annotation = field.annotation
    bounds = _bounds(field.metadata)
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        kind = "one of " + ", ".join(str(choice) for choice in choices if choice != "")
        kind += " or empty" if "" in choices else ""
    elif annotation is bool:
        kind = "true or false"
    elif annotation is int:
        kind = "a whole number" + bounds
    elif annotation is float:
        kind = "a number" + bounds
    elif typing.get_origin(annotation) is list:
        kind = "a comma-separated list"
    else:
        kind = "text" + bounds
    default = field.default
    if isinstance(default, SecretStr) or default in ("", []):
        return kind
    shown = ",".join(default) if isinstance(default, list) else str(default).lower()
    return f"{kind} (default {shown})"


def _bounds(metadata: list[Any]) -> str:
    """ " from 0 to 65535", " above 0", " of 1 to 64 characters matching ...": a field's limits."""
    limits: dict[str, Any] = {}
    pattern = ""
    for item in metadata:
        for key in ("ge", "gt", "le", "min_length", "max_length"):
            if getattr(item, key, None) is not None:
                limits[key] = getattr(item, key)
        pattern = getattr(item, "pattern", None) or pattern
    low, high = limits.get("ge"), limits.get("le")
    if "gt" in limits:
        words = f"above {limits['gt']}" + (f", at most {high}" if high is not None else "")
    elif low is not None and high is not None:
        words = f"from {low} to {high}"
    elif low is not None:
        words = f"of at least {low}"
    elif high is not None:
        words = f"of at most {high}"
    elif "max_length" in limits:
        words = f"of {limits.get('min_length', 0)} to {limits['max_length']} characters"
    else:
        words = ""
    if pattern:
        words += f" matching {pattern}"
    return f" {words.strip()}" if words.strip() else ""


def unknown_warnings(names: Iterable[str], known: Sequence[str]) -> list[str]:
    """A warning for each of ``names`` (upper case) that starts with ``MCP_`` and is not one of
    ``known``, with the closest known name: pydantic ignores such a variable, so a typo would
    change nothing and say nothing."""
    warnings = []
    for name in sorted(names):
        if not name.startswith("MCP_") or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "every setting is in .env.example"
        warnings.append(f"{name} is not a setting of this server and is ignored: {hint}")
    return warnings
