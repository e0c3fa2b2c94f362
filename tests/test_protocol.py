"""server.protocol: the method table, and the handlers that serve its rows (both ways)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.catalog import Catalog
from server.dispatch import LIST_METHODS, Dispatcher
from server.legacy.era import LegacyEra
from server.legacy.tasks import TASK_HANDLERS as LEGACY_TASK_HANDLERS
from server.modern.era import ModernEra
from server.modern.input_required import RequestStates
from server.modern.tasks import TASK_HANDLERS
from server.pagination import Pager
from server.protocol import (
    CALL_KIND_BY_METHOD,
    INPUT_REQUIRED_METHODS,
    LEGACY_METHODS,
    LEGACY_TASK_METHODS,
    METHODS,
    MODERN_METHODS,
    NAME_FIELD_BY_METHOD,
)
from server.sealing import Sealer
from server.state.memory import MemorySessionStore

# The methods an era answers with a method of its own rather than a handler map: ``initialize``
# opens a session before there is one to handle a request in; ``server/discover`` is a cached
# page; ``subscriptions/listen`` opens a stream its transport holds.
ERA_METHODS = {
    "initialize": LegacyEra.initialize,
    "server/discover": ModernEra.discover_result,
    "subscriptions/listen": ModernEra.listen,
}


def full_catalog() -> Catalog:
    """A catalog with every capability a shared method needs."""
    catalog = Catalog("methods", "1")

    @catalog.tool
    def echo(text: str) -> str:
        return text

    @catalog.prompt()
    def greet(name: str) -> str:
        return f"Hello {name}"

    @catalog.resource("test://docs")
    def docs() -> str:
        return "docs"

    @catalog.completion(argument="name", prompt="greet")
    def names(value: str, context: object) -> list[str]:
        return ["ada"]

    return catalog


def dispatcher() -> Dispatcher:
    return Dispatcher(full_catalog(), Pager(Sealer(b"p" * 32), 10))


def legacy_era() -> LegacyEra:
    d = dispatcher()
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=60)
    return LegacyEra(d.catalog, d, store, client_request_timeout_s=5)


def modern_era() -> ModernEra:
    d = dispatcher()
    sealer = Sealer(b"m" * 32)
    return ModernEra(
        d.catalog,
        d,
        RequestStates(sealer, 600),
        list_ttl_ms=60_000,
        discover_ttl_ms=300_000,
        cache_scope="public",
    )


def handled() -> dict[str, str]:
    """Every method some handler answers, with where that handler is."""
    found: dict[str, str] = {}
    for method in dispatcher()._handlers:
        found[method] = "Dispatcher._handlers"
    for method in LIST_METHODS:
        found[method] = "dispatch.LIST_METHODS"
    for method in legacy_era()._own:
        found[method] = "LegacyEra._own"
    for method in TASK_HANDLERS:
        found[method] = "modern.tasks.TASK_HANDLERS"
    for method in LEGACY_TASK_HANDLERS:
        found[method] = "legacy.tasks.TASK_HANDLERS"
    for method in ERA_METHODS:
        found[method] = "an era's own method"
    return found


def test_every_handler_has_a_row_and_every_row_a_handler() -> None:
    rows = {method.name for method in METHODS}
    found = handled()
    assert sorted(set(found) - rows) == [], "a handler without a row in protocol.METHODS"
    assert sorted(rows - set(found)) == [], "a row in protocol.METHODS that nothing handles"


def test_a_shared_method_has_a_capability_and_only_it() -> None:
    routed = set(dispatcher()._handlers) | set(LIST_METHODS)
    assert {m.name for m in METHODS if m.capability is not None} == routed


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_each_era_advertises_exactly_its_rows_with_every_capability(era: str) -> None:
    if era == "modern":
        advertised = modern_era().advertised()
        expected = MODERN_METHODS
    else:
        advertised = legacy_era().advertised("2025-06-18")
        expected = LEGACY_METHODS
    assert advertised == list(expected)
    assert set(expected) == {m.name for m in METHODS if era in m.eras and m.extension is None}


def test_the_modern_tasks_rows_are_the_methods_a_handler_answers() -> None:
    rows = {m.name for m in METHODS if m.extension == "tasks" and "modern" in m.eras}
    assert rows - set(TASK_HANDLERS) == set(), "a modern tasks row without a handler"
    assert set(TASK_HANDLERS) - rows == set(), "a modern tasks handler without a row"


def test_the_legacy_tasks_rows_are_the_methods_a_handler_answers() -> None:
    rows = {m.name for m in METHODS if m.extension == "tasks" and "legacy" in m.eras}
    assert rows == set(LEGACY_TASK_METHODS)
    assert rows - set(LEGACY_TASK_HANDLERS) == set(), "a legacy tasks row without a handler"
    assert set(LEGACY_TASK_HANDLERS) - rows == set(), "a legacy tasks handler without a row"


def test_the_calls_that_name_something_are_the_input_required_ones_with_a_kind() -> None:
    assert set(CALL_KIND_BY_METHOD) == INPUT_REQUIRED_METHODS
    assert CALL_KIND_BY_METHOD == {
        "tools/call": "tool",
        "prompts/get": "prompt",
        "resources/read": "resource",
    }
    assert {NAME_FIELD_BY_METHOD[method] for method in CALL_KIND_BY_METHOD} == {"name", "uri"}


def test_each_method_has_one_row() -> None:
    names = [method.name for method in METHODS]
    assert len(names) == len(set(names))


def test_the_hottest_method_name_is_spelled_in_the_table_alone() -> None:
    """Code names a method through the table's constants, so renaming or tracing one is one
    grep: ``"tools/call"`` written out anywhere but ``server/protocol.py`` fails here."""
    root = Path(__file__).resolve().parents[1] / "server"
    spelled = sorted(
        str(path.relative_to(root.parent))
        for path in root.rglob("*.py")
        if '"tools/call"' in path.read_text()
    )
    assert spelled == ["server/protocol.py"]
