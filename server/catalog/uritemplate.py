"""RFC 6570 URI templates, as resource templates use them: expansion and matching.

Supports simple string expansion ``{var}`` (level 1: the value is percent-encoded, matching
stops at ``/ ? # ,``) and reserved expansion ``{+var}`` (level 2: reserved characters pass,
so ``file:///{+path}`` matches nested paths). That covers the templates MCP servers
publish; other operators are rejected when the template is declared, not at read time.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_VARNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNRESERVED = "-._~"
_RESERVED = ":/?#[]@!$&'()*+,;="


class TemplateError(ValueError):
    """The template uses syntax this server does not serve."""


class UriTemplate:
    """A parsed template; ``match`` returns the variables of a URI or None."""

    __slots__ = ("_parts", "_regex", "template", "variables")

    def __init__(self, template: str) -> None:
        self.template = template
        self.variables: list[str] = []
        self._parts: list[tuple[str, bool] | str] = []
        pattern = ["^"]
        position = 0
        for found in _EXPRESSION.finditer(template):
            literal = template[position : found.start()]
            if "{" in literal or "}" in literal:
                raise TemplateError(f"unbalanced braces in {template!r}")
            pattern.append(re.escape(literal))
            self._parts.append(literal)
            body = found.group(1)
            reserved = body.startswith("+")
            name = body[1:] if reserved else body
            if not _VARNAME.match(name):
                raise TemplateError(
                    f"unsupported expression {{{body}}} in {template!r}: "
                    "only {var} and {+var} are served"
                )
            if name in self.variables:
                raise TemplateError(f"variable {name!r} appears twice in {template!r}")
            self.variables.append(name)
            self._parts.append((name, reserved))
            pattern.append(f"(?P<{name}>.+?)" if reserved else f"(?P<{name}>[^/?#,]+?)")
            position = found.end()
        tail = template[position:]
        if "{" in tail or "}" in tail:
            raise TemplateError(f"unbalanced braces in {template!r}")
        pattern.append(re.escape(tail) + "$")
        self._parts.append(tail)
        self._regex = re.compile("".join(pattern))

    def match(self, uri: str) -> dict[str, str] | None:
        found = self._regex.match(uri)
        if found is None:
            return None
        return {name: unquote(value) for name, value in found.groupdict().items()}

    def expand(self, values: dict[str, str]) -> str:
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            name, reserved = part
            value = values.get(name, "")
            out.append(quote(value, safe=_UNRESERVED + (_RESERVED if reserved else "")))
        return "".join(out)

    def __repr__(self) -> str:
        return f"UriTemplate({self.template!r})"
