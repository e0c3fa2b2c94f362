"""server.legacy.era: initialize and version negotiation, session methods, server-to-client
requests.

No HTTP here: the era gets sessions, runtimes and streams directly, as the shell passes them.
"""

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
import orjson
import pytest

from server.catalog import Catalog
from server.context import Context, LogLevel
from server.dispatch import Dispatcher
from server.errors import InvalidParams, MethodNotFound
from server.hub import MAX_RESOURCE_SUBSCRIPTIONS
from server.jsonrpc import (
    MAX_DECLARED_BYTES,
    MAX_DECLARED_DEPTH,
    Request,
    declared_problem,
    encode_result,
)
from server.legacy.era import LegacyEra
from server.legacy.eventstream import EventStream
from server.legacy.exchange import LegacyExchange
from server.legacy.runtime import SessionRuntime
from server.legacy.sessions import Session
from server.pagination import Pager
from server.protocol import LEGACY_VERSIONS
from server.sealing import Sealer
from server.state.memory import MemorySessionStore
from tests.support.mcp_client import initialize_params

pytestmark = pytest.mark.anyio

INFO = {"name": "test-client", "version": "1"}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


def full_catalog() -> Catalog:
    catalog = Catalog("legacy-unit", "2.0.0", title="Legacy unit", instructions="Be brief.")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def ask_name(ctx: Context) -> str:
        """Elicits a name."""
        answer = await ctx.elicit("Your name?", NAME_SCHEMA)
        return f"Hello {(answer.content or {}).get('name')}"

    @catalog.resource("test://docs")
    def docs() -> str:
        """Docs."""
        return "docs"

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"

    @catalog.completion(argument="name", prompt="greet")
    def names(value: str, context: Mapping[str, str]) -> list[str]:
        return [name for name in ("ada", "alan") if name.startswith(value)]

    return catalog


def make_era(
    catalog: Catalog | None = None, *, timeout_s: float = 5.0, **options: Any
) -> LegacyEra:
    catalog = catalog if catalog is not None else full_catalog()
    dispatcher = Dispatcher(catalog, Pager(Sealer(b"k" * 32), 100))
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=60)
    return LegacyEra(catalog, dispatcher, store, client_request_timeout_s=timeout_s, **options)


async def new_session(
    era: LegacyEra, version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
) -> Session:
    session, _ = await era.initialize(
        Request(0, "initialize", initialize_params(version, capabilities or {}, client_info=INFO))
    )
    return session


class Harness:
    """A session, its runtime and one call's stream and exchange."""

    def __init__(self, era: LegacyEra, session: Session) -> None:
        self.era = era
        self.session = session
        self.runtime = SessionRuntime(session.id, 64)
        self.stream = self.runtime.open_stream()
        self.exchange = LegacyExchange(
            self.runtime, self.stream, era.client_request_timeout_s, resumable=True
        )

    async def call(self, method: str, params: dict[str, Any] | None = None, id: Any = 1) -> Any:
        request = Request(id, method, params or {})
        context = self.era.context(self.session, request, self.exchange)
        target = self.era.resolve(request)
        result = await self.era.handle(self.session, self.runtime, request, context, target)
        # A list page comes encoded (a Fragment has no way back but encoding it).
        return orjson.loads(encode_result(id, result))["result"]


async def harness(era: LegacyEra | None = None, **session_options: Any) -> Harness:
    era = era if era is not None else make_era()
    return Harness(era, await new_session(era, **session_options))


def published(stream: EventStream) -> list[dict[str, Any]]:
    return [orjson.loads(event.payload) for _, event in stream.events_after(0)]


async def next_message(stream: EventStream, after: int) -> dict[str, Any]:
    with anyio.fail_after(2):
        await stream.wait_beyond(after, stream.generation)
    return published(stream)[after]


# -- initialize ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_a_served_version_is_echoed(version: str) -> None:
    assert make_era().negotiate(version) == version


