"""server.dispatch: the shared method table, routed exactly when advertised."""

import asyncio

import orjson
import pytest

from server.aio import coarse_timers
from server.catalog import Catalog
from server.catalog.content import Completion
from server.dispatch import Dispatcher, Handling
from server.errors import InternalError, InvalidParams, ResourceNotFound
from server.pagination import EncodedResults, Pager
from server.sealing import Sealer
from server.settings import Settings
from server.testing import Client
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio

ALL_METHODS = [
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
]


def dispatcher_for(catalog, page_size=100):
    return Dispatcher(catalog, Pager(Sealer(b"d" * 32), page_size))


def full_catalog():
    catalog = Catalog()

    @catalog.tool
    async def echo(text: str) -> str:
        return text

    @catalog.prompt
    def greet(name: str, style: str = "warm") -> str:
        return f"Greet {name} ({style})"

    @catalog.resource("x://readme", mime_type="text/plain")
    def readme() -> str:
        return "read me"

    @catalog.resource("x://empty")
    def empty() -> list[str]:
        return []

    @catalog.resource_template("x://items/{item_id}")
    def item(item_id: int) -> str:
        return f"item {item_id}"

    @catalog.completion(prompt="greet", argument="style")
    def styles(value, context):
        return [s for s in ("warm", "wry", "formal") if s.startswith(value)]

    @catalog.completion(template="x://items/{item_id}", argument="item_id")
    async def ids(value, context):
        return Completion(["1", "2"], total=10, has_more=True)

    return catalog


async def call(dispatcher, method, params=None):
    params = params or {}
    target = dispatcher.resolve(method, params)
    return await dispatcher.call(method, params, make_context(method=method), target)


# -- routing follows capabilities ----------------------------------------------------------


@pytest.mark.parametrize("method", ALL_METHODS)
def test_empty_catalog_serves_nothing(method):
    # The era asks serves() and refuses (-32601); Dispatcher.call trusts it and does not ask
    # again (test_modern and test_legacy check the refusal).
    assert not dispatcher_for(Catalog()).serves(method)


def test_tools_only_catalog_routes_only_tools():
    catalog = Catalog()
    catalog.tool(lambda: "x", name="t")
    dispatcher = dispatcher_for(catalog)
    assert [m for m in ALL_METHODS if dispatcher.serves(m)] == ["tools/list", "tools/call"]


def test_full_catalog_routes_everything_and_nothing_else():
    dispatcher = dispatcher_for(full_catalog())
    assert all(dispatcher.serves(m) for m in ALL_METHODS)
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "x/y"]:
        assert not dispatcher.serves(method)


def test_routing_follows_runtime_changes():
    catalog = Catalog()
    dispatcher = dispatcher_for(catalog)
    assert not dispatcher.serves("tools/call")
    catalog.tool(lambda: "x", name="t")
    assert dispatcher.serves("tools/call")
    catalog.remove_tool("t")
    assert not dispatcher.serves("tools/call")


# -- lists ---------------------------------------------------------------------------------


