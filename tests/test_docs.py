"""README.md and docs/: short where they should be, complete where they claim to be, and linked.

Each check reads the code it documents, so a page goes stale as a failing test: every public
name of ``server`` and ``server.testing`` (and the public methods of ``Catalog``, ``Context``
and ``Client``) in the reference, every setting in the configuration page with the default of
``.env.example``, every link to a file or an anchor that exists, every
``docs/decisions.md#anchor`` in the code an anchor of that page. The examples themselves run in
``tests/e2e/test_readme.py``; the generated module page is
``tests/test_module_page.py``.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import server
import server.testing
from server import Catalog, Context
from server.catalog.prompts import PromptOptions
from server.catalog.resources import ResourceOptions, TemplateOptions
from server.catalog.tools import ToolOptions
from server.settings import Settings
from server.testing import Client

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, ROOT / "SECURITY.md", *sorted(DOCS.glob("*.md"))]
MAX_README_LINES = 250


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def section(page: Path, heading: str) -> str:
    """The text under ``heading`` (a level-2 heading line) up to the next level-2 heading."""
    body = text(page)
    start = body.index(f"\n{heading}\n")
    end = body.find("\n## ", start + 1)
    return body[start : end if end != -1 else len(body)]


def code_spans(markdown: str) -> set[str]:
    """Every identifier-like word inside a `code span` (so `ctx.info(...)` gives ctx and info)."""
    spans = re.findall(r"`([^`\n]+)`", markdown)
    return {word for span in spans for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


# -- the README and the pages -----------------------------------------------------------------


def test_the_readme_is_short() -> None:
    lines = len(text(README).splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move the detail to docs/"


def test_the_readme_keeps_the_two_quick_start_commands() -> None:
    readme = text(README)
    assert (
        "python -m venv .venv && . .venv/bin/activate && pip install -e . && python -m server"
    ) in readme
    assert (
        "python -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"
    ) in readme


def test_the_index_and_the_readme_link_every_page() -> None:
    pages = {page.name for page in DOCS.glob("*.md") if page.name != "README.md"}
    assert len(pages) >= 6
    index = set(re.findall(r"\]\(([\w.-]+\.md)\)", text(DOCS / "README.md")))
    assert pages - index == set(), "docs/README.md does not link these pages"
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", text(README)))
    assert pages - linked == set(), "README.md does not link these pages"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page: its headings, slugged, and explicit ``<a id>`` tags."""
    found: set[str] = set(re.findall(r'<a id="([^"]+)">', text(page)))
    seen: dict[str, int] = {}
    in_code = False
    for line in text(page).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = re.sub(r"<a id=\"[^\"]+\"></a>", "", line.lstrip("#").strip())
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_slugs_follow_github() -> None:
    page = DOCS / "deployment.md"
    assert {"several-replicas-redis", "other-asgi-servers-and-mounting"} <= anchors(page)
    assert "servertesting" in anchors(DOCS / "reference.md")


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in LINK.findall(text(page))]


@pytest.mark.parametrize(
    ("page", "target"),
    [
        pytest.param(page, target, id=f"{page.relative_to(ROOT)}->{target}")
        for page, target in links()
        if not re.match(r"^[a-z]+:", target)
    ],
)
def test_every_link_resolves(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    goal = (page.parent / path).resolve() if path else page
    assert goal.exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"
    if anchor and goal.suffix == ".md":
        assert anchor in anchors(goal), f"{page.relative_to(ROOT)} links a missing anchor {target}"


# -- no diary -----------------------------------------------------------------------------------

# A work session by its number ("Ninth session"), or a note of one; an MCP session is never
# numbered so ("the first session used" is not a diary: lower case).
DIARY = re.compile(
    r"\b(First|Second|Third|Fourth|Fifth|Sixth|Seventh|Eighth|Ninth|Tenth) session\b"
    r"|session's note"
)


def test_no_page_and_no_module_is_a_diary() -> None:
    sources = PAGES + sorted((ROOT / "server").rglob("*.py"))
    found = [
        f"{source.relative_to(ROOT)}: {match.group(0)}"
        for source in sources
        for match in DIARY.finditer(text(source))
    ]
    assert found == [], "history belongs in git and docs/decisions.md, not in the text"


def decision_links() -> list[tuple[str, str]]:
    found = []
    for module in sorted((ROOT / "server").rglob("*.py")):
        for anchor in re.findall(r"docs/decisions\.md#([\w-]+)", text(module)):
            found.append((module.relative_to(ROOT).as_posix(), anchor))
    return found


def test_the_code_links_decisions_by_anchor() -> None:
    assert len(decision_links()) >= 10
    known = anchors(DOCS / "decisions.md")
    assert [(module, a) for module, a in decision_links() if a not in known] == []


def test_the_code_links_no_page_without_an_anchor() -> None:
    bare = [
        module.relative_to(ROOT).as_posix()
        for module in sorted((ROOT / "server").rglob("*.py"))
        if re.search(r"docs/(benchmarks|decisions)\.md(?!#)", text(module))
    ]
    assert bare == [], "point at the decision (docs/decisions.md#anchor), not at a whole page"


# -- the reference ------------------------------------------------------------------------------

REFERENCE = DOCS / "reference.md"


def public_members(cls: type) -> set[str]:
    """Methods, properties and dataclass fields a user of ``cls`` may touch."""
    names = {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}
    names |= {name for name in getattr(cls, "__dataclass_fields__", {}) if not name.startswith("_")}
    names |= {name for name in ast_attributes(cls) if not name.startswith("_")}
    return names


def ast_attributes(cls: type) -> set[str]:
    """``self.x = ...`` in ``__init__``: the instance attributes ``dir`` cannot see (none to
    read in a dataclass's generated one, whose fields are ``__dataclass_fields__``)."""
    try:
        source = inspect.getsource(cls.__init__)  # type: ignore[misc]  # the class's own, or inherited
    except (OSError, TypeError):
        return set()
    tree = ast.parse(textwrap.dedent(source))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and isinstance(node.ctx, ast.Store)
    }


