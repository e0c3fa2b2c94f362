"""RFC 6570 URI templates, as resource templates use them: expansion and matching.

``{var}`` (level 1: percent-encoded, one piece of a path segment, never ``/ ? # ,``) and
``{+var}`` (level 2: reserved characters pass, so ``file:///{+path}`` matches nested paths);
other operators, and two variables with no literal between them, are refused at declaration.
Each variable takes, left to right, the shortest value with which the rest still matches,
found in two linear passes, not a backtracking regex (whose time grew with the URI's length to
the power of the variables: docs/decisions.md#linear-template-match). A matched value is
decoded and vetted as a name below the template's prefix: ``/`` (in ``{var}``), NUL, ``.`` or
``..`` make the template not match.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from urllib.parse import quote, unquote

_EXPRESSION = re.compile(r"\{([^{}]*)\}")
_VARNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNRESERVED = "-._~"
_RESERVED = ":/?#[]@!$&'()*+,;="
# What a simple expansion percent-encodes and so never carries raw: its value stops there.
_DELIMITER = re.compile(r"[/?#,]")
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_DOT_SEGMENTS = (".", "..")

# The catalog matches no template against a longer URI. Matching is linear, but a URI as long
# as a request body may be (megabytes) would still hold the loop for seconds against a
# template with many candidate splits; twice the 8000 octets RFC 9110 asks every recipient to
# support is plenty for a name.
MAX_TEMPLATED_URI_CHARS = 16_384


class TemplateError(ValueError):
    """The template uses syntax this server does not serve."""


@dataclass(frozen=True, slots=True)
class _Variable:
    name: str
    reserved: bool
    literal: str  # the text between this variable and the next one (or the template's end)


Interval = tuple[int, int]  # inclusive bounds


class UriTemplate:
    """A parsed template; ``match`` returns the variables of a URI or None."""

    __slots__ = ("_prefix", "_simple", "_variables", "template", "variables")

    def __init__(self, template: str) -> None:
        self.template = template
        self.variables: list[str] = []
        self._variables: list[_Variable] = []
        found_all = list(_EXPRESSION.finditer(template))
        literals = [
            template[start:stop]
            for start, stop in zip(
                [0, *(found.end() for found in found_all)],
                [*(found.start() for found in found_all), len(template)],
                strict=True,
            )
        ]
        for literal in literals:
            if "{" in literal or "}" in literal:
                raise TemplateError(f"unbalanced braces in {template!r}")
        for index, found in enumerate(found_all):
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
            literal = literals[index + 1]
            if not literal and index + 1 < len(found_all):
                raise TemplateError(
                    f"{{{body}}} and the next variable in {template!r} need literal text "
                    "between them: where one ends would be arbitrary"
                )
            self.variables.append(name)
            self._variables.append(_Variable(name, reserved, literal))
        self._prefix = literals[0]
        self._simple = any(not variable.reserved for variable in self._variables)

    def match(self, uri: str) -> dict[str, str] | None:
        values = self._split(uri)
        if values is None:
            return None
        out: dict[str, str] = {}
        for variable, value in zip(self._variables, values, strict=True):
            decoded = _decode_reserved(value) if variable.reserved else _decode_simple(value)
            if decoded is None:
                return None
            out[variable.name] = decoded
        return out

    def _split(self, uri: str) -> list[str] | None:
        """The raw (still encoded) value of each variable: the shortest, left to right."""
        if not self._variables:
            return [] if uri == self.template else None
        suffix = self._variables[-1].literal
        start, end = len(self._prefix), len(uri) - len(suffix)
        if end - start < len(self._variables):
            return None
        if not uri.startswith(self._prefix) or not uri.endswith(suffix):
            return None
        delimiters = (
            [found.start() for found in _DELIMITER.finditer(uri, start, end)]
            if self._simple
            else []
        )
        # Right to left: ends[k] are the positions where variable k may end (its literal
        # follows there and the rest matches after it); starts[k] where it may begin.
        count = len(self._variables)
        ends: list[list[int]] = [[] for _ in range(count)]
        starts: list[list[Interval]] = [[] for _ in range(count)]
        ends[-1] = [end]
        for k in range(count - 1, -1, -1):
            starts[k] = self._starts(ends[k], self._variables[k].reserved, start, delimiters)
            if not starts[k]:
                return None
            if k:
                ends[k - 1] = _occurrences(uri, self._variables[k - 1].literal, starts[k], start)
        # Left to right: from a valid start, the nearest valid end is the shortest value.
        if starts[0][0][0] != start:  # no start lies before the prefix ends: is one there?
            return None
        values = []
        position = start
        for k, variable in enumerate(self._variables):
            stop = ends[k][bisect_right(ends[k], position)]
            values.append(uri[position:stop])
            position = stop + len(variable.literal)
        return values

    @staticmethod
    def _starts(
        ends: list[int], reserved: bool, lowest: int, delimiters: list[int]
    ) -> list[Interval]:
        """Where a variable may start so that it ends at one of ``ends`` (sorted): at least one
        character before, and for a simple variable with no delimiter in between."""
        if not ends:
            return []
        if reserved:
            return [(lowest, ends[-1] - 1)] if ends[-1] - 1 >= lowest else []
        intervals: list[Interval] = []
        for stop in ends:
            index = bisect_left(delimiters, stop) - 1
            low = max(lowest, delimiters[index] + 1 if index >= 0 else lowest)
            high = stop - 1
            if low > high:
                continue
            if intervals and low <= intervals[-1][1] + 1:
                intervals[-1] = (intervals[-1][0], high)
            else:
                intervals.append((low, high))
        return intervals

    def expand(self, values: dict[str, str]) -> str:
        out = [self._prefix]
        for variable in self._variables:
            value = values.get(variable.name, "")
            safe = _UNRESERVED + (_RESERVED if variable.reserved else "")
            out.append(quote(value, safe=safe))
            out.append(variable.literal)
        return "".join(out)

    def __repr__(self) -> str:
        return f"UriTemplate({self.template!r})"


def _occurrences(uri: str, literal: str, starts: list[Interval], lowest: int) -> list[int]:
    """Positions of ``literal`` (past ``lowest``, so the variable before it is not empty)
    whose end is one of ``starts``, ascending. The windows searched are disjoint but for
    ``len(literal)`` characters each, so the work is linear in the URI."""
    found: list[int] = []
    width = len(literal)
    for low, high in starts:
        position = uri.find(literal, max(lowest + 1, low - width), high)
        while position != -1:
            found.append(position)
            position = uri.find(literal, position + 1, high)
    return found


def _decode_simple(value: str) -> str | None:
    decoded = unquote(value)
    if "/" in decoded or "\x00" in decoded or decoded in _DOT_SEGMENTS:
        return None
    return decoded


def _decode_reserved(value: str) -> str | None:
    decoded = _ESCAPES.sub(_decode_unreserved_escapes, value)
    if "\x00" in decoded or any(segment in _DOT_SEGMENTS for segment in decoded.split("/")):
        return None
    return decoded


def _decode_unreserved_escapes(run: re.Match[str]) -> str:
    """A run of ``%XX`` escapes, decoded as UTF-8 except those of reserved characters, which
    reserved expansion would have written raw: an escaped one is data and stays escaped."""
    text = run.group()
    out: list[str] = []
    pending = bytearray()
    for index in range(0, len(text), 3):
        escape = text[index : index + 3]
        byte = int(escape[1:], 16)
        if byte < 0x80 and chr(byte) in _RESERVED:
            out.append(pending.decode("utf-8", "replace"))
            pending.clear()
            out.append(escape)
        else:
            pending.append(byte)
    out.append(pending.decode("utf-8", "replace"))
    return "".join(out)