async def test_lists_return_definitions_under_their_keys():
    catalog = full_catalog()
    dispatcher = dispatcher_for(catalog)
    assert await call(dispatcher, "tools/list") == {"tools": list(catalog.snapshot.tools)}
    assert [p["name"] for p in (await call(dispatcher, "prompts/list"))["prompts"]] == ["greet"]
    resources = (await call(dispatcher, "resources/list"))["resources"]
    assert [r["uri"] for r in resources] == ["x://readme", "x://empty"]
    templates = (await call(dispatcher, "resources/templates/list"))["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["x://items/{item_id}"]


async def test_list_pagination_and_cursor_binding():
    catalog = Catalog()
    for index in range(5):
        catalog.tool(lambda: "x", name=f"t{index}")
    dispatcher = dispatcher_for(catalog, page_size=2)
    names, cursor, pages = [], None, 0
    while True:
        result = await call(dispatcher, "tools/list", {"cursor": cursor} if cursor else {})
        names += [tool["name"] for tool in result["tools"]]
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert names == ["t0", "t1", "t2", "t3", "t4"]
    assert pages == 3
    first = await call(dispatcher, "tools/list")
    with pytest.raises(InvalidParams, match="Invalid cursor"):
        await call(dispatcher, "tools/list", {"cursor": first["nextCursor"] + "x"})


async def test_list_without_more_pages_has_no_next_cursor():
    result = await call(dispatcher_for(full_catalog()), "tools/list")
    assert "nextCursor" not in result


# -- tools/call ----------------------------------------------------------------------------


async def test_call_tool():
    result = await call(
        dispatcher_for(full_catalog()), "tools/call", {"name": "echo", "arguments": {"text": "a"}}
    )
    assert result == {"content": [{"type": "text", "text": "a"}]}


async def test_call_tool_without_arguments_uses_empty_object():
    catalog = Catalog()
    catalog.tool(lambda: "none", name="t")
    assert (await call(dispatcher_for(catalog), "tools/call", {"name": "t"}))["content"][0][
        "text"
    ] == "none"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"name": "nope"}, "Unknown tool: nope"),
        ({}, "params.name"),
        ({"name": ""}, "params.name"),
        ({"name": 5}, "params.name"),
        ({"name": "echo", "arguments": [1]}, "params.arguments"),
    ],
)
async def test_call_tool_bad_params(params, message):
    with pytest.raises(InvalidParams, match=message):
        await call(dispatcher_for(full_catalog()), "tools/call", params)


async def test_invalid_tool_arguments_are_an_error_result():
    result = await call(
        dispatcher_for(full_catalog()), "tools/call", {"name": "echo", "arguments": {}}
    )
    assert result["isError"] is True


# -- prompts/get ---------------------------------------------------------------------------


async def test_get_prompt():
    result = await call(
        dispatcher_for(full_catalog()), "prompts/get", {"name": "greet", "arguments": {"name": "A"}}
    )
    assert result["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Greet A (warm)"}}
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"name": "nope"}, "Unknown prompt"),
        ({"name": "greet", "arguments": {"name": 5}}, "must be strings"),
        ({"name": "greet", "arguments": {}}, "name"),
        ({"name": "greet", "arguments": "x"}, "params.arguments"),
    ],
)
async def test_get_prompt_bad_params(params, message):
    with pytest.raises(InvalidParams, match=message):
        await call(dispatcher_for(full_catalog()), "prompts/get", params)


# -- resources/read ------------------------------------------------------------------------


async def test_read_fixed_and_templated_resources():
    dispatcher = dispatcher_for(full_catalog())
    assert await call(dispatcher, "resources/read", {"uri": "x://readme"}) == {
        "contents": [{"uri": "x://readme", "text": "read me", "mimeType": "text/plain"}]
    }
    templated = await call(dispatcher, "resources/read", {"uri": "x://items/7"})
    assert templated["contents"][0]["text"] == "item 7"


@pytest.mark.parametrize("uri", ["x://nothing", "x://items/not-a-number", "x://empty"])
async def test_unknown_or_empty_resource_is_not_found(uri):
    with pytest.raises(ResourceNotFound) as caught:
        await call(dispatcher_for(full_catalog()), "resources/read", {"uri": uri})
    assert caught.value.data == {"uri": uri}
    assert caught.value.to_wire("modern")["code"] == -32602


async def test_read_needs_a_uri():
    with pytest.raises(InvalidParams, match=r"params\.uri"):
        await call(dispatcher_for(full_catalog()), "resources/read", {})


# -- completion/complete -------------------------------------------------------------------


async def test_complete_prompt_argument():
    result = await call(
        dispatcher_for(full_catalog()),
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "style", "value": "w"},
        },
    )
    assert result == {"completion": {"values": ["warm", "wry"]}}


async def test_complete_template_variable_with_async_completion_object():
    result = await call(
        dispatcher_for(full_catalog()),
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "x://items/{item_id}"},
            "argument": {"name": "item_id", "value": ""},
        },
    )
    assert result == {"completion": {"values": ["1", "2"], "total": 10, "hasMore": True}}


async def test_complete_argument_without_completer_is_empty():
    result = await call(
        dispatcher_for(full_catalog()),
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": ""}},
    )
    assert result == {"completion": {"values": []}}


