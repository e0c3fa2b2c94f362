"""Checking ``structuredContent`` against a tool's explicit ``outputSchema``.

A tool declared with ``output_schema=`` promises conforming results, and the spec says the
server MUST keep that promise: the schema is checked and its validator built once, at
declaration; a call runs the prepared validator. Tools without one never come here (their
return annotation does the checking). ``$ref`` resolves only inside the schema: never a remote
fetch from the event loop. jsonschema (3.4 MiB resident) is imported by the first tool that
declares an output schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Violations name where and which keyword, never the offending value: the value may hold
# client data, and an error result or log line must stay short whatever the tool returned.
_MAX_PATH = 120
_MAX_KEYWORD_VALUE = 80


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OutputSchemaCheck:
    """The prepared validator of one tool's explicit ``outputSchema``."""

    def __init__(self, schema: Mapping[str, Any], *, tool: str) -> None:
        import jsonschema.validators
        from jsonschema.exceptions import SchemaError
        from referencing import Registry

        schema = dict(schema)
        # The MCP default dialect is 2020-12; "$schema" picks another one.
        cls = jsonschema.validators.validator_for(
            schema, default=jsonschema.validators.Draft202012Validator
        )
        try:
            cls.check_schema(schema)
        except SchemaError as bad:
            where = "/".join(str(part) for part in bad.path) or "the root"
            raise ValueError(
                f"{tool}: output_schema is not a valid JSON Schema (at {where}: {bad.message})"
            ) from None
        self._validator = cls(schema, registry=Registry())

    def first_violation(self, structured: Any) -> str | None:
        """None if ``structured`` conforms; else a short description of its first violation
        (where, and the keyword it breaks)."""
        from referencing.exceptions import Unresolvable  # imported already by __init__

        try:
            error = next(iter(self._validator.iter_errors(structured)), None)
        except Unresolvable as missing:
            return _short(f"its $ref {missing.ref} cannot be resolved", _MAX_PATH)
        if error is None:
            return None
        keyword_value = _short(repr(error.validator_value), _MAX_KEYWORD_VALUE)
        return f"at {_short(error.json_path, _MAX_PATH)}, fails {error.validator} {keyword_value}"