@pytest.mark.parametrize(
    "requested", ["2099-01-01", "2026-07-28", "2024-10-07", "", 20251125, None]
)
def test_an_unknown_version_gets_the_newest_legacy_version(requested: Any) -> None:
    assert make_era().negotiate(requested) == "2025-11-25"


def test_an_era_serving_fewer_versions_offers_its_newest() -> None:
    era = make_era()
    era.supported_versions = ("2025-06-18", "2025-03-26")
    assert era.negotiate("2025-11-25") == "2025-06-18"
    assert era.negotiate("2025-03-26") == "2025-03-26"


def test_capabilities_follow_the_version() -> None:
    era = make_era()
    full = {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
        "completions": {},
    }
    for version in ("2025-11-25", "2025-06-18", "2025-03-26"):
        assert era.capabilities(version) == full
    # completions arrived in 2025-03-26: an older client is not offered it.
    assert era.capabilities("2024-11-05") == {k: v for k, v in full.items() if k != "completions"}


def test_capabilities_never_carry_extensions_and_leave_the_catalog_alone() -> None:
    era = make_era()
    era.catalog.snapshot.capabilities["extensions"] = {"io.example/x": {}}
    for version in LEGACY_VERSIONS:
        assert "extensions" not in era.capabilities(version)
    era.capabilities("2024-11-05")
    assert "extensions" in era.catalog.snapshot.capabilities
    assert "completions" in era.catalog.snapshot.capabilities


async def test_initialize_result_and_the_session_it_creates() -> None:
    era = make_era()
    capabilities: dict[str, Any] = {"sampling": {}, "elicitation": {"form": {}}}
    session, result = await era.initialize(
        Request(1, "initialize", initialize_params("2025-06-18", capabilities, client_info=INFO))
    )
    assert result == {
        "protocolVersion": "2025-06-18",
        "capabilities": era.capabilities("2025-06-18"),
        "serverInfo": {"name": "legacy-unit", "version": "2.0.0", "title": "Legacy unit"},
        "instructions": "Be brief.",
    }
    assert session.protocol_version == "2025-06-18"
    assert session.client_capabilities == capabilities
    assert session.client_info == INFO
    assert not session.initialized
    assert await era.store.get(session.id) is session
    await era.initialized(session)
    assert session.initialized


async def test_initialize_writes_the_session_with_its_owner_once() -> None:
    era = make_era()
    store = era.store
    writes: list[str] = []
    create, save = store.create, store.save

    async def counting_create(*args: Any, **kwargs: Any) -> Session:
        writes.append("create")
        return await create(*args, **kwargs)

    async def counting_save(session: Session) -> None:
        writes.append("save")
        await save(session)

    store.create, store.save = counting_create, counting_save  # type: ignore[method-assign]
    session, _ = await era.initialize(
        Request(1, "initialize", initialize_params("2025-11-25", client_info=INFO)), "bob"
    )
    assert writes == ["create"]  # one write, the owner in it: no save after
    assert session.owner == "bob"
    found = await store.get(session.id)
    assert found is not None
    assert found.owner == "bob"


async def test_initialize_with_an_unknown_version_answers_and_records_its_own() -> None:
    era = make_era()
    session, result = await era.initialize(
        Request(1, "initialize", initialize_params("2030-01-01", client_info=INFO))
    )
    assert result["protocolVersion"] == "2025-11-25"
    assert session.protocol_version == "2025-11-25"


async def test_initialize_without_instructions_leaves_the_field_out() -> None:
    catalog = Catalog("bare", "1")
    _, result = await make_era(catalog).initialize(
        Request(1, "initialize", initialize_params("2025-11-25", client_info=INFO))
    )
    assert result == {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "serverInfo": {"name": "bare", "version": "1"},
    }