def test_every_public_name_of_server_is_in_the_reference() -> None:
    documented = code_spans(section(REFERENCE, "## `server`"))
    assert set(server.__all__) - documented == set()


def test_every_public_name_of_server_testing_is_in_the_reference() -> None:
    documented = code_spans(section(REFERENCE, "## `server.testing`"))
    assert set(server.testing.__all__) - documented == set()
    assert public_members(Client) - documented == set()


def test_every_public_method_of_catalog_is_in_the_reference() -> None:
    documented = code_spans(section(REFERENCE, "## Catalog"))
    assert public_members(Catalog) - documented == set()


def test_the_declaring_rows_name_each_kinds_keywords() -> None:
    # Each kind's keywords are declared once (a TypedDict beside the kind); the rows follow.
    rows = section(REFERENCE, "## Catalog").splitlines()
    for method, options in (
        ("tool", ToolOptions),
        ("prompt", PromptOptions),
        ("resource", ResourceOptions),
    ):
        row = next(line for line in rows if line.startswith(f"| `{method}` |"))
        call = re.search(rf"`@catalog\.{method}\(([^`]*)\)`", row)
        assert call is not None, row
        assert set(re.findall(r"(\w+)=", call.group(1))) == set(options.__optional_keys__)
    # resource_template's row says "the same keywords but size".
    assert ResourceOptions.__optional_keys__ - TemplateOptions.__optional_keys__ == {"size"}


def test_every_public_field_and_method_of_context_is_in_the_reference() -> None:
    documented = code_spans(section(REFERENCE, "## Context"))
    assert public_members(Context) - documented == set()


def test_the_member_lists_see_methods_fields_and_attributes() -> None:
    assert {"elicit", "report_progress", "state", "caller", "record_id"} <= public_members(Context)
    assert {"tool", "add_skills", "lifespan", "server_info"} <= public_members(Catalog)
    assert {"call_tool", "notifications", "session_id"} <= public_members(Client)


# -- the configuration page ------------------------------------------------------------------------

CONFIGURATION = DOCS / "configuration.md"
ENV_LINE = re.compile(r"^(MCP_[A-Z0-9_]+)=(.*)$")


def configuration_table() -> dict[str, str]:
    """MCP_* name -> its default as the settings tables print it ("" for (empty))."""
    rows: dict[str, str] = {}
    body = section(CONFIGURATION, "## Settings")
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not cells[0].startswith("`MCP_"):
            continue
        names = [name.strip("`") for name in cells[0].split("<br>")]
        defaults = [value.strip("`") for value in cells[1].split("<br>")]
        assert len(names) == len(defaults), line
        for name, default in zip(names, defaults, strict=True):
            assert name not in rows, f"{name} appears twice"
            rows[name] = "" if default == "(empty)" else default
    return rows


def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text(encoding="utf-8").splitlines()
    return {m.group(1): m.group(2) for m in map(ENV_LINE.match, lines) if m}


