"""docs/modules.md is exactly what the module docstrings make (tests/support/module_page.py).

A module added without the page regenerated, a row left behind by a module that moved, or a
docstring whose first sentence changed, fails here, so the page that names every module cannot
drift from the tree.
"""

from __future__ import annotations

import re

from tests.support import module_page
from tests.support.module_page import first_sentence

ROW = re.compile(r"^\| `([\w/]+\.py)` \|", re.MULTILINE)


def test_the_module_page_is_what_the_docstrings_make() -> None:
    on_disk = module_page.PAGE.read_text(encoding="utf-8")
    assert on_disk == module_page.render(), (
        "docs/modules.md is out of date: run `python -m tests.support.module_page --write`"
    )


def test_the_page_has_one_row_per_module_of_the_tree() -> None:
    rows = ROW.findall(module_page.render())
    modules = {
        path.relative_to(module_page.SERVER).as_posix() for path in module_page.SERVER.rglob("*.py")
    }
    assert len(rows) == len(set(rows))
    assert set(rows) == modules


def test_a_first_sentence_stops_at_a_full_stop_not_at_a_dotted_name() -> None:
    docstring = "Run `server.cli.main` once.\nThen more.\n\nA second paragraph."
    assert first_sentence(docstring) == "Run `server.cli.main` once."


def test_a_first_sentence_spans_the_lines_of_its_paragraph() -> None:
    assert first_sentence("One sentence\nover two lines") == "One sentence over two lines"


def test_rest_roles_and_literals_become_code_spans() -> None:
    docstring = "A :class:`~server.a.Thing` in :mod:`server.b`, as ``x | y``."
    assert first_sentence(docstring) == r"A `Thing` in `server.b`, as `x \| y`."


def test_an_abbreviation_does_not_end_the_sentence() -> None:
    assert first_sentence("Names, e.g. these, stay. Not this.") == "Names, e.g. these, stay."