async def test_completer_gets_context_arguments():
    catalog = Catalog()

    @catalog.prompt
    def pair(a: str, b: str) -> str:
        return a + b

    seen = []

    @catalog.completion(prompt="pair", argument="b")
    def complete_b(value, context):
        seen.append(dict(context))
        return []

    await call(
        dispatcher_for(catalog),
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "pair"},
            "argument": {"name": "b", "value": "x"},
            "context": {"arguments": {"a": "1"}},
        },
    )
    assert seen == [{"a": "1"}]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"ref": {"type": "ref/prompt", "name": "greet"}}, "params.argument"),
        (
            {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "s", "value": 1}},
            "params.argument",
        ),
        ({"ref": {"type": "ref/other"}, "argument": {"name": "a", "value": ""}}, "ref.type"),
        (
            {"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a", "value": ""}},
            "Unknown prompt",
        ),
        (
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "zz", "value": ""},
            },
            "no argument",
        ),
        (
            {
                "ref": {"type": "ref/resource", "uri": "x://no/{v}"},
                "argument": {"name": "v", "value": ""},
            },
            "Unknown resource template",
        ),
        (
            {
                "ref": {"type": "ref/resource", "uri": "x://items/{item_id}"},
                "argument": {"name": "zz", "value": ""},
            },
            "no variable",
        ),
    ],
)
async def test_complete_bad_params(params, message):
    with pytest.raises(InvalidParams, match=message):
        await call(dispatcher_for(full_catalog()), "completion/complete", params)


def test_encoded_results_are_kept_until_the_catalog_changes() -> None:
    catalog = Catalog()
    catalog.tool(lambda: "x", name="one")
    dispatcher = Dispatcher(catalog, Pager(Sealer(b"k" * 32), 100))
    built: list[str] = []

    def envelope(method: str, page: dict[str, object]) -> dict[str, object]:
        built.append("page")
        return {**page, "shaped": method}

    cache = EncodedResults(catalog)
    first = dispatcher.cached_page("tools/list", None, cache, envelope)
    assert dispatcher.cached_page("tools/list", None, cache, envelope) is first
    assert built == ["page"]
    assert len(cache) == 1
    assert orjson.loads(orjson.dumps(first)) == {
        "tools": [catalog.tools["one"].definition],
        "shaped": "tools/list",
    }
    catalog.tool(lambda: "y", name="two")  # the catalog's version moves on: built again
    again = dispatcher.cached_page("tools/list", None, cache, envelope)
    assert again is not first
    assert built == ["page", "page"]
    assert len(cache) == 1
    assert len(orjson.loads(orjson.dumps(again))["tools"]) == 2


# -- what a call names is looked up once ---------------------------------------------------


def test_resolve_finds_what_a_call_names():
    catalog = full_catalog()
    dispatcher = dispatcher_for(catalog)
    assert dispatcher.resolve("tools/call", {"name": "echo"}) is catalog.tools["echo"]
    assert dispatcher.resolve("prompts/get", {"name": "greet"}) is catalog.prompts["greet"]
    assert dispatcher.resolve("resources/read", {"uri": "x://items/7"}) == (
        catalog.templates["x://items/{item_id}"],
        {"item_id": "7"},
    )
    for method, params in [
        ("tools/call", {"name": "nope"}),
        ("tools/call", {"name": 5}),
        ("prompts/get", {}),
        ("resources/read", {"uri": ""}),
        ("resources/read", {"uri": "x://nothing"}),
        ("completion/complete", {"name": "echo"}),
        ("tools/list", {}),
    ]:
        assert dispatcher.resolve(method, params) is None


async def test_call_uses_the_resolved_target_without_looking_it_up_again():
    catalog = full_catalog()
    dispatcher = dispatcher_for(catalog)
    params = {"name": "echo", "arguments": {"text": "once"}}
    target = dispatcher.resolve("tools/call", params)
    catalog.tools = {}  # nothing left to look up: the carried tool is what runs
    result = await dispatcher.call("tools/call", params, make_context(), target)
    assert result["content"] == [{"type": "text", "text": "once"}]
    with pytest.raises(InvalidParams, match="Unknown tool: echo"):
        dispatcher.call("tools/call", params, make_context(), None)


