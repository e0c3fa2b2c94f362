"""A SKILL.md's YAML frontmatter, read as JSON and checked against the Agent Skills rules.

Read as YAML 1.2's JSON-compatible core (``yes``/``no`` and dates stay text), so the JSON sent
equals what a client's YAML parser makes of the file. ``name`` follows the naming rules,
``description`` is non-empty and at most 1024 characters, ``io.modelcontextprotocol/``
metadata keys are reserved. Anchors and aliases are refused: a few hundred bytes of nested
aliases expand to gigabytes as JSON; without them, the frontmatter is bounded by its size.
PyYAML is imported at the first read.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

SKILL_NAME = re.compile(r"^(?!.*--)[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
RESERVED_METADATA = "io.modelcontextprotocol/"
MAX_FRONTMATTER_BYTES = 64 * 1024
MAX_DESCRIPTION = 1024
_FRONTMATTER = re.compile(r"^---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", re.DOTALL)


class SkillError(ValueError):
    """A skills folder this server refuses to serve; the message names the file."""


class _Aliased(Exception):
    """Raised by the loader at the first anchor or alias."""

    def __init__(self, line: int, column: int) -> None:
        super().__init__(line, column)
        self.line, self.column = line, column  # of the frontmatter, from 0


@functools.cache
def _loader() -> type[Any]:
    """YAML's JSON-compatible core: true/false only, no timestamps, as YAML 1.2 reads them.

    Made at the first frontmatter read: a server that serves no skills never imports PyYAML
    (0.9 MiB resident)."""
    import yaml

    class FrontmatterLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise _Aliased(event.start_mark.line, event.start_mark.column)
            return super().compose_node(parent, index)

    FrontmatterLoader.yaml_implicit_resolvers = {
        first: [
            (tag, regexp)
            for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
        ]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    FrontmatterLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool",
        re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"),
    )
    return FrontmatterLoader


def _json_compatible(value: Any, where: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SkillError(f"{where}: frontmatter holds a number JSON cannot carry")
        return
    if isinstance(value, list):
        for item in value:
            _json_compatible(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SkillError(f"{where}: frontmatter keys must be strings, not {key!r}")
            _json_compatible(item, where)
        return
    raise SkillError(f"{where}: frontmatter holds a {type(value).__name__}, not JSON data")


def parse_frontmatter(text: str, where: str) -> dict[str, Any]:
    """The YAML frontmatter of a SKILL.md as a JSON object, checked against the Agent Skills
    rules for ``name`` and ``description``."""
    found = _FRONTMATTER.match(text.removeprefix("\ufeff"))
    if found is None:
        raise SkillError(f"{where}: must begin with YAML frontmatter between --- lines")
    if len(found.group(1).encode()) > MAX_FRONTMATTER_BYTES:
        raise SkillError(f"{where}: frontmatter is larger than {MAX_FRONTMATTER_BYTES} bytes")
    loader = _loader()
    import yaml

    try:
        data = yaml.load(found.group(1), Loader=loader)  # a SafeLoader
    except yaml.YAMLError as broken:
        raise SkillError(f"{where}: frontmatter is not valid YAML ({broken})") from None
    except _Aliased as aliased:
        # The frontmatter starts on the file's second line, after its opening ---.
        raise SkillError(
            f"{where}: line {aliased.line + 2}, column {aliased.column + 1}: frontmatter uses "
            "a YAML anchor or alias (&name, *name), which is not served (nested aliases "
            "expand a few hundred bytes to gigabytes): write the values out"
        ) from None
    if not isinstance(data, dict):
        raise SkillError(f"{where}: frontmatter must be a mapping of fields")
    _json_compatible(data, where)
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not SKILL_NAME.match(name):
        raise SkillError(
            f"{where}: name must be 1-64 lowercase letters, digits and hyphens (no leading, "
            f"trailing or double hyphen); got {name!r}"
        )
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{where}: description must be a non-empty string")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"{where}: description is longer than {MAX_DESCRIPTION} characters")
    metadata = data.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise SkillError(f"{where}: metadata must be a mapping")
        reserved = [key for key in metadata if key.startswith(RESERVED_METADATA)]
        if reserved:
            raise SkillError(
                f"{where}: metadata keys under {RESERVED_METADATA} are reserved for MCP "
                f"extensions: {', '.join(reserved)}"
            )
    return data
