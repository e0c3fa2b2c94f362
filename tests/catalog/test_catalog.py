"""server.catalog: declarations, derived capabilities, snapshots and change events."""

from typing import Any
from unittest.mock import ANY

import pytest

from server.catalog import Catalog, Change
from server.catalog.content import Icon, TextContents
from server.catalog.prompts import Prompt
from server.catalog.resources import Resource, ResourceTemplate
from server.catalog.tools import Tool


def recorder(catalog):
    changes: list[Any] = []
    catalog.subscribe(changes.append)
    return changes


# -- the declaration methods' types -----------------------------------------------------------


def test_each_keyword_reaches_the_declared_kind() -> None:
    catalog = Catalog()

    def echo(text: str) -> str:
        return text

    assert catalog.tool(echo, name="echo", scopes=["read"], task_support="optional") is echo
    assert catalog.tools["echo"].task_support == "optional"

    @catalog.prompt(title="Greet", blocking=False)
    def greet(who: str) -> str:
        return who

    @catalog.resource("file:///a.txt", mime_type="text/plain", size=3)
    def a() -> str:
        return "abc"

    @catalog.resource_template("notes://{name}", ttl_ms=5)
    def note(name: str) -> str:
        return name

    assert catalog.prompts["greet"].definition["title"] == "Greet"
    assert catalog.resources["file:///a.txt"].definition["size"] == 3
    assert catalog.templates["notes://{name}"].handler is note
    with pytest.raises(TypeError, match="nmae"):
        catalog.tool(echo, nmae="x")  # type: ignore[call-overload]