def suggested_row(name: str) -> str:
    """A row for ``name`` from .env.example: its default, and the comment above it."""
    lines = (ROOT / ".env.example").read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"{name}="))
    comment: list[str] = []
    above = index - 1
    while above >= 0 and ENV_LINE.match(lines[above]):
        above -= 1
    while above >= 0 and lines[above].startswith("#"):
        comment.insert(0, lines[above].lstrip("# "))
        above -= 1
    default = lines[index].partition("=")[2]
    shown = f"`{default}`" if default else "(empty)"
    return f"| `{name}` | {shown} | {' '.join(comment)} |"


def test_every_setting_is_in_the_configuration_page() -> None:
    fields = {f"MCP_{name.upper()}" for name in Settings.model_fields}
    table = set(configuration_table())
    missing = sorted(fields - table)
    rows = "\n".join(suggested_row(name) for name in missing if name in env_example())
    assert missing == [], f"add these settings to docs/configuration.md, for instance:\n{rows}"
    assert table - fields == set(), "docs/configuration.md lists settings that do not exist"


def test_a_missing_setting_comes_with_its_row() -> None:
    assert suggested_row("MCP_PORT") == (
        "| `MCP_PORT` | `8000` | Address and port uvicorn binds to. Keep 127.0.0.1 unless a "
        "proxy or container needs more. |"
    )
    assert suggested_row("MCP_ROOT_PATH").startswith("| `MCP_ROOT_PATH` | (empty) | The public")


def test_the_configuration_page_shows_the_defaults_of_env_example() -> None:
    example = env_example()
    wrong = {
        name: (shown, example.get(name))
        for name, shown in configuration_table().items()
        if example.get(name) != shown
    }
    assert wrong == {}, "docs/configuration.md and .env.example disagree (shown, example)"


# -- the inner loop: what `pytest -m "not slow"` leaves out ----------------------------------


def slow_modules() -> set[str]:
    """The test modules outside tests/e2e/ whose ``pytestmark`` holds ``pytest.mark.slow``."""
    found = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        if ROOT / "tests" / "e2e" in path.parents:
            continue
        marks = [
            ast.unparse(node.value)
            for node in ast.parse(text(path)).body
            if isinstance(node, ast.Assign)
            and any(getattr(target, "id", None) == "pytestmark" for target in node.targets)
        ]
        if any("pytest.mark.slow" in mark for mark in marks):
            found.add(path.relative_to(ROOT).as_posix())
    return found


def test_the_development_page_names_every_module_the_inner_loop_leaves_out() -> None:
    page = " ".join(text(DOCS / "development.md").split())
    listed = page[page.index("marked `slow` whole") : page.index("It also leaves out")]
    named = set(re.findall(r"`(tests/[\w/]+\.py)`", listed))
    assert named == slow_modules(), (
        "docs/development.md's list of the modules marked slow is off: "
        f"add {sorted(slow_modules() - named)}, drop {sorted(named - slow_modules())}"
    )


# -- install commands -------------------------------------------------------------------------

# The project is installed from a checkout (or its image), not from an index: a
# `pip install 'mcp-http-server[...]'` in a page or a message cannot work.
INSTALL_TEXTS = [
    *PAGES,
    ROOT / ".env.example",
    *sorted((ROOT / "server").rglob("*.py")),
    *sorted((ROOT / "deploy").rglob("*.sh")),
]
PIP_INSTALL = re.compile(r"pip install\s+([^`\n)\"]+)")


def install_commands(body: str) -> list[str]:
    return [match.group(1).strip() for match in PIP_INSTALL.finditer(body)]


def extras() -> set[str]:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([a-z][a-z0-9-]*) = \[", block, re.MULTILINE))


def test_no_page_or_message_names_an_install_that_cannot_work() -> None:
    known = extras()
    wrong = []
    for path in INSTALL_TEXTS:
        for command in install_commands(text(path)):
            named = re.findall(r"\.\[([a-z0-9,-]+)\]", command)
            unknown = {extra for group in named for extra in group.split(",")} - known
            if "mcp-http-server" in command or unknown:
                wrong.append(f"{path.relative_to(ROOT)}: pip install {command}")
    assert wrong == [], "installs no index serves, or extras pyproject.toml lacks"


def test_the_install_check_sees_the_installs_that_cannot_work() -> None:
    assert install_commands("pip install 'mcp-http-server[redis]'") == ["'mcp-http-server[redis]'"]
    assert install_commands("`pip install -e '.[otel]'` from") == ["-e '.[otel]'"]
    assert {"redis", "otel", "test"} <= extras()


def test_the_architecture_page_stays_a_map() -> None:
    """The ideas, layers, trips and "Where to add" (issue 37): the module list is modules.md."""
    assert len((DOCS / "architecture.md").read_text().splitlines()) < 260