# -- the handler timeout, for calls that wait ----------------------------------------------


async def test_a_call_that_waits_returns_what_it_returns():
    dispatcher = Dispatcher(Catalog(), Pager(Sealer(b"d" * 32), 10), handler_timeout_s=5)

    async def waits() -> dict:
        await asyncio.sleep(0)
        return {"ok": True}

    handling = Handling(dispatcher, "tools/call", waits())
    assert not handling.done
    assert await handling == {"ok": True}


async def test_a_call_that_answers_at_once_is_done_without_a_timer():
    dispatcher = Dispatcher(Catalog(), Pager(Sealer(b"d" * 32), 10), handler_timeout_s=5)

    async def at_once() -> dict:
        return {"ok": True}

    timers = len(coarse_timers())
    handling = Handling(dispatcher, "tools/call", at_once())
    assert handling.done
    assert handling.result == {"ok": True}
    assert await handling == {"ok": True}
    assert len(coarse_timers()) == timers  # no handler timer was armed for it


@pytest.mark.parametrize("envelope", [None, lambda method, result: {**result, "wrapped": method}])
async def test_a_tool_past_the_timeout_fails_as_a_result(envelope):
    dispatcher = Dispatcher(Catalog(), Pager(Sealer(b"d" * 32), 10), handler_timeout_s=0.05)
    stopped = []

    async def slow() -> dict:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(True)
            raise
        return {}

    result = await Handling(dispatcher, "tools/call", slow(), envelope)
    assert result["isError"] is True
    assert "took longer than 0.05 s" in result["content"][0]["text"]
    assert result.get("wrapped") == (None if envelope is None else "tools/call")
    assert stopped == [True]
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0  # the timer's cancellation was taken back


async def test_another_method_past_the_timeout_is_internal_error():
    dispatcher = Dispatcher(Catalog(), Pager(Sealer(b"d" * 32), 10), handler_timeout_s=0.05)
    with pytest.raises(InternalError, match=r"prompts/get took longer than 0\.05 s"):
        await Handling(dispatcher, "prompts/get", asyncio.sleep(30))


async def test_a_cancellation_that_is_not_the_timeout_goes_on():
    dispatcher = Dispatcher(Catalog(), Pager(Sealer(b"d" * 32), 10), handler_timeout_s=5)

    async def waits_for_a_cancellation() -> None:
        await Handling(dispatcher, "tools/call", asyncio.sleep(30))

    task = asyncio.ensure_future(waits_for_a_cancellation())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stopped_tool_is_named_with_the_setting_that_stopped_it() -> None:
    """Issue 34: "tools/call took longer than 1 s" named neither the tool nor the setting."""
    catalog = Catalog("slow", "1")

    @catalog.tool
    async def crawl_site() -> str:
        await asyncio.sleep(30)
        return "done"

    settings = Settings(_env_file=None, records=["none"], handler_timeout_s=0.2)
    for era in ("modern", "legacy"):
        async with Client(catalog, era=era, settings=settings) as client:
            result = await client.call_tool("crawl_site")
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert "tools/call crawl_site took longer than 0.2 s" in text, text
        assert "MCP_HANDLER_TIMEOUT_S" in text


async def test_a_tool_call_answers_through_where_its_changes_are_shared():
    # With Redis, a tool's answer waits for the changes it made to be in the change log
    # (issue 35; server.state.redis.changes.ChangeLog.shared); in one process nothing wraps it.
    wrapped = []

    class Durable:
        def shared(self, call):
            wrapped.append(call)
            return call

    catalog = full_catalog()
    params = {"name": "echo", "arguments": {"text": "hi"}}
    plain = dispatcher_for(catalog)
    tool = plain.resolve("tools/call", params)
    assert (await plain.call_tool(params, None, tool))["content"][0]["text"] == "hi"
    shared = Dispatcher(catalog, Pager(Sealer(b"d" * 32), 100), durable=Durable())
    assert (await shared.call_tool(params, None, tool))["content"][0]["text"] == "hi"
    assert len(wrapped) == 1