async def test_initialize_tolerates_missing_capabilities_and_client_info() -> None:
    session, _ = await make_era().initialize(
        Request(1, "initialize", {"protocolVersion": "2025-11-25"})
    )
    assert session.client_capabilities == {}
    assert session.client_info == {}


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"protocolVersion": 20251125},
        {"protocolVersion": "2025-11-25", "capabilities": []},
        {"protocolVersion": "2025-11-25", "clientInfo": "me"},
    ],
)
async def test_initialize_with_bad_params_is_invalid_params(params: dict[str, Any]) -> None:
    era = make_era()
    with pytest.raises(InvalidParams) as raised:
        await era.initialize(Request(1, "initialize", params))
    assert raised.value.to_wire("legacy")["code"] == -32602
    assert era.store.count() == 0


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep (itself the first)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def sized_capabilities(size: int) -> dict[str, Any]:
    """Capabilities of exactly ``size`` bytes encoded."""
    shell = len(orjson.dumps({"experimental": {"pad": ""}}))
    capabilities = {"experimental": {"pad": "x" * (size - shell)}}
    assert len(orjson.dumps(capabilities)) == size
    return capabilities


async def test_what_initialize_declares_is_kept_up_to_the_limits() -> None:
    era = make_era()
    capabilities = sized_capabilities(MAX_DECLARED_BYTES)
    capabilities["deep"] = nested(MAX_DECLARED_DEPTH - 1)  # the capabilities are level 1
    capabilities["experimental"]["pad"] = capabilities["experimental"]["pad"][:-200]
    info = {"name": "big", "version": "1", "description": "d" * (MAX_DECLARED_BYTES - 100)}
    session, _ = await era.initialize(
        Request(
            1,
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": info},
        )
    )
    assert session.client_capabilities == capabilities
    assert session.client_info == info


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "capabilities",
            sized_capabilities(MAX_DECLARED_BYTES + 1),
            "initialize params.capabilities too large: 16,385 bytes, at most 16,384",
        ),
        (
            "capabilities",
            sized_capabilities(3_700_000),
            "initialize params.capabilities too large: 3,700,000 bytes, at most 16,384",
        ),
        (
            "clientInfo",
            {"name": "n" * MAX_DECLARED_BYTES, "version": "1"},
            "initialize params.clientInfo too large: 16,409 bytes, at most 16,384",
        ),
        (
            "capabilities",
            {"experimental": nested(MAX_DECLARED_DEPTH)},
            "initialize params.capabilities nested too deep: more than 32 levels",
        ),
        (
            "clientInfo",
            {"name": "n", "icons": [nested(MAX_DECLARED_DEPTH - 1)]},
            "initialize params.clientInfo nested too deep: more than 32 levels",
        ),
        (
            # Past what orjson encodes at all (254 levels), as a JSON body may nest (1024).
            "capabilities",
            {"experimental": nested(600)},
            "initialize params.capabilities nested too deep: more than 32 levels",
        ),
    ],
    ids=["one-byte-over", "3.7MB", "client-info", "deep", "deep-client-info", "very-deep"],
)
async def test_initialize_past_the_limits_is_invalid_params_and_no_session(
    field: str, value: dict[str, Any], message: str
) -> None:
    era = make_era()
    params = initialize_params("2025-11-25", client_info=INFO) | {field: value}
    with pytest.raises(InvalidParams) as raised:
        await era.initialize(Request(1, "initialize", params))
    assert raised.value.to_wire("legacy") == {"code": -32602, "message": message}
    assert era.store.count() == 0


def test_declared_problem_walks_only_when_the_containers_could_nest_that_deep() -> None:
    # Wide but shallow: more containers than levels allowed, no level past the limit.
    wide = {f"k{number}": {"v": [number]} for number in range(500)}
    assert declared_problem("c", wide) is None
    assert declared_problem("c", {"a": [[[[]]]]}, max_depth=5) is None
    assert declared_problem("c", {"a": [[[[[]]]]]}, max_depth=5) == (
        "c nested too deep: more than 5 levels"
    )
    # Brackets inside strings count as containers for the shortcut, never as levels.
    assert declared_problem("c", {"a": "[[[[[[[[[["}, max_depth=2) is None


# -- session methods ----------------------------------------------------------------------------


async def test_ping_is_an_empty_result() -> None:
    assert await (await harness()).call("ping") == {}


