"""The catalog of ``tests/bench/abuse.py``'s ``skills-alias`` class: the ``probe`` catalog plus
one skill, ``lol``, whose ~500-byte frontmatter nests YAML aliases (a "billion laughs"): eight
levels of eight, 159 MB once written out as JSON in every ``skills/list`` answer.

The skill is written to a temporary folder at import, loaded by ``add_skills`` (which reads
every file into memory) and the folder removed. A server that refuses aliases fails here, at
start, with the file named; one that does not serves the expansion. Served with
``MCP_CATALOG=abuse_skills_catalog:catalog`` and this directory on ``PYTHONPATH`` (the bench
script sets both).
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from server.builtin.probe import catalog

LEVELS, FANOUT = 8, 8


def alias_bomb(levels: int = LEVELS, fanout: int = FANOUT) -> str:
    """A SKILL.md named ``lol`` whose metadata repeats each level ``fanout`` times."""
    lines = [
        "---",
        "name: lol",
        "description: " + "An alias bomb, " * 9 + "in one file.",
        "metadata:",
        "  a: &a [" + ",".join(['"lolol"'] * fanout) + "]",
    ]
    names = "abcdefghijklmnop"[:levels]
    for previous, name in itertools.pairwise(names):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{previous}"] * fanout) + "]")
    return "\n".join([*lines, "---", "Body", ""])


with tempfile.TemporaryDirectory(prefix="abuse-skills-") as _folder:
    (Path(_folder) / "lol").mkdir()
    (Path(_folder) / "lol" / "SKILL.md").write_text(alias_bomb(), encoding="utf-8")
    catalog.add_skills(_folder)