def declarations_as_type_checkers_see_them(catalog: Catalog) -> None:
    """Never run: mypy (which checks tests/) reads it. A decorated function keeps its
    signature in all three forms, and a wrong keyword or type is an error; each ``ignore``
    that stops being needed fails mypy (``warn_unused_ignores``)."""

    def echo(text: str) -> str:
        return text

    plain = catalog.tool(echo)
    named = catalog.tool(echo, name="echo2", structured_output=False)

    @catalog.tool(name="add", blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @catalog.prompt
    def greet(who: str) -> str:
        return who

    @catalog.resource("file:///a.txt")
    def a() -> str:
        return "abc"

    plain("x")
    named(1)  # type: ignore[arg-type]
    add(1, "2")  # type: ignore[arg-type]
    greet(None)  # type: ignore[arg-type]
    a(1)  # type: ignore[call-arg]
    catalog.tool(echo, task_support="sometimes")  # type: ignore[call-overload]
    catalog.tool(name=3)  # type: ignore[call-overload]
    catalog.prompt(greet, scopes=[1])  # type: ignore[list-item]
    catalog.resource_template("notes://{x}", size=3)  # type: ignore[call-arg]
    catalog.resource("file:///b", ttl_ms="5")  # type: ignore[arg-type]


# -- capabilities --------------------------------------------------------------------------


def test_empty_catalog_promises_nothing():
    catalog = Catalog()
    assert catalog.snapshot.capabilities == {}
    assert catalog.snapshot.tools == ()


def test_tools_only():
    catalog = Catalog()
    catalog.tool(lambda: "x", name="t")
    assert catalog.snapshot.capabilities == {"tools": {"listChanged": True}, "logging": {}}


def test_prompts_only():
    catalog = Catalog()

    @catalog.prompt
    def hello() -> str:
        return "hi"

    assert catalog.snapshot.capabilities == {"prompts": {"listChanged": True}, "logging": {}}


@pytest.mark.parametrize("kind", ["resource", "template"])
def test_resources_or_templates_alone_declare_resources(kind):
    catalog = Catalog()
    if kind == "resource":
        catalog.resource("x://a")(lambda: "a")
    else:

        @catalog.resource_template("x://{v}")
        def by_value(v: str) -> str:
            return v

    assert catalog.snapshot.capabilities == {
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
    }


def test_completions_only_with_a_completer():
    catalog = Catalog()

    @catalog.prompt
    def greet(name: str) -> str:
        return name

    @catalog.resource_template("x://{v}")
    def by_value(v: str) -> str:
        return v

    assert "completions" not in catalog.snapshot.capabilities

    @catalog.completion(prompt="greet", argument="name")
    def names(value, arguments):
        return ["ann"]

    assert catalog.snapshot.capabilities["completions"] == {}


def test_template_completer_also_declares_completions():
    catalog = Catalog()

    @catalog.resource_template("x://{v}")
    def by_value(v: str) -> str:
        return v

    catalog.completion(template="x://{v}", argument="v")(lambda value, arguments: [])
    assert "completions" in catalog.snapshot.capabilities


def test_capabilities_shrink_when_the_last_item_goes():
    catalog = Catalog()

    @catalog.prompt
    def greet(name: str) -> str:
        return name

    catalog.completion(prompt="greet", argument="name")(lambda value, arguments: [])
    catalog.tool(lambda: "x", name="t")
    catalog.remove_prompt("greet")
    assert catalog.snapshot.capabilities == {"tools": {"listChanged": True}, "logging": {}}
    catalog.remove_tool("t")
    assert catalog.snapshot.capabilities == {}


# -- completion declaration errors ---------------------------------------------------------


def test_completion_needs_exactly_one_target_that_exists():
    catalog = Catalog()

    @catalog.prompt
    def greet(name: str) -> str:
        return name

    with pytest.raises(ValueError, match="exactly one"):
        catalog.completion(argument="name")
    with pytest.raises(ValueError, match="exactly one"):
        catalog.completion(argument="name", prompt="greet", template="x://{v}")
    with pytest.raises(ValueError, match="no prompt"):
        catalog.completion(prompt="nope", argument="name")(lambda v, c: [])
    with pytest.raises(ValueError, match="no argument"):
        catalog.completion(prompt="greet", argument="other")(lambda v, c: [])
    with pytest.raises(ValueError, match="no template"):
        catalog.completion(template="x://{v}", argument="v")(lambda v, c: [])


# -- snapshots and order -------------------------------------------------------------------


def test_snapshot_is_rebuilt_on_every_change():
    catalog = Catalog()
    first = catalog.snapshot
    catalog.tool(lambda: "x", name="a")
    second = catalog.snapshot
    assert second is not first
    assert second.version > first.version
    assert [tool["name"] for tool in second.tools] == ["a"]
    assert first.tools == ()  # an old snapshot is never mutated


def test_snapshot_is_stable_without_changes():
    catalog = Catalog()
    catalog.tool(lambda: "x", name="a")
    assert catalog.snapshot is catalog.snapshot


def test_lists_keep_declaration_order():
    catalog = Catalog()
    for name in ["zeta", "alpha", "mid"]:
        catalog.tool(lambda: "x", name=name)
    catalog.resource("x://b")(lambda: "b")
    catalog.resource("x://a")(lambda: "a")
    assert [tool["name"] for tool in catalog.snapshot.tools] == ["zeta", "alpha", "mid"]
    assert [res["uri"] for res in catalog.snapshot.resources] == ["x://b", "x://a"]
    catalog.remove_tool("alpha")
    catalog.tool(lambda: "x", name="alpha")
    assert [tool["name"] for tool in catalog.snapshot.tools] == ["zeta", "mid", "alpha"]


def test_snapshot_holds_definitions_of_every_kind():
    catalog = Catalog()

    @catalog.prompt
    def greet(name: str) -> str:
        return name

    @catalog.resource_template("x://{v}", mime_type="text/plain")
    def by_value(v: str) -> str:
        return v

    assert catalog.snapshot.prompts == (catalog.prompts["greet"].definition,)
    assert catalog.snapshot.templates == (
        {"uriTemplate": "x://{v}", "name": "by_value", "mimeType": "text/plain"},
    )


# -- duplicates ----------------------------------------------------------------------------


def test_duplicates_are_refused():
    catalog = Catalog()
    catalog.tool(lambda: "x", name="a")
    catalog.resource("x://a")(lambda: "a")
    catalog.resource_template("x://{v}")(lambda v: v)

    @catalog.prompt
    def greet() -> str:
        return "hi"

    with pytest.raises(ValueError, match="already declared"):
        catalog.tool(lambda: "y", name="a")
    with pytest.raises(ValueError, match="already declared"):
        catalog.resource("x://a")(lambda: "b")
    with pytest.raises(ValueError, match="already declared"):
        catalog.resource_template("x://{v}")(lambda v: v)
    with pytest.raises(ValueError, match="already declared"):
        catalog.prompt(greet)


# -- change events -------------------------------------------------------------------------


def test_listeners_get_change_events_for_add_and_remove():
    catalog = Catalog()
    changes = recorder(catalog)
    catalog.tool(lambda: "x", name="a")
    catalog.add_prompt(Prompt(lambda: "p", name="p"))
    catalog.add_resource(Resource("x://r", lambda: "r"))
    catalog.resource_template("x://{v}")(lambda v: v)
    assert catalog.remove_tool("a") is True
    assert catalog.remove_prompt("p") is True
    assert catalog.remove_resource("x://r") is True
    assert changes == [
        Change("tools"),
        Change("prompts"),
        Change("resources"),
        Change("resources"),
        Change("tools"),
        Change("prompts"),
        Change("resources"),
    ]


def test_removing_something_absent_emits_nothing():
    catalog = Catalog()
    changes = recorder(catalog)
    version = catalog.snapshot.version
    assert catalog.remove_tool("none") is False
    assert catalog.remove_prompt("none") is False
    assert catalog.remove_resource("x://none") is False
    assert changes == []
    assert catalog.snapshot.version == version


def test_resource_update_event():
    catalog = Catalog()
    changes = recorder(catalog)
    catalog.notify_resource_updated("file:///a.txt")
    assert changes == [Change("resource_updated", "file:///a.txt")]


def test_listener_sees_the_new_snapshot():
    catalog = Catalog()
    seen = []
    catalog.subscribe(lambda change: seen.append([t["name"] for t in catalog.snapshot.tools]))
    catalog.tool(lambda: "x", name="a")
    assert seen == [["a"]]


def test_unsubscribe_stops_events_and_is_idempotent():
    catalog = Catalog()
    changes: list[Any] = []
    stop = catalog.subscribe(changes.append)
    stop()
    stop()
    catalog.tool(lambda: "x", name="a")
    assert changes == []


def test_a_failing_listener_does_not_stop_the_others(caplog):
    catalog = Catalog()

    def broken(change):
        raise RuntimeError("listener bug")

    catalog.subscribe(broken)
    changes = recorder(catalog)
    catalog.tool(lambda: "x", name="a")
    assert changes == [Change("tools")]
    assert "listener bug" in caplog.text


def test_a_listener_may_unsubscribe_itself_during_an_event():
    catalog = Catalog()
    calls = []

    def once(change):
        calls.append(change)
        stop()

    stop = catalog.subscribe(once)
    later = recorder(catalog)
    catalog.tool(lambda: "x", name="a")
    catalog.tool(lambda: "x", name="b")
    assert calls == [Change("tools")]
    assert later == [Change("tools"), Change("tools")]


# -- finding resources ---------------------------------------------------------------------


def test_find_resource_prefers_exact_then_templates_in_order():
    catalog = Catalog()
    exact = Resource("x://items/special", lambda: "s")
    catalog.add_resource(exact)
    catalog.resource_template("x://items/{name}")(lambda name: name)
    catalog.resource_template("x://{+rest}")(lambda rest: rest)
    assert catalog.find_resource("x://items/special") == (exact, {})
    found_with = catalog.find_resource("x://items/other")
    assert found_with is not None
    found, variables = found_with
    assert isinstance(found, ResourceTemplate)
    assert found.template.template == "x://items/{name}"
    assert variables == {"name": "other"}
    assert catalog.find_resource("x://a/b") == (ANY, {"rest": "a/b"})
    assert catalog.find_resource("y://nothing") is None


# -- server info ---------------------------------------------------------------------------


def test_server_info():
    catalog = Catalog(
        "srv",
        "1.2.3",
        title="Server",
        description="Does things",
        website_url="https://example.com",
        icons=[Icon("https://example.com/i.png")],
        instructions="Use it well",
    )
    assert catalog.server_info == {
        "name": "srv",
        "version": "1.2.3",
        "title": "Server",
        "description": "Does things",
        "websiteUrl": "https://example.com",
        "icons": [{"src": "https://example.com/i.png"}],
    }
    assert catalog.instructions == "Use it well"
    assert Catalog().server_info == {"name": "mcp-http-server", "version": "0.1.0"}


def test_decorators_return_the_function_unchanged():
    catalog = Catalog()

    def fn() -> str:
        return "x"

    assert catalog.tool(fn) is fn
    assert catalog.tool(name="other")(fn) is fn
    assert isinstance(catalog.tools["fn"], Tool)
    content = TextContents("x://a", "t")
    assert catalog.resource("x://a")(lambda: content)() is content


def test_probe_catalog_smoke():
    from server.builtin.probe import catalog

    capabilities = catalog.snapshot.capabilities
    assert {"tools", "prompts", "resources", "completions"} <= set(capabilities)
    names = [tool["name"] for tool in catalog.snapshot.tools]
    assert len(names) == len(set(names))
    assert all(tool["inputSchema"]["type"] == "object" for tool in catalog.snapshot.tools)