async def test_set_level_is_kept_on_the_session_and_reaches_later_contexts() -> None:
    h = await harness()
    assert await h.call("logging/setLevel", {"level": "warning"}) == {}
    stored = await h.era.store.get(h.session.id)
    assert stored is not None
    assert stored.log_level == "warning"
    context = h.era.context(h.session, Request(2, "tools/call", {}), h.exchange)
    assert context.log_level == "warning"
    assert context.era == "legacy"
    assert context.protocol_version == "2025-11-25"


@pytest.mark.parametrize("level", ["verbose", "WARNING", "", None, 3])
async def test_set_level_with_an_unknown_level_is_invalid_params(level: Any) -> None:
    h = await harness()
    with pytest.raises(InvalidParams) as raised:
        await h.call("logging/setLevel", {"level": level})
    assert raised.value.to_wire("legacy")["code"] == -32602
    assert h.session.log_level is None


async def test_subscribe_and_unsubscribe_are_kept_by_the_store_and_runtime() -> None:
    h = await harness()
    announced: list[tuple[str, str, bool]] = []
    h.era.on_subscriptions = lambda *change: announced.append(change)
    assert await h.call("resources/subscribe", {"uri": "test://docs"}) == {}
    assert await h.call("resources/subscribe", {"uri": "test://dir/"}) == {}
    assert await h.call("resources/subscribe", {"uri": "test://docs"}) == {}  # again: no change
    assert await h.era.store.subscriptions(h.session.id) == {"test://docs", "test://dir/"}
    assert h.runtime.subscriptions.uris == {"test://docs", "test://dir/"}
    assert await h.call("resources/unsubscribe", {"uri": "test://docs"}) == {}
    assert await h.call("resources/unsubscribe", {"uri": "test://never"}) == {}
    assert await h.era.store.subscriptions(h.session.id) == {"test://dir/"}
    assert h.runtime.subscriptions.uris == {"test://dir/"}
    # Each change is announced alone (one URI), and only what changed.
    assert announced == [
        (h.session.id, "test://docs", True),
        (h.session.id, "test://dir/", True),
        (h.session.id, "test://docs", False),
    ]


async def test_subscriptions_are_capped_per_session_with_a_clear_error() -> None:
    era = make_era()
    era.store = MemorySessionStore(max_sessions=10, idle_timeout_s=60, max_subscriptions=3)
    h = await harness(era)
    for number in range(3):
        await h.call("resources/subscribe", {"uri": f"test://{number}"})
    with pytest.raises(InvalidParams) as refused:
        await h.call("resources/subscribe", {"uri": "test://one-too-many"})
    assert refused.value.to_wire("legacy")["code"] == -32602
    assert "At most 3 resource subscriptions per session" in str(refused.value)
    assert "test://one-too-many" not in h.runtime.subscriptions.uris
    await h.call("resources/subscribe", {"uri": "test://0"})  # one it holds: still fine
    await h.call("resources/unsubscribe", {"uri": "test://0"})
    await h.call("resources/subscribe", {"uri": "test://one-too-many"})  # room again
    assert len(await era.store.subscriptions(h.session.id)) == 3


def test_the_cap_is_the_hubs() -> None:
    store = MemorySessionStore(max_sessions=1, idle_timeout_s=1)
    assert store.max_subscriptions == MAX_RESOURCE_SUBSCRIPTIONS


@pytest.mark.parametrize("uri", [None, "", "no-scheme", 5, "x:" + "a" * 2048])
async def test_subscribe_needs_a_uri(uri: Any) -> None:
    h = await harness()
    with pytest.raises(InvalidParams):
        await h.call("resources/subscribe", {"uri": uri})
    assert await h.era.store.subscriptions(h.session.id) == set()


async def test_list_pages_are_encoded_once_per_catalog_version() -> None:
    catalog = full_catalog()
    h = await harness(make_era(catalog))
    request = Request(1, "tools/list", {})
    context = h.era.context(h.session, request, h.exchange)
    first = await h.era.handle(h.session, h.runtime, request, context, None)
    assert await h.era.handle(h.session, h.runtime, request, context, None) is first
    # The same bytes the dispatcher's page encodes to: no envelope in this era.
    assert encode_result(1, first) == encode_result(
        1, h.era.dispatcher.list_page("tools/list", None)
    )
    catalog.tool(lambda: "x", name="another")
    listed = await h.call("tools/list")
    assert [tool["name"] for tool in listed["tools"]] == ["echo", "ask_name", "another"]
    with pytest.raises(InvalidParams):  # a cursor this list never issued
        await h.call("tools/list", {"cursor": "forged"})


