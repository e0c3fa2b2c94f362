"""Declared extensions in the catalog: identifiers, settings, methods, and what is advertised
(the tasks extension follows from tools that can run as tasks)."""

from typing import Any

import pytest

from server.catalog import Catalog
from server.catalog.extensions import TASKS_EXTENSION, Extension
from server.context import Context


async def ping_handler(params: Any, context: Context, paginate: Any) -> dict[str, Any]:
    return {"pong": params.get("n")}


def test_an_extension_is_advertised_with_its_settings_and_methods() -> None:
    catalog = Catalog()
    assert "extensions" not in catalog.snapshot.capabilities
    version = catalog.snapshot.version
    catalog.extension("com.example/echo", {"flavour": "plain"}, methods={"echo/ping": ping_handler})
    assert catalog.snapshot.version > version  # discover is rebuilt
    assert catalog.snapshot.capabilities["extensions"] == {"com.example/echo": {"flavour": "plain"}}
    assert catalog.snapshot.extension_methods["echo/ping"].identifier == "com.example/echo"
    assert catalog.remove_extension("com.example/echo")
    assert "extensions" not in catalog.snapshot.capabilities
    assert catalog.snapshot.extension_methods == {}
    assert not catalog.remove_extension("com.example/echo")


@pytest.mark.parametrize("identifier", ["echo", "com.example", "/echo", "Com.Example/x", "a/b"])
def test_identifiers_are_reverse_dns_and_a_name(identifier: str) -> None:
    with pytest.raises(ValueError, match="reverse-DNS"):
        Extension(identifier)


def test_methods_must_be_new_and_named_like_methods() -> None:
    catalog = Catalog()
    with pytest.raises(ValueError, match="already served"):
        catalog.extension("com.example/a", methods={"tools/call": ping_handler})
    with pytest.raises(ValueError, match="already served"):
        catalog.extension("com.example/b", methods={"tasks/get": ping_handler})
    catalog.extension("com.example/c", methods={"c/do": ping_handler})
    with pytest.raises(ValueError, match="already served"):
        catalog.extension("com.example/d", methods={"c/do": ping_handler})
    with pytest.raises(ValueError, match="already declared"):
        catalog.extension("com.example/c")
    with pytest.raises(ValueError, match="not a method name"):
        Extension("com.example/e", methods={"Bad Method": ping_handler})
    with pytest.raises(ValueError, match="cacheable"):
        Extension("com.example/f", methods={"f/x": ping_handler}, cacheable=frozenset({"f/y"}))


def test_the_tasks_extension_follows_from_task_tools() -> None:
    catalog = Catalog()

    @catalog.tool
    async def quick() -> str:
        return "q"

    assert "extensions" not in catalog.snapshot.capabilities
    assert "execution" not in catalog.snapshot.tools[0]

    @catalog.tool(task_support="optional")
    async def slow() -> str:
        return "s"

    assert catalog.snapshot.capabilities["extensions"] == {TASKS_EXTENSION: {}}
    assert catalog.snapshot.tools[1]["execution"] == {"taskSupport": "optional"}
    assert [tool.name for tool in catalog.task_tools()] == ["slow"]
    catalog.remove_tool("slow")
    assert "extensions" not in catalog.snapshot.capabilities
    with pytest.raises(ValueError, match="already declared"):
        catalog.extension(TASKS_EXTENSION)


def test_task_support_is_checked() -> None:
    catalog = Catalog()

    async def job() -> str:
        return "j"

    with pytest.raises(ValueError, match="forbidden, optional or required"):
        catalog.tool(job, task_support="sometimes")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="defer_task needs"):
        catalog.tool(job, defer_task=True)
