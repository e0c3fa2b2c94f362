"""The layout rules of server/: the core stays sans-IO, every module says what it is for.

Imports are read with ``ast`` (nothing is imported), so a function-level import counts too.
"""

import ast
import re
import sys
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parent.parent / "server"
CORE = [
    "errors",
    "jsonrpc",
    "protocol",
    "content",
    "uritemplate",
    "signatures",
    "context",
    "tools",
    "prompts",
    "resources",
    "catalog",
    "sealing",
    "pagination",
    "mrtr",
    "dispatch",
    "subscriptions",
    "modern",
]
FORBIDDEN_IN_CORE = [
    "starlette",
    "sse_starlette",
    "uvicorn",
    "httpx",
    "server.settings",
    "server.endpoint",
    "server.app",
]
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(SERVER.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def all_modules() -> list[Path]:
    return sorted(SERVER.rglob("*.py"))


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module name ``source`` imports, absolute; ``from a import b`` yields a and a.b."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def imports_of_file(path: Path) -> set[str]:
    return imports_of(
        path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py"
    )


def is_within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def docstring_of(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def explains_size(docstring: str) -> bool:
    """A long module's docstring says why it is long (mentions its length or size)."""
    return re.search(r"\b(lines|long|length|large|size)\b", docstring, re.IGNORECASE) is not None


# -- the walker itself ---------------------------------------------------------------------


def test_import_walker_sees_every_form():
    source = (
        "import starlette.responses\n"
        "from sse_starlette import EventSourceResponse\n"
        "from server import settings\n"
        "from . import endpoint\n"
        "from .app import create_app\n"
        "def later():\n"
        "    import uvicorn\n"
        "    from ..other import thing\n"
    )
    found = imports_of(source, "server.catalogs.mod")
    assert "starlette.responses" in found
    assert "sse_starlette" in found
    assert "server.settings" in found
    assert "server.catalogs.endpoint" in found
    assert "server.catalogs.app" in found
    assert "uvicorn" in found
    assert "server.other.thing" in found
    assert imports_of("from . import x", "server", is_package=True) == {"server", "server.x"}
    assert imports_of("from .settings import S", "server.modern") >= {"server.settings"}


def test_forbidden_check_matches_submodules_only():
    assert is_within("starlette.responses", "starlette")
    assert not is_within("starlettex", "starlette")
    assert is_within("server.app", "server.app")
    assert not is_within("server.appendix", "server.app")


# -- rules ---------------------------------------------------------------------------------


def test_every_core_module_exists():
    missing = [name for name in CORE if not (SERVER / f"{name}.py").is_file()]
    assert missing == []


@pytest.mark.parametrize("name", CORE)
def test_core_never_imports_http_or_wiring(name):
    imported = imports_of_file(SERVER / f"{name}.py")
    offending = sorted(
        found for found in imported for bad in FORBIDDEN_IN_CORE if is_within(found, bad)
    )
    assert offending == [], f"server/{name}.py imports {offending}"


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(SERVER)))
def test_every_module_has_a_docstring(path):
    docstring = docstring_of(path)
    assert docstring, f"{path.relative_to(SERVER.parent)} has no module docstring"
    assert len(docstring.split()) >= 5, "a docstring should say what the module is for"


TOO_LONG: dict[str, str] = {}


def size_cases():
    for path in all_modules():
        relative = str(path.relative_to(SERVER))
        marks = []
        if relative in TOO_LONG:
            marks.append(pytest.mark.xfail(strict=True, reason="BUG: " + TOO_LONG[relative]))
        yield pytest.param(path, id=relative, marks=marks)


@pytest.mark.parametrize("path", list(size_cases()))
def test_long_modules_explain_why(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if lines > MAX_LINES:
        assert explains_size(docstring_of(path) or ""), (
            f"{path.relative_to(SERVER.parent)} has {lines} lines; split it or say why in "
            "its docstring"
        )


def test_size_explanation_heuristic():
    assert explains_size("Fixtures. Long on purpose: one per scenario the suite checks.")
    assert not explains_size("The conformance catalog.")


# -- "May import:" lines -------------------------------------------------------------------

DISTRIBUTION_TO_MODULE = {"pydantic-settings": "pydantic_settings"}


def may_import(docstring: str) -> list[str] | None:
    # The list may wrap onto following lines; it ends at a blank line or the docstring's end.
    match = re.search(
        r"^May import: (.+?)\.?\s*(?:\n\s*\n|\Z)", docstring, re.MULTILINE | re.DOTALL
    )
    if match is None:
        return None
    return [" ".join(item.split()) for item in match.group(1).split(",")]


def undeclared_imports(path: Path) -> list[str]:
    """Imports that the module's own "May import:" line does not allow."""
    return undeclared(docstring_of(path) or "", imports_of_file(path), module_name(path))


def undeclared(docstring: str, imported: set[str], self_name: str) -> list[str]:
    allowed = may_import(docstring)
    if allowed is None or allowed == ["everything"]:
        return []
    if allowed == ["the standard library only"]:
        allowed = []
    names = set()
    for item in allowed:
        if item == "everything in the core":
            names.update(CORE)
        else:
            names.add(DISTRIBUTION_TO_MODULE.get(item, item))
    problems = set()
    for found in imported:
        parts = found.split(".")
        if parts[0] in sys.stdlib_module_names or parts[0] == "__future__":
            continue
        if parts[0] != "server":
            if parts[0] not in names:
                problems.add(parts[0])
            continue
        if len(parts) < 2 or is_within(found, self_name):
            continue
        internal = parts[1]
        is_module = (SERVER / f"{internal}.py").is_file() or (SERVER / internal).is_dir()
        # "from server import Catalog" names an attribute of server/__init__, not a module.
        if is_module and internal not in names:
            problems.add(f"server.{internal}")
    return sorted(problems)


DOC_DRIFT: dict[str, str] = {}


def may_import_cases():
    for path in all_modules():
        relative = str(path.relative_to(SERVER))
        if may_import(docstring_of(path) or "") is None:
            continue
        marks = []
        if relative in DOC_DRIFT:
            marks.append(pytest.mark.xfail(strict=True, reason="BUG: " + DOC_DRIFT[relative]))
        yield pytest.param(path, id=relative, marks=marks)


@pytest.mark.parametrize("path", list(may_import_cases()))
def test_imports_follow_the_may_import_line(path):
    assert undeclared_imports(path) == []


def test_may_import_check_catches_undeclared_imports():
    source = "import json\nimport orjson\nfrom server import catalog\nfrom server.errors import E\n"
    imported = imports_of(source, "server.sealing")
    assert undeclared("May import: errors, orjson.", imported, "server.sealing") == [
        "server.catalog"
    ]
    assert undeclared("May import: the standard library only.", imported, "server.x") == [
        "orjson",
        "server.catalog",
        "server.errors",
    ]
    assert undeclared("May import: everything.", imported, "server.x") == []
    assert undeclared("No such line.", imported, "server.x") == []
