"""A real client: the official Python SDK (``mcp`` 2.3.0) against a live server, in both eras.

Each test drives ``mcp.Client`` over Streamable HTTP against a real uvicorn on 127.0.0.1 (an
ephemeral port, in a background thread) serving the ``probe`` catalog, the ``conformance``
catalog or a one-tool test catalog, once as a legacy client (``initialize``, ``Mcp-Session-Id``,
server-to-client requests on the call's stream, DELETE on close) and once as a 2026-07-28 client
(stateless, ``_meta`` on every request, input-required rounds). The SDK's HTTP client is an
``httpx2.AsyncClient`` with event hooks, so every test can also check what went over the wire.

SDK behaviour the tests rely on (read from ``mcp`` 2.3.0, see ``shared/conformance.md``):

- ``Client(mode="2026-07-28")`` sends no ``server/discover`` and synthesizes empty capabilities;
  ``client.session.send_discover(version)`` sends one. ``mode="auto"`` probes discover first.
- logs reach ``logging_callback`` on the 2026 wire only with ``Client(log_level=...)`` (stamped
  into every request's ``_meta``); the legacy client sends no level by itself (no
  ``logging/setLevel``, no ``_meta`` level), so until ``set_logging_level`` it gets what the
  server sends by default (``MCP_LEGACY_DEFAULT_LOG_LEVEL``, every level unless set).
- an ``InputRequiredResult`` is resolved by ``Client.call_tool``/``get_prompt``: each input
  request goes through the same elicitation/sampling/roots callbacks as a legacy
  server-to-client request (the callback's ``context.request_id`` is then the input key), and
  the call is sent again with ``inputResponses`` and the echoed ``requestState``.
- the legacy transport opens a GET stream after ``notifications/initialized``, resumes a
  dropped POST stream with GET + ``Last-Event-ID``, sends ``notifications/cancelled`` when a
  call times out, and sends DELETE when the client closes; on the 2026 wire a timed-out call
  is cancelled by closing its response stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError

from server import Catalog, Context
from server.app import Application, create_app
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import legacy_headers
from tests.support.polling import wait_until

LEGACY = "legacy"
MODERN = "2026-07-28"
ERAS = [LEGACY, MODERN]
LEGACY_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
PROBE_NAME = "mcp-http-server-probe"


# -- live servers ----------------------------------------------------------------------------


@contextlib.contextmanager
def serving(app: Application) -> Iterator[ServerThread]:
    """``app`` under uvicorn on 127.0.0.1, an ephemeral port; its ``url`` is the MCP endpoint."""
    live = ServerThread(app).start()
    live.url += "/mcp"
    try:
        yield live
    finally:
        live.stop()


# Set by the `hang` tool of the test catalog (it runs on the server's thread).
hang_started = threading.Event()
hang_cancelled = threading.Event()


def hang_catalog() -> Catalog:
    catalog = Catalog("sdk-client-test", "1.0.0")

    @catalog.tool
    async def hang(ctx: Context) -> str:
        """Reports progress, then waits until it is cancelled."""
        await ctx.report_progress(1, 2, "started")
        hang_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            hang_cancelled.set()
            raise
        return "finished"

    return catalog


@pytest.fixture(scope="module")
def probe() -> Iterator[ServerThread]:
    with serving(create_app(Settings(_env_file=None, catalog="probe"))) as live:
        yield live


@pytest.fixture(scope="module")
def conformance() -> Iterator[ServerThread]:
    with serving(create_app(Settings(_env_file=None, catalog="conformance"))) as live:
        yield live


@pytest.fixture(scope="module")
def hanging() -> Iterator[ServerThread]:
    with serving(create_app(Settings(_env_file=None), hang_catalog())) as live:
        yield live


# -- the SDK client, with the wire recorded --------------------------------------------------


@dataclass
class Wire:
    """Every HTTP request the SDK sent (with its JSON body) and every response status."""

    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    responses: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)

    async def on_request(self, request: httpx2.Request) -> None:
        body = json.loads(request.content) if request.method == "POST" else None
        self.requests.append((request.method, dict(request.headers), body))

    async def on_response(self, response: httpx2.Response) -> None:
        self.responses.append(
            (response.request.method, response.status_code, dict(response.headers))
        )

    def posted(self, method: str | None = None) -> list[dict[str, Any]]:
        """JSON bodies POSTed, optionally only requests/notifications of one method."""
        bodies = [body for verb, _, body in self.requests if verb == "POST"]
        return [body for body in bodies if method is None or body.get("method") == method]

    def headers_of(self, verb: str) -> list[dict[str, str]]:
        return [headers for method, headers, _ in self.requests if method == verb]

    def session_ids(self) -> set[str]:
        return {h["mcp-session-id"] for _, _, h in self.responses if "mcp-session-id" in h}


@contextlib.asynccontextmanager
async def connect(
    url: str, mode: str, *, terminate_on_close: bool = True, **options: Any
) -> AsyncIterator[tuple[Client, Wire]]:
    wire = Wire()
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(10, read=30),
        event_hooks={"request": [wire.on_request], "response": [wire.on_response]},
    )
    transport = streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close)
    options.setdefault("read_timeout_seconds", 10)
    async with http, Client(transport, mode=mode, **options) as client:
        yield client, wire


async def set_legacy_log_level(client: Client, level: types.LoggingLevel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in 2026-07-28, the legacy way to opt in
        await client.set_logging_level(level)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def accept(content: dict[str, Any]) -> Any:
    async def callback(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return types.ElicitResult(action="accept", content=content)

    return callback


async def model_says_paris(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris"), model="test-model"
    )


async def two_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(
        roots=[types.Root(uri="file:///work/a"), types.Root(uri="file:///work/b")]
    )


# -- connecting ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_legacy_client_initializes_a_session(probe: ServerThread) -> None:
    async with connect(probe.url, LEGACY) as (client, wire):
        assert client.protocol_version == LEGACY_VERSION
        assert client.server_info is not None
        assert client.server_info.name == PROBE_NAME
        assert client.server_info.version == "0.1.0"
        capabilities = client.server_capabilities
        assert capabilities.tools is not None
        assert capabilities.tools.list_changed
        assert capabilities.resources is not None
        assert capabilities.resources.subscribe
        assert capabilities.prompts is not None
        assert capabilities.logging is not None
        assert capabilities.completions is not None
        assert (client.instructions or "").startswith("This is a probe server")
        assert wire.posted()[0]["method"] == "initialize"
        [session_id] = wire.session_ids()
        # The SDK sends these two from its writer task, after initialize returned.
        await wait_until(lambda: len(wire.posted("notifications/initialized")) == 1)
        await wait_until(lambda: bool(wire.headers_of("GET")))  # the standalone stream
        assert probe.app.sessions.count() >= 1
    for verb, headers, _ in wire.requests[1:]:
        assert headers["mcp-session-id"] == session_id, verb
        assert headers["mcp-protocol-version"] == LEGACY_VERSION, verb


@pytest.mark.anyio
async def test_modern_client_discovers_without_a_session(probe: ServerThread) -> None:
    async with connect(probe.url, MODERN) as (client, wire):
        assert client.protocol_version == MODERN
        discover = await client.session.send_discover(MODERN)
        assert discover["resultType"] == "complete"
        assert MODERN in discover["supportedVersions"]
        assert {"tools", "prompts", "resources", "logging", "completions"} <= set(
            discover["capabilities"]
        )
        assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == PROBE_NAME
        assert isinstance(discover["ttlMs"], int)
        assert discover["ttlMs"] >= 0
        assert discover["cacheScope"] in ("public", "private")
        await client.list_tools()
    assert not wire.posted("initialize")
    assert not wire.session_ids()
    assert not wire.headers_of("GET")
    assert not wire.headers_of("DELETE")
    for _, headers, body in wire.requests:
        assert headers["mcp-protocol-version"] == MODERN
        assert headers["mcp-method"] == body["method"]
        assert body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN


@pytest.mark.anyio
async def test_auto_mode_picks_the_modern_era(probe: ServerThread) -> None:
    async with connect(probe.url, "auto") as (client, wire):
        assert client.protocol_version == MODERN
        assert client.server_info is not None
        assert client.server_info.name == PROBE_NAME
        assert client.server_capabilities.tools is not None
        result = await client.call_tool("add", {"a": 1, "b": 1})
        assert result.structured_content == {"a": 1.0, "b": 1.0, "sum": 2.0}
    assert wire.posted()[0]["method"] == "server/discover"
    assert not wire.posted("initialize")


# -- tools, resources, prompts, completion ---------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_list_and_call_tools(probe: ServerThread, era: str) -> None:
    async with connect(probe.url, era) as (client, _):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"echo", "add", "count_slowly", "ask_name", "fail"} <= set(tools)
        add = tools["add"]
        assert add.title == "Add two numbers"
        assert add.output_schema is not None
        assert set(add.output_schema["properties"]) == {"a", "b", "sum"}
        assert add.annotations is not None
        assert add.annotations.read_only_hint is True

        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.is_error is False
        assert result.structured_content == {"a": 2.0, "b": 3.0, "sum": 5.0}
        assert json.loads(text_of(result)) == {"a": 2.0, "b": 3.0, "sum": 5.0}

        assert text_of(await client.call_tool("echo", {"text": "héllo wörld"})) == "héllo wörld"

        failed = await client.call_tool("fail", {"message": "on purpose"})
        assert failed.is_error is True
        assert text_of(failed) == "on purpose"

        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert unknown.value.code == -32602


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_read_resources_and_templates(probe: ServerThread, era: str) -> None:
    async with connect(probe.url, era) as (client, _):
        listed = {str(resource.uri) for resource in (await client.list_resources()).resources}
        assert {"probe://readme", "probe://logo.png", "probe://counter"} <= listed

        readme = (await client.read_resource("probe://readme")).contents[0]
        assert isinstance(readme, types.TextResourceContents)
        assert readme.mime_type == "text/markdown"
        assert readme.text.startswith("# MCP probe server")

        logo = (await client.read_resource("probe://logo.png")).contents[0]
        assert isinstance(logo, types.BlobResourceContents)
        assert base64.b64decode(logo.blob).startswith(b"\x89PNG")

        templates = (await client.list_resource_templates()).resource_templates
        assert [(t.name, t.uri_template) for t in templates] == [("echo", "probe://echo/{text}")]
        echoed = (await client.read_resource("probe://echo/hello-there")).contents[0]
        assert isinstance(echoed, types.TextResourceContents)
        assert (str(echoed.uri), echoed.text) == ("probe://echo/hello-there", "hello-there")

        with pytest.raises(MCPError) as missing:
            await client.read_resource("probe://missing")
        # Resource not found: -32002 on the legacy wire, -32602 in 2026-07-28 (SEP-2164).
        assert missing.value.code == (-32002 if era == LEGACY else -32602)
        assert missing.value.error.data == {"uri": "probe://missing"}


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_list_and_get_prompts(probe: ServerThread, era: str) -> None:
    async with connect(probe.url, era) as (client, _):
        prompts = {prompt.name: prompt for prompt in (await client.list_prompts()).prompts}
        assert set(prompts) == {"greet", "summarize"}
        arguments = prompts["summarize"].arguments or []
        assert [(a.name, a.required) for a in arguments] == [("topic", True), ("style", False)]

        got = await client.get_prompt("summarize", {"topic": "owls", "style": "detailed"})
        assert [message.role for message in got.messages] == ["user", "assistant", "user"]
        first = got.messages[0].content
        assert isinstance(first, types.TextContent)
        assert first.text == "Summarize owls in a detailed style."

        with pytest.raises(MCPError) as missing:
            await client.get_prompt("greet", {})
        assert missing.value.code == -32602


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_complete_prompt_and_template_arguments(probe: ServerThread, era: str) -> None:
    async with connect(probe.url, era) as (client, _):
        style = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "style", "value": "b"},
        )
        assert style.completion.values == ["brief", "bullet points"]
        template = types.ResourceTemplateReference(type="ref/resource", uri="probe://echo/{text}")
        words = await client.complete(template, {"name": "text", "value": "wo"})
        assert words.completion.values == ["world", "wonder"]
        everything = await client.complete(template, {"name": "text", "value": ""})
        assert everything.completion.values == ["hello", "help", "world", "wonder"]


# -- notifications ---------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_progress_and_logs_from_a_tool(probe: ServerThread, era: str) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    modern_level: dict[str, Any] = {"log_level": "info"} if era == MODERN else {}
    async with connect(probe.url, era, logging_callback=on_log, **modern_level) as (client, wire):
        if era == LEGACY:
            await set_legacy_log_level(client, "info")
        result = await client.call_tool(
            "count_slowly", {"steps": 4, "delay_ms": 10}, progress_callback=on_progress
        )
        assert text_of(result) == "Counted to 4."
        await wait_until(lambda: len(logs) == 4 and len(reported) == 4)
    assert reported == [(float(n), 4.0, f"step {n} of 4") for n in range(1, 5)]
    assert [params.data for params in logs] == [f"counted {n}" for n in range(1, 5)]
    assert {(params.level, params.logger) for params in logs} == {("info", "count_slowly")}
    [call] = wire.posted("tools/call")
    assert call["params"]["_meta"]["progressToken"] is not None
    streamed = [h for verb, status, h in wire.responses if verb == "POST" and status == 200]
    assert any(h.get("content-type", "").startswith("text/event-stream") for h in streamed)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_no_logs_below_the_requested_level(probe: ServerThread, era: str) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    reported: list[float] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    modern_level: dict[str, Any] = {"log_level": "warning"} if era == MODERN else {}
    async with connect(probe.url, era, logging_callback=on_log, **modern_level) as (client, _):
        if era == LEGACY:
            await set_legacy_log_level(client, "warning")
        await client.call_tool(
            "count_slowly", {"steps": 2, "delay_ms": 0}, progress_callback=on_progress
        )
        await wait_until(lambda: len(reported) == 2)
        await anyio.sleep(0.1)
    assert logs == []


@pytest.mark.anyio
async def test_legacy_client_gets_logs_without_set_level(conformance: ServerThread) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with connect(conformance.url, LEGACY, logging_callback=on_log) as (client, wire):
        result = await client.call_tool("test_logging_tool", {})
        assert text_of(result) == "Logged at debug, info and warning."
        await wait_until(lambda: len(logs) == 3)
    assert [(params.level, params.data) for params in logs] == [
        (level, f"{level} message from test_logging_tool") for level in ("debug", "info", "warning")
    ]
    assert wire.posted("logging/setLevel") == []


@pytest.mark.anyio
async def test_legacy_client_meta_log_level_holds_for_its_call(conformance: ServerThread) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with connect(conformance.url, LEGACY, logging_callback=on_log) as (client, wire):
        await client.call_tool(
            "test_logging_tool",
            {},
            meta=cast(types.RequestParamsMeta, {"io.modelcontextprotocol/logLevel": "warning"}),
        )
        await client.call_tool("test_logging_tool", {})
        await wait_until(lambda: len(logs) == 4)
        await anyio.sleep(0.1)
    assert [params.level for params in logs] == ["warning", "debug", "info", "warning"]
    first, _ = wire.posted("tools/call")
    assert first["params"]["_meta"]["io.modelcontextprotocol/logLevel"] == "warning"


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_concurrent_calls_keep_their_progress_apart(probe: ServerThread, era: str) -> None:
    seen: dict[int, list[float]] = {steps: [] for steps in range(1, 6)}

    def collect(steps: int) -> Any:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            assert total == steps
            seen[steps].append(value)

        return on_progress

    async with connect(probe.url, era) as (client, _):
        results = await asyncio.gather(
            *(
                client.call_tool(
                    "count_slowly",
                    {"steps": steps, "delay_ms": 20},
                    progress_callback=collect(steps),
                )
                for steps in seen
            )
        )
        await wait_until(lambda: all(len(values) == steps for steps, values in seen.items()))
    assert [text_of(result) for result in results] == [f"Counted to {n}." for n in seen]
    assert seen == {steps: [float(n) for n in range(1, steps + 1)] for steps in seen}


@pytest.mark.anyio
async def test_modern_client_without_log_level_gets_no_logs(probe: ServerThread) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async with connect(probe.url, MODERN, logging_callback=on_log) as (client, wire):
        result = await client.call_tool("count_slowly", {"steps": 2, "delay_ms": 0})
        assert text_of(result) == "Counted to 2."
        await anyio.sleep(0.1)
    assert logs == []
    [call] = wire.posted("tools/call")
    assert "io.modelcontextprotocol/logLevel" not in call["params"]["_meta"]


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_resource_updates_reach_the_client(probe: ServerThread, era: str) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with connect(probe.url, era, message_handler=on_message) as (client, wire):
        if era == LEGACY:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # resources/subscribe: legacy only
                await client.subscribe_resource("probe://readme")
            # Unsolicited notifications travel on the GET stream: wait until it is open.
            [session_id] = wire.session_ids()
            await wait_until(lambda: _standalone_open(probe.app, session_id))
            await client.call_tool("touch_resource", {"uri": "probe://readme"})
            await wait_until(lambda: updates == ["probe://readme"])
        else:
            async with client.listen(resource_subscriptions=["probe://readme"]) as subscription:
                assert subscription.honored is not None
                assert subscription.honored.resource_subscriptions == ["probe://readme"]
                await client.call_tool("touch_resource", {"uri": "probe://readme"})
                with anyio.fail_after(3):
                    event = await subscription.__anext__()
                assert event == ResourceUpdated(uri="probe://readme")


def _standalone_open(app: Application, session_id: str) -> bool:
    runtime = app.runtimes.peek(session_id)
    return runtime is not None and runtime.standalone_followers > 0


@pytest.mark.anyio
async def test_modern_listen_sees_tool_list_changes(conformance: ServerThread) -> None:
    async with (
        connect(conformance.url, MODERN) as (client, _),
        client.listen(tools_list_changed=True) as subscription,
    ):
        await client.call_tool("test_trigger_tool_change", {})
        with anyio.fail_after(3):
            assert await subscription.__anext__() == ToolsListChanged()


# -- asking the client -----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_elicitation_answer_reaches_the_tool(probe: ServerThread, era: str) -> None:
    asked: list[tuple[Any, types.ElicitRequestParams]] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append((context.request_id, params))
        return types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async with connect(probe.url, era, elicitation_callback=on_elicit) as (client, wire):
        result = await client.call_tool("ask_name", {})
        assert text_of(result) == "Hello, Ada Lovelace!"
    [(request_id, params)] = asked
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == "What is your name?"
    assert params.requested_schema["required"] == ["name"]
    calls = wire.posted("tools/call")
    if era == LEGACY:
        # A real server-to-client request on the call's stream, answered by a POST.
        assert isinstance(request_id, str)
        assert request_id.startswith("srv-")
        [answer] = [body for body in wire.posted() if body.get("id") == request_id]
        assert answer["result"] == {"action": "accept", "content": {"name": "Ada Lovelace"}}
        assert len(calls) == 1
    else:
        # An input-required result: the SDK answers by calling again with inputResponses.
        assert request_id == "name"
        assert not [body for body in wire.posted() if "result" in body]
        first, second = calls
        assert "inputResponses" not in first["params"]
        assert second["params"]["name"] == "ask_name"
        assert second["params"]["inputResponses"]["name"]["action"] == "accept"
        assert second["params"]["inputResponses"]["name"]["content"] == {"name": "Ada Lovelace"}
        assert isinstance(second["params"]["requestState"], str)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_elicitation_refused(probe: ServerThread, era: str, action: str) -> None:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action=action)

    async with connect(probe.url, era, elicitation_callback=on_elicit) as (client, _):
        result = await client.call_tool("ask_name", {})
        assert text_of(result) == f"No name given ({action})."


@pytest.mark.anyio
async def test_modern_tool_needing_an_undeclared_capability(probe: ServerThread) -> None:
    async with connect(probe.url, MODERN) as (client, _):
        with pytest.raises(MCPError) as refused:
            await client.call_tool("ask_name", {})
    assert refused.value.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}}


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_sampling_and_roots_callbacks(probe: ServerThread, era: str) -> None:
    async with connect(
        probe.url, era, sampling_callback=model_says_paris, list_roots_callback=two_roots
    ) as (client, _):
        sampled = await client.call_tool("ask_model", {"question": "Capital of France?"})
        assert text_of(sampled) == "The model said: Paris"
        roots = await client.call_tool("show_roots", {})
        assert text_of(roots) == "file:///work/a\nfile:///work/b"


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_several_questions_and_several_rounds(conformance: ServerThread, era: str) -> None:
    answers = {
        "What is your name?": {"name": "Ada"},
        "Step 1: What is your name?": {"name": "Grace"},
        "Step 2: What is your favorite color?": {"color": "teal"},
        "What context should the prompt use?": {"context": "owls"},
    }

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content=answers[params.message])

    async with connect(
        conformance.url,
        era,
        elicitation_callback=on_elicit,
        sampling_callback=model_says_paris,
        list_roots_callback=two_roots,
    ) as (client, wire):
        several = await client.call_tool("test_input_required_result_multiple_inputs", {})
        assert text_of(several) == "name=Ada, greeting=Paris, roots=2"
        rounds = await client.call_tool("test_input_required_result_multi_round", {})
        assert text_of(rounds) == "Grace likes teal."
        prompt = await client.get_prompt("test_input_required_result_prompt", {})
        content = prompt.messages[0].content
        assert isinstance(content, types.TextContent)
        assert content.text == "Use the following context: owls"
    if era == MODERN:
        # One call, then one round per step; a new requestState every round.
        multi_round = [
            body["params"]
            for body in wire.posted("tools/call")
            if body["params"]["name"] == "test_input_required_result_multi_round"
        ]
        assert len(multi_round) == 3
        states = [params.get("requestState") for params in multi_round]
        assert states[0] is None
        assert states[1] != states[2]


@pytest.mark.anyio
async def test_modern_request_state_survives_the_round_trip(conformance: ServerThread) -> None:
    confirm = accept({"ok": True})
    async with connect(conformance.url, MODERN, elicitation_callback=confirm) as (client, _):
        result = await client.call_tool("test_input_required_result_request_state", {})
    assert text_of(result) == "state-ok: confirmation received (accept)"


# -- transport: headers, resumption, cancellation, session end ------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_x_mcp_header_parameter(conformance: ServerThread, era: str) -> None:
    async with connect(conformance.url, era) as (client, wire):
        await client.list_tools()  # the SDK learns which arguments it mirrors into headers
        result = await client.call_tool("test_x_mcp_header", {"region": "eu-west"})
        assert text_of(result) == "region=eu-west"
    [headers] = [
        h
        for verb, h, body in wire.requests
        if verb == "POST" and body.get("params", {}).get("name") == "test_x_mcp_header"
    ]
    if era == MODERN:
        assert headers["mcp-param-region"] == "eu-west"
        assert headers["mcp-name"] == "test_x_mcp_header"


@pytest.mark.anyio
async def test_modern_client_recovers_from_a_header_mismatch(conformance: ServerThread) -> None:
    # Not listed yet, the SDK cannot know `region` goes into Mcp-Param-Region: the server
    # must refuse the call (400, -32020), and the SDK re-lists and sends it again.
    async with connect(conformance.url, MODERN) as (client, wire):
        result = await client.call_tool("test_x_mcp_header", {"region": "eu-west"})
        assert text_of(result) == "region=eu-west"
    sent = [(h.get("mcp-method"), h.get("mcp-param-region")) for _, h, _ in wire.requests]
    assert sent == [("tools/call", None), ("tools/list", None), ("tools/call", "eu-west")]
    assert [status for _, status, _ in wire.responses] == [400, 200, 200]


@pytest.mark.anyio
async def test_legacy_client_resumes_a_dropped_stream(conformance: ServerThread) -> None:
    async with connect(conformance.url, LEGACY) as (client, wire):
        result = await client.call_tool("test_reconnection", {})
        assert text_of(result) == "Reconnection test completed"
    resumed = [h for h in wire.headers_of("GET") if "last-event-id" in h]
    assert resumed, "the SDK should have resumed the call's stream with Last-Event-ID"


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_timed_out_call_is_cancelled_on_the_server(hanging: ServerThread, era: str) -> None:
    hang_started.clear()
    hang_cancelled.clear()
    async with connect(hanging.url, era) as (client, wire):
        with pytest.raises(MCPError) as timed_out:
            await client.call_tool("hang", {}, read_timeout_seconds=0.5)
        assert "timed out" in timed_out.value.error.message
        assert hang_started.is_set()
        assert await anyio.to_thread.run_sync(hang_cancelled.wait, 3)
        cancels = wire.posted("notifications/cancelled")
        if era == LEGACY:
            [call] = wire.posted("tools/call")
            assert [c["params"]["requestId"] for c in cancels] == [call["id"]]
            [session_id] = wire.session_ids()
            runtime = hanging.app.runtimes.peek(session_id)
            assert runtime is not None
            await wait_until(lambda: not runtime.inflight)
        else:
            assert cancels == []  # 2026: closing the response stream is the cancellation


@pytest.mark.anyio
async def test_legacy_close_deletes_the_session(probe: ServerThread) -> None:
    async with connect(probe.url, LEGACY) as (client, wire):
        await client.call_tool("echo", {"text": "hi"})
        [session_id] = wire.session_ids()
        assert probe.app.runtimes.peek(session_id) is not None
    [delete] = wire.headers_of("DELETE")
    assert delete["mcp-session-id"] == session_id
    assert [status for verb, status, _ in wire.responses if verb == "DELETE"] == [200]
    assert probe.app.runtimes.peek(session_id) is None

    headers = legacy_headers(session_id, LEGACY_VERSION, Content_Type=None)
    async with httpx.AsyncClient(timeout=5) as http:
        posted = await http.post(
            probe.url, json={"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, headers=headers
        )
        assert posted.status_code == 404
        assert posted.json()["id"] == 7
        assert "error" in posted.json()
        assert (await http.get(probe.url, headers=headers)).status_code == 404
        assert (await http.delete(probe.url, headers=headers)).status_code == 404


@pytest.mark.anyio
async def test_idle_legacy_session_expires_with_everything_it_held() -> None:
    settings = Settings(_env_file=None, catalog="probe", session_idle_timeout_s=0.5)
    with serving(create_app(settings)) as live:
        async with connect(live.url, LEGACY, terminate_on_close=False) as (client, wire):
            await client.call_tool("count_slowly", {"steps": 1, "delay_ms": 0})
            [session_id] = wire.session_ids()
        assert not wire.headers_of("DELETE")
        # Watch the server, not the wire: a request in the window between the idle timeout
        # and the next sweep would take the other expiry path (the test below).
        await wait_until(
            lambda: live.app.sessions.count() == 0 and live.app.runtimes.peek(session_id) is None
        )
        async with httpx.AsyncClient(timeout=5) as http:
            posted = await http.post(
                live.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers=legacy_headers(session_id, version=None, Content_Type=None),
            )
        assert posted.status_code == 404


@pytest.mark.anyio
async def test_expired_session_found_by_a_request_ends_its_runtime(probe: ServerThread) -> None:
    """The store finds the session expired on the request itself (before any sweep): the
    404 must release the session's runtime too, or it stays in ``Runtimes`` for ever."""
    async with connect(probe.url, LEGACY, terminate_on_close=False) as (client, wire):
        await client.call_tool("echo", {"text": "hi"})
        [session_id] = wire.session_ids()
    # A busy session never expires: wait until the server has seen the client's GET stream
    # close (under load that can take a moment after the client is gone).
    runtime = probe.app.runtimes.peek(session_id)
    await wait_until(lambda: runtime is None or not runtime.busy())
    # Make it idle past the timeout before the periodic sweep (every 30 s here) gets to it.
    probe.app.sessions._sessions[session_id].last_seen -= 7200  # type: ignore[attr-defined]
    async with httpx.AsyncClient(timeout=5) as http:
        posted = await http.post(
            probe.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers=legacy_headers(session_id, version=None, Content_Type=None),
        )
    assert posted.status_code == 404
    assert probe.app.runtimes.peek(session_id) is None
