"""docs/modules.md, generated: one table per folder of `server/`, a row per module holding the
first sentence of its docstring.

The page is never edited by hand: `python -m tests.support.module_page --write` rewrites it,
and `tests/test_module_page.py` fails while the file differs from what this module makes, so
a module added, moved or re-described shows up in the page in the same commit.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "server"
PAGE = ROOT / "docs" / "modules.md"

HEADER = """\
# Every module

Generated from the module docstrings by `python -m tests.support.module_page --write`
(`tests/test_module_page.py` fails while this page differs from the tree): one table per
folder of `server/`, each row the first sentence of the module's docstring. The ideas, the
layers and the trips of a request are in [architecture.md](architecture.md).
"""

# A sentence ends at a full stop followed by a space or the paragraph's end; a dot inside a
# dotted name (`server.cli.main`) or an abbreviation followed by a comma is not one.
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.(?=\s|$)")
# reST roles and literals as Markdown code spans; ``~a.b.C`` shows its last part, as Sphinx does.
ROLE = re.compile(r":[a-z]+:`~?([^`]*)`")
LITERAL = re.compile(r"``([^`]*)``")


def markdown(text: str) -> str:
    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        full = match.group(0)
        return f"`{target.rsplit('.', 1)[-1] if ':`~' in full else target}`"

    return LITERAL.sub(r"`\1`", ROLE.sub(role, text))


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, its lines joined, pipes escaped for a table cell."""
    paragraph = docstring.strip().split("\n\n", 1)[0]
    text = " ".join(line.strip() for line in paragraph.splitlines())
    match = SENTENCE_END.search(text)
    sentence = text[: match.end()] if match else text
    return markdown(sentence).replace("|", "\\|")


def docstring_of(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstring = ast.get_docstring(tree)
    if not docstring:
        raise ValueError(f"{path.relative_to(ROOT)} has no module docstring")
    return docstring


def folders() -> dict[str, list[Path]]:
    """The modules of each folder below server/ ("" for the flat core), sorted by path."""
    by_folder: dict[str, list[Path]] = {}
    for path in sorted(SERVER.rglob("*.py")):
        folder = path.parent.relative_to(SERVER).as_posix()
        by_folder.setdefault("" if folder == "." else folder, []).append(path)
    return dict(sorted(by_folder.items()))


def render() -> str:
    parts = [HEADER]
    for folder, paths in folders().items():
        title = "`server/` (the flat core)" if not folder else f"`{folder}/`"
        parts.append(f"\n## {title}\n\n| module | what it holds |\n| --- | --- |\n")
        for path in paths:
            module = path.relative_to(SERVER).as_posix()
            parts.append(f"| `{module}` | {first_sentence(docstring_of(path))} |\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--write"]:
        PAGE.write_text(text, encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m tests.support.module_page [--write]", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
