"""The layout rules of server/: the core stays sans-IO, every module says what it is for.

Imports are read with ``ast`` (nothing is imported), so a function-level import counts too.
"""

import ast
import re
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parents[1] / "server"
CORE = [
    "errors",
    "jsonrpc",
    "protocol",
    "catalog/content",
    "catalog/uritemplate",
    "catalog/signatures",
    "context",
    "catalog/tools",
    "catalog/prompts",
    "catalog/resources",
    "catalog/__init__",
    "sealing",
    "pagination",
    "modern/input_required",
    "dispatch",
    "hub",
    "modern/era",
]
FORBIDDEN_IN_CORE = [
    "starlette",
    "sse_starlette",
    "uvicorn",
    "httpx",
    "server.settings",
    "server.transport.endpoint",
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
    found = imports_of(source, "server.builtin.mod")
    assert "starlette.responses" in found
    assert "sse_starlette" in found
    assert "server.settings" in found
    assert "server.builtin.endpoint" in found
    assert "server.builtin.app" in found
    assert "uvicorn" in found
    assert "server.other.thing" in found
    assert imports_of("from . import x", "server", is_package=True) == {"server", "server.x"}
    assert imports_of("from ..settings import S", "server.modern.era") >= {"server.settings"}


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