async def test_shared_methods_go_through_the_dispatcher() -> None:
    h = await harness()
    listed = await h.call("tools/list")
    assert [tool["name"] for tool in listed["tools"]] == ["echo", "ask_name"]
    called = await h.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert called["content"] == [{"type": "text", "text": "hi"}]
    assert "resultType" not in called


def test_serves_follows_the_catalog() -> None:
    full = make_era()
    for method in (
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tools/call",
        "completion/complete",
    ):
        assert full.serves(method), method
    assert not full.serves("sampling/createMessage")
    assert not full.serves("subscriptions/listen")

    tools_only = Catalog("t", "1")

    @tools_only.tool
    def noop() -> str:
        return ""

    era = make_era(tools_only)
    assert era.serves("ping")
    assert era.serves("logging/setLevel")
    assert not era.serves("resources/subscribe")
    assert not era.serves("resources/read")

    bare = make_era(Catalog("bare", "1"))
    assert bare.serves("ping")
    assert not bare.serves("logging/setLevel")
    assert not bare.serves("tools/list")


@pytest.mark.parametrize(
    ("catalog", "method"),
    [
        (Catalog("bare", "1"), "logging/setLevel"),
        (Catalog("bare", "1"), "resources/subscribe"),
        (Catalog("bare", "1"), "tools/list"),
        (None, "no/such/method"),
        (None, "initialize"),
    ],
)
async def test_methods_not_served_are_method_not_found(catalog: Any, method: str) -> None:
    h = await harness(make_era(catalog))
    with pytest.raises(MethodNotFound) as raised:
        await h.call(method, {"level": "info", "uri": "test://docs"})
    assert raised.value.to_wire("legacy")["code"] == -32601


async def test_context_takes_the_progress_token_only_when_it_is_a_valid_id() -> None:
    h = await harness()
    for token, expected in (("tok", "tok"), (7, 7), (True, None), (1.5, None), (None, None)):
        request = Request(1, "tools/call", {"_meta": {"progressToken": token}})
        assert h.era.context(h.session, request, h.exchange).progress_token == expected
    no_meta = Request(1, "tools/call", {"_meta": "not an object"})
    assert h.era.context(h.session, no_meta, h.exchange).progress_token is None


# -- log levels ---------------------------------------------------------------------------------

