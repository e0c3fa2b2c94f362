"""docs/architecture.md names every module under server/, and only modules that exist.

The page's "Every module" section has one table per folder whose first column is the module's
path below ``server/`` in a code span (`` `legacy/calls.py` ``). A module added without a row,
or a row left behind by a module that moved or went, fails here, so the one page a newcomer
reads first cannot drift from the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `([\w/]+\.py)` \|", re.MULTILINE)


def module_rows(page_text: str) -> list[str]:
    """The module paths of the "Every module" tables, in order."""
    start = page_text.index("\n## Every module\n")
    end = page_text.find("\n## ", start + 1)
    return ROW.findall(page_text[start : end if end != -1 else len(page_text)])


def modules_on_disk() -> set[str]:
    package = ROOT / "server"
    return {path.relative_to(package).as_posix() for path in package.rglob("*.py")}


def test_every_module_is_named_in_the_architecture_page() -> None:
    named = set(module_rows(PAGE.read_text(encoding="utf-8")))
    missing = sorted(modules_on_disk() - named)
    assert missing == [], f"add a row to docs/architecture.md for: {missing}"


def test_the_architecture_page_names_only_modules_that_exist() -> None:
    named = set(module_rows(PAGE.read_text(encoding="utf-8")))
    gone = sorted(named - modules_on_disk())
    assert gone == [], f"docs/architecture.md names modules that do not exist: {gone}"


def test_each_module_has_one_row() -> None:
    rows = module_rows(PAGE.read_text(encoding="utf-8"))
    assert len(rows) == len(set(rows))


def test_the_rows_are_read_from_the_module_tables_only() -> None:
    page = (
        "# A\n\nSee `app/x.py` here.\n\n## Every module\n\n| module | what |\n| --- | --- |\n"
        "| `a.py` | one |\n| `b/c.py` | two |\n\n## Next\n\n| `d.py` | not a module row |\n"
    )
    assert module_rows(page) == ["a.py", "b/c.py"]