EVERY_LEVEL: tuple[LogLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


def logging_catalog() -> Catalog:
    catalog = Catalog("legacy-logs", "1.0.0")

    @catalog.tool
    async def chatty(ctx: Context) -> str:
        """Logs one line at every level, then answers."""
        for level in EVERY_LEVEL:
            await ctx.log(level, f"{level} line")
        return "chatted"

    return catalog


async def logged_levels(h: Harness, meta: dict[str, Any] | None = None, id: int = 1) -> list[str]:
    """The levels of the log messages one call of ``chatty`` sends on its stream."""
    start = h.stream.last_seq
    params: dict[str, Any] = {"name": "chatty", "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    assert (await h.call("tools/call", params, id=id))["content"][0]["text"] == "chatted"
    messages = published(h.stream)[start:]
    assert all(message["method"] == "notifications/message" for message in messages)
    return [message["params"]["level"] for message in messages]


@pytest.mark.parametrize("default", EVERY_LEVEL)
async def test_before_set_level_logs_at_or_above_the_default_are_sent(default: str) -> None:
    h = await harness(make_era(logging_catalog(), default_log_level=default))
    assert await logged_levels(h) == list(EVERY_LEVEL[EVERY_LEVEL.index(default) :])


async def test_the_default_is_every_level_as_the_official_sdks_send() -> None:
    h = await harness(make_era(logging_catalog()))
    assert await logged_levels(h) == list(EVERY_LEVEL)


async def test_default_off_sends_no_logs_until_set_level() -> None:
    h = await harness(make_era(logging_catalog(), default_log_level=None))
    assert await logged_levels(h, id=1) == []
    assert await h.call("logging/setLevel", {"level": "error"}, id=2) == {}
    assert await logged_levels(h, id=3) == ["error", "critical", "alert", "emergency"]


async def test_set_level_replaces_the_default() -> None:
    h = await harness(make_era(logging_catalog(), default_log_level="info"))
    assert await h.call("logging/setLevel", {"level": "critical"}, id=1) == {}
    assert await logged_levels(h, id=2) == ["critical", "alert", "emergency"]
    assert await h.call("logging/setLevel", {"level": "debug"}, id=3) == {}
    assert await logged_levels(h, id=4) == list(EVERY_LEVEL)


@pytest.mark.parametrize("default", ["debug", None])
async def test_a_meta_log_level_wins_for_its_request_only(default: str | None) -> None:
    h = await harness(make_era(logging_catalog(), default_log_level=default))
    warning = {"io.modelcontextprotocol/logLevel": "warning"}
    before = await logged_levels(h, warning, id=1)
    assert before == ["warning", "error", "critical", "alert", "emergency"]
    assert await h.call("logging/setLevel", {"level": "alert"}, id=2) == {}
    assert await logged_levels(h, {"io.modelcontextprotocol/logLevel": "debug"}, id=3) == list(
        EVERY_LEVEL
    )
    assert await logged_levels(h, id=4) == ["alert", "emergency"]
    assert h.session.log_level == "alert"


@pytest.mark.parametrize("malformed", ["verbose", "WARNING", "", None, 3, ["info"]])
async def test_a_malformed_meta_log_level_is_ignored(malformed: Any) -> None:
    h = await harness(make_era(logging_catalog(), default_log_level="error"))
    meta = {"io.modelcontextprotocol/logLevel": malformed}
    assert await logged_levels(h, meta, id=1) == ["error", "critical", "alert", "emergency"]
    assert await h.call("logging/setLevel", {"level": "emergency"}, id=2) == {}
    assert await logged_levels(h, meta, id=3) == ["emergency"]


@pytest.mark.parametrize("level", ["verbose", "off", "INFO", ""])
def test_an_unknown_default_log_level_is_refused(level: str) -> None:
    with pytest.raises(ValueError, match="not a log level"):
        make_era(default_log_level=level)


# -- cancellation -------------------------------------------------------------------------------


async def test_cancel_stops_the_named_call() -> None:
    runtime = SessionRuntime("s", 8)
    numbered = asyncio.ensure_future(asyncio.sleep(30))
    named = asyncio.ensure_future(asyncio.sleep(30))
    runtime.inflight[7] = numbered
    runtime.inflight["seven"] = named
    await asyncio.sleep(0)
    assert LegacyEra.cancel(runtime, {"requestId": 7, "reason": "user gave up"}) is True
    await asyncio.sleep(0)
    assert numbered.cancelled()
    assert not named.done()
    assert LegacyEra.cancel(runtime, {"requestId": "seven"}) is True
    await asyncio.sleep(0)
    assert named.cancelled()
    # Cancelling what already ended does nothing.
    assert LegacyEra.cancel(runtime, {"requestId": 7}) is False


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"requestId": None},
        {"requestId": True},
        {"requestId": 7.0},
        {"requestId": [7]},
        {"requestId": {"id": 7}},
        {"requestId": "7"},
        {"requestId": 8},
    ],
)
async def test_cancel_ignores_malformed_and_unknown_ids(params: dict[str, Any]) -> None:
    runtime = SessionRuntime("s", 8)
    task = asyncio.ensure_future(asyncio.sleep(30))
    runtime.inflight[7] = task
    await asyncio.sleep(0)
    assert LegacyEra.cancel(runtime, params) is False
    await asyncio.sleep(0)
    assert not task.done()
    task.cancel()
