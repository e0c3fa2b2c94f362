"""The legacy era over HTTP: sessions, headers, JSON or resumable SSE, the GET stream, DELETE.

Plain JSON exchanges run in-process through httpx's ASGITransport (the app's lifespan driven
by hand). Anything that streams runs against a real uvicorn (``server.serving.server_for``)
in a background thread: the module's shared server, or a fresh one where a test needs its own
settings. The test catalog's tools run on the server's event loop and report what happened to
them through thread-safe events.
"""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest

from server import Catalog, Context
from server.app import Application, create_app
from server.errors import ServiceUnavailable
from server.legacy.eventstream import parse_event_id
from tests.support import legacy_http
from tests.support.core_helpers import add_toggle_tool
from tests.support.legacy_http import RETRY_MS, asgi_client, running, settings
from tests.support.live_server import ServerThread as Live
from tests.support.mcp_client import (
    BOTH,
    Frame,
    LegacySession,
    legacy,
    legacy_session,
    modern_headers,
    modern_meta,
    notification,
    tool_call,
)
from tests.support.polling import wait_until

# Real uvicorn servers for every stream: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

VERSION = "2025-11-25"
ALL_CAPS: dict[str, Any] = {"sampling": {}, "elicitation": {}, "roots": {}}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


class Signals:
    """What the tools saw, across the server thread and the test thread."""

    def __init__(self) -> None:
        self.slow_started = threading.Event()
        self.slow_cancelled = threading.Event()
        self.slow_finished = threading.Event()
        self.gate_reached = threading.Event()
        self.gate = threading.Event()


signals = Signals()


@pytest.fixture(autouse=True)
def fresh_signals() -> None:
    global signals  # noqa: PLW0603
    signals = Signals()


def legacy_catalog() -> Catalog:
    catalog = Catalog("legacy-http-test", "1.0.0", instructions="Test server.")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def chatty(ctx: Context) -> str:
        """Logs at three levels, then answers."""
        await ctx.debug("debug line")
        await ctx.info("info line")
        await ctx.warning("warning line")
        return "chatted"

    @catalog.tool
    async def count(ctx: Context, steps: int = 3) -> str:
        """Reports progress at every step."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        return f"counted to {steps}"

    @catalog.tool
    async def ask_name(ctx: Context) -> str:
        """Elicits a name."""
        answer = await ctx.elicit("Your name?", NAME_SCHEMA)
        return f"Hello {(answer.content or {}).get('name')} ({answer.action})"

    @catalog.tool
    async def sample(ctx: Context) -> str:
        """Asks the client's model."""
        answer = await ctx.sample("Say hi", 20)
        return f"model said {answer['content']['text']}"

    @catalog.tool
    async def slow(ctx: Context) -> str:
        """Reports progress, then waits until cancelled."""
        await ctx.report_progress(1, 2, "started")
        signals.slow_started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            signals.slow_cancelled.set()
            raise
        signals.slow_finished.set()
        return "finished"

    @catalog.tool
    async def gated(ctx: Context) -> str:
        """Reports progress, waits for the test's gate, reports again and answers."""
        mine = signals
        await ctx.report_progress(1, 2, "before the gate")
        mine.gate_reached.set()
        deadline = time.monotonic() + 5
        while not mine.gate.is_set() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await ctx.report_progress(2, 2, "after the gate")
        return "through the gate"

    @catalog.tool
    async def reconnect(ctx: Context) -> str:
        """Closes its own SSE connection mid-call (conformance test_reconnection)."""
        await asyncio.sleep(0.05)
        ctx.close_stream()
        await asyncio.sleep(0.2)
        return "Reconnection test completed"

    add_change_tools(catalog)
    return catalog


def add_change_tools(catalog: Catalog) -> None:
    """Tools that change the catalog, and what they change."""

    add_toggle_tool(catalog)

    @catalog.tool
    async def touch(uri: str) -> str:
        """Tells subscribers that ``uri`` changed."""
        catalog.notify_resource_updated(uri)
        return f"touched {uri}"

    @catalog.resource("test://docs")
    def docs() -> str:
        """Docs."""
        return "docs"

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"


# -- in-process (ASGI) --------------------------------------------------------------------------


@pytest.fixture
async def app() -> AsyncIterator[Application]:
    application = create_app(settings(), legacy_catalog())
    async with application.lifespan(application.starlette):
        yield application


http = legacy_http.http  # the in-process client, over app
net = legacy_http.net  # the client over a real socket, over live


# -- a real uvicorn in a thread -----------------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with running(create_app(settings(), legacy_catalog())) as server:
        yield server


def is_visible_ascii(text: str) -> bool:
    return bool(text) and all(0x21 <= ord(char) <= 0x7E for char in text)


def stream_of(frame: Frame) -> str:
    assert frame.id is not None
    parsed = parse_event_id(frame.id)
    assert parsed is not None, frame.id
    return parsed[0]


# == sessions and headers (in-process) ==========================================================


async def test_initialize_answers_json_with_a_visible_ascii_session_id(
    http: httpx.AsyncClient,
) -> None:
    message = legacy(
        "initialize",
        {
            "protocolVersion": VERSION,
            "capabilities": {"sampling": {}},
            "clientInfo": {"name": "c", "version": "1"},
        },
        id="init",
    )
    response = await http.post("/mcp", json=message, headers={"Accept": BOTH})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    session_id = response.headers["mcp-session-id"]
    assert is_visible_ascii(session_id)
    assert len(session_id) >= 32
    body = response.json()
    assert body["id"] == "init"
    assert body["result"] == {
        "protocolVersion": VERSION,
        "capabilities": {
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "logging": {},
        },
        "serverInfo": {"name": "legacy-http-test", "version": "1.0.0"},
        "instructions": "Test server.",
    }
    again = await http.post("/mcp", json=message, headers={"Accept": BOTH})
    assert again.headers["mcp-session-id"] != session_id


async def test_initialize_with_an_unknown_version_answers_with_the_newest(
    http: httpx.AsyncClient,
) -> None:
    message = legacy("initialize", {"protocolVersion": "2099-01-01", "capabilities": {}})
    response = await http.post("/mcp", json=message, headers={"Accept": BOTH})
    assert response.status_code == 200
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"


async def test_initialized_notification_is_202_and_marks_the_session(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = LegacySession(http)
    await client.initialize()  # asserts the 202
    assert client.session_id is not None
    stored = await app.sessions.get(client.session_id)
    assert stored is not None
    assert stored.initialized
    response = await client.post(notification("notifications/initialized"))
    assert response.status_code == 202
    assert response.content == b""


async def test_ping_works_without_a_session() -> None:
    application = create_app(settings(), legacy_catalog())
    async with asgi_client(application) as http:
        response = await http.post("/mcp", json=legacy("ping", id="p"), headers={"Accept": BOTH})
    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert "mcp-session-id" not in response.headers
    assert application.sessions.count() == 0


async def test_ping_in_a_session_is_an_empty_result(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    assert (await client.call("ping"))["result"] == {}


@pytest.mark.parametrize(
    "message",
    [
        legacy("tools/list"),
        notification("notifications/initialized"),
        {"jsonrpc": "2.0", "id": "srv-1", "result": {}},
    ],
    ids=["request", "notification", "response"],
)
async def test_messages_without_a_session_id_are_400(
    http: httpx.AsyncClient, message: dict[str, Any]
) -> None:
    response = await http.post("/mcp", json=message, headers={"Accept": BOTH})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


async def test_request_without_a_session_id_says_what_is_missing(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/mcp", json=legacy("tools/list", id=9), headers={"Accept": BOTH})
    assert response.status_code == 400
    body = response.json()
    assert body["id"] == 9
    assert "Mcp-Session-Id" in body["error"]["message"]


async def test_get_and_delete_without_a_session_id_are_400() -> None:
    # With the HTTP+SSE transport on, such a GET opens its stream (tests/transport/test_legacy_sse).
    application = create_app(settings(sse_transport=False), legacy_catalog())
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        get = await http.get("/mcp", headers={"Accept": "text/event-stream"})
        assert get.status_code == 400
        delete = await http.delete("/mcp")
        assert delete.status_code == 400


async def test_a_get_stream_asked_of_a_stopping_server_ends_at_once() -> None:
    # Issue 35: a stopping replica keeps its idle kept-alive connections open a moment, so a
    # proxy may still send it a GET (a resume); that stream held the stop until its deadline
    # (then a reset: 502s). It ends at once, as those open at the stop did: resume elsewhere.
    application = create_app(settings(), legacy_catalog())
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        session = await legacy_session(http)
        application.begin_shutdown()
        with anyio.fail_after(5):
            get = await http.get("/mcp", headers=session.headers("text/event-stream"))
        assert get.status_code == 200, get.text
        assert get.headers["content-type"] == "text/event-stream"
        assert get.text == ""


async def test_unknown_session_is_404_for_every_method(http: httpx.AsyncClient) -> None:
    client = LegacySession(http)
    client.session_id = "no-such-session"
    for message in (
        legacy("tools/list"),
        legacy("ping"),
        notification("notifications/initialized"),
        {"jsonrpc": "2.0", "id": "srv-1", "result": {}},
        [legacy("ping")],
    ):
        response = await client.post(message)
        assert response.status_code == 404, message
        assert response.json()["error"]["code"] == -32600
        assert "Session not found" in response.json()["error"]["message"]
    get = await http.get("/mcp", headers=client.headers("text/event-stream"))
    assert get.status_code == 404
    delete = await http.delete("/mcp", headers=client.headers())
    assert delete.status_code == 404


@pytest.mark.parametrize(
    "session_id", ["a:b", "x" * 65, "sess*ion", "a b", "{sid}", "%2F"], ids=repr
)
async def test_a_session_id_this_server_cannot_have_made_is_400_for_every_method(
    app: Application, http: httpx.AsyncClient, session_id: str
) -> None:
    client = LegacySession(http)
    client.session_id = session_id
    for message in (legacy("tools/list"), notification("notifications/initialized")):
        response = await client.post(message)
        assert response.status_code == 400, message
        error = response.json()["error"]
        assert error["code"] == -32600
        assert "Mcp-Session-Id header is not a session id of this server" in error["message"]
    for method in ("GET", "DELETE"):
        response = await http.request(method, "/mcp", headers=client.headers("text/event-stream"))
        assert response.status_code == 400, method
    assert len(app.runtimes) == 0  # nothing was made for it


async def test_delete_ends_the_session_and_its_runtime(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    assert client.session_id is not None
    await client.call("ping")
    assert app.runtimes.peek(client.session_id) is not None
    deleted = await http.delete("/mcp", headers=client.headers())
    assert 200 <= deleted.status_code < 300
    assert app.runtimes.peek(client.session_id) is None
    assert (await client.post(legacy("ping"))).status_code == 404
    assert (await http.delete("/mcp", headers=client.headers())).status_code == 404


async def test_protocol_version_header_may_be_missing(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    response = await client.post(legacy("tools/list"), MCP_Protocol_Version=None)
    assert response.status_code == 200
    assert "tools" in response.json()["result"]


@pytest.mark.parametrize("version", ["2024-01-01", "2025-11-24", "garbage"])
async def test_unsupported_protocol_version_header_in_a_session_is_400(
    http: httpx.AsyncClient, version: str
) -> None:
    client = await legacy_session(http)
    for message in (legacy("tools/list"), notification("notifications/initialized")):
        response = await client.post(message, MCP_Protocol_Version=version)
        assert response.status_code == 400, message
        error = response.json()["error"]
        assert error["code"] == -32600
        assert "MCP-Protocol-Version" in error["message"]


async def test_session_id_on_a_request_with_modern_meta_is_ignored(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http)
    params = {"name": "echo", "arguments": {"text": "hi"}, "_meta": modern_meta()}
    for session_id in (client.session_id, "no-such-session"):
        assert session_id is not None
        message = legacy("tools/call", params)
        response = await http.post(
            "/mcp", json=message, headers=modern_headers(message, Mcp_Session_Id=session_id)
        )
        assert response.status_code == 200, response.text
        assert "mcp-session-id" not in response.headers
        result = response.json()["result"]
        assert result["resultType"] == "complete"
        assert result["content"] == [{"type": "text", "text": "hi"}]
    assert app.sessions.count() == 1


async def test_resource_not_found_is_32002_with_the_uri(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    body = await client.call("resources/read", {"uri": "test://missing"})
    assert body["error"]["code"] == -32002
    assert body["error"]["data"] == {"uri": "test://missing"}
    found = await client.call("resources/read", {"uri": "test://docs"})
    assert found["result"]["contents"][0]["text"] == "docs"


@pytest.mark.parametrize("method", ["no/such/method", "tasks/list", "subscriptions/listen"])
async def test_unknown_method_is_32601_on_http_200(http: httpx.AsyncClient, method: str) -> None:
    client = await legacy_session(http)
    body = await client.call(method)
    assert body["error"]["code"] == -32601
    assert "result" not in body


async def test_unknown_tool_is_a_32602_protocol_error(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    body = await client.call("tools/call", {"name": "nope", "arguments": {}})
    assert body["error"]["code"] == -32602


async def test_plain_calls_answer_json_without_the_modern_envelope(
    http: httpx.AsyncClient,
) -> None:
    client = await legacy_session(http)
    listed = await client.call("tools/list")
    assert "echo" in [tool["name"] for tool in listed["result"]["tools"]]
    assert "resultType" not in listed["result"]
    called = await client.call("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert called["result"]["content"] == [{"type": "text", "text": "x"}]
    assert "resultType" not in called["result"]


async def test_get_without_event_stream_in_accept_is_406(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    response = await http.get("/mcp", headers=client.headers("application/json"))
    assert response.status_code == 406
    assert response.json()["error"]["code"] == -32600


async def test_undeclared_client_capability_is_refused_and_nothing_is_sent(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http, capabilities={"sampling": {}})
    message_id = client.next_id()
    response = await client.post(tool_call("ask_name", id=message_id))
    assert response.status_code == 200
    # One JSON body: no elicitation request went out before the refusal.
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"] == message_id
    assert body["error"]["code"] == -32021
    assert body["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}
    assert "elicitation" in body["error"]["message"]
    assert client.session_id is not None
    runtime = app.runtimes.peek(client.session_id)
    assert runtime is not None
    assert runtime.pending == {}


async def test_answer_to_an_unknown_request_id_is_202(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http)
    for answer in (
        {"jsonrpc": "2.0", "id": "srv-999", "result": {"action": "accept"}},
        {"jsonrpc": "2.0", "id": 12, "error": {"code": -1, "message": "no"}},
    ):
        response = await client.post(answer)
        assert response.status_code == 202
        assert response.content == b""


async def test_the_session_cap_answers_503_with_a_jsonrpc_error() -> None:
    application = create_app(settings(max_sessions=2), legacy_catalog())
    async with asgi_client(application) as http:
        await legacy_session(http)
        await legacy_session(http)
        message = legacy("initialize", {"protocolVersion": VERSION, "capabilities": {}}, id=3)
        response = await http.post("/mcp", json=message, headers={"Accept": BOTH})
    assert response.status_code == 503
    assert "mcp-session-id" not in response.headers
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == 3
    assert body["error"]["code"] == -32000
    assert "Too many sessions" in body["error"]["message"]
    assert application.sessions.count() == 2


async def cancel_slow(
    client: LegacySession, calling: asyncio.Future[httpx.Response]
) -> httpx.Response:
    """Cancel the running ``slow`` call (id "s"); its response, once it has ended."""
    cancelled = await client.post(notification("notifications/cancelled", {"requestId": "s"}))
    assert cancelled.status_code == 202
    with anyio.fail_after(2):
        response = await calling
    assert signals.slow_cancelled.is_set()
    return response


async def test_a_cancelled_call_of_a_json_only_client_gets_no_response(
    http: httpx.AsyncClient,
) -> None:
    client = await legacy_session(http)
    calling = asyncio.ensure_future(client.post(tool_call("slow", id="s"), "application/json"))
    await wait_until(signals.slow_started.is_set)
    response = await cancel_slow(client, calling)
    assert response.status_code == 204
    assert response.content == b""


async def test_a_cancelled_call_that_sent_progress_gets_no_response_either(
    http: httpx.AsyncClient,
) -> None:
    client = await legacy_session(http)
    message = tool_call("slow", token="p", id="s")
    calling = asyncio.ensure_future(client.post(message, "application/json"))
    await wait_until(signals.slow_started.is_set)
    response = await cancel_slow(client, calling)
    assert response.content == b"", response.text


async def test_a_duplicate_of_a_running_id_is_refused_and_the_running_one_stays_cancellable(
    http: httpx.AsyncClient,
) -> None:
    # The in-flight table goes by id: a second call under the running one's id would take its
    # place there, and the cancellation for that id would reach one of the two.
    client = await legacy_session(http, "2025-03-26")
    calling = asyncio.ensure_future(client.post(tool_call("slow", id="s"), "application/json"))
    await wait_until(signals.slow_started.is_set)
    again = await client.post(tool_call("echo", {"text": "twin"}, id="s"))
    assert again.status_code == 400
    assert (again.json()["id"], again.json()["error"]["code"]) == ("s", -32600)
    batched = (
        await client.post([tool_call("echo", {"text": "twin"}, id="s"), legacy("ping", id=2)])
    ).json()
    assert [(answer["id"], "error" in answer) for answer in batched] == [("s", True), (2, False)]
    assert batched[0]["error"]["code"] == -32600
    response = await cancel_slow(client, calling)
    assert response.status_code == 204


async def test_a_batch_refuses_an_id_it_repeats(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    batch = [tool_call("echo", {"text": "one"}, id=7), tool_call("echo", {"text": "two"}, id=7)]
    answers = (await client.post(batch)).json()
    assert answers[0]["result"]["content"] == [{"type": "text", "text": "one"}]
    assert (answers[1]["id"], answers[1]["error"]["code"]) == (7, -32600)


# -- batches ------------------------------------------------------------------------------------


async def test_a_2025_03_26_session_takes_batches(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    batch = [
        legacy("ping", id=1),
        notification("notifications/initialized"),
        tool_call("echo", {"text": "batched"}, id="two"),
        {"jsonrpc": "2.0", "id": "srv-404", "result": {}},
        legacy("no/such/method", id=3),
    ]
    response = await client.post(batch)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    answers = response.json()
    assert isinstance(answers, list)
    assert [answer["id"] for answer in answers] == [1, "two", 3]
    assert answers[0]["result"] == {}
    assert answers[1]["result"]["content"] == [{"type": "text", "text": "batched"}]
    assert answers[2]["error"]["code"] == -32601


async def test_a_batch_of_notifications_and_answers_is_202(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    batch = [
        notification("notifications/initialized"),
        {"jsonrpc": "2.0", "id": "srv-404", "result": {}},
    ]
    response = await client.post(batch)
    assert response.status_code == 202
    assert response.content == b""


async def test_initialize_inside_a_batch_is_refused(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    batch = [legacy("initialize", {"protocolVersion": "2025-03-26"}, id=1), legacy("ping", id=2)]
    answers = (await client.post(batch)).json()
    assert answers[0]["id"] == 1
    assert answers[0]["error"]["code"] == -32600
    assert answers[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_a_batch_at_the_cap_is_answered_whole(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    answers = (await client.post([legacy("ping", id=n) for n in range(64)])).json()
    assert [answer["id"] for answer in answers] == list(range(64))


async def test_a_batch_past_the_cap_is_refused_naming_the_cap(http: httpx.AsyncClient) -> None:
    client = await legacy_session(http, "2025-03-26")
    response = await client.post([legacy("ping", id=n) for n in range(65)])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "at most 64" in error["message"]
    assert "holds 65" in error["message"]


async def test_a_call_refused_for_now_says_when_to_retry() -> None:
    # A 503 raised inside a call (a task refused at a drain, Redis away) went out without the
    # Retry-After that a refusal before the call carries.
    catalog = Catalog("busy", "1.0.0")

    @catalog.tool
    async def busy(wait: float = 0.0) -> str:
        await asyncio.sleep(wait)  # past the disconnect watch's delay: a response writer waits
        raise ServiceUnavailable("busy for now", retry_after=2.5)

    application = create_app(settings(), catalog)
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        client = await legacy_session(http, "2025-06-18")
        # A client taking only JSON waits with a padding writer ready (the legacy rule).
        for wait, accept in ((0.0, BOTH), (0.1, BOTH), (0.1, "application/json")):
            call = legacy("tools/call", {"name": "busy", "arguments": {"wait": wait}}, id=3)
            refused = await client.post(call, accept)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "3"
            assert refused.json()["error"] == {"code": -32000, "message": "busy for now"}


async def test_every_message_of_a_batch_is_charged_to_the_rate() -> None:
    # A batch was one request to the rate limiter, whatever its length.
    overrides = {"rate_limit_rps": 0.001, "rate_limit_burst": 40, "rate_limit_exempt": ""}
    application = create_app(settings(**overrides), legacy_catalog())
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        client = await legacy_session(http, "2025-03-26")  # initialize + initialized: 2 of 40
        first = await client.post([legacy("ping", id=n) for n in range(30)])
        assert first.status_code == 200
        refused = await client.post([legacy("ping", id=n) for n in range(30)])
        assert refused.status_code == 429
        assert "retry-after" in refused.headers


def test_a_batch_at_the_body_limit_never_freezes_the_server() -> None:
    # 32,000 pings (1.6 MB) froze every client and /healthz for 36 s: the session rescanned
    # all its streams as each call started. Now such a batch is refused before any message
    # is read, a batch at the cap is answered, and /healthz stays quick throughout (the
    # 100 ms target on a quiet machine is tests/bench/abuse.py's; this bound leaves room for a
    # loaded CI machine and is still a hundred times below the old freeze).
    application = create_app(settings(), legacy_catalog())
    latencies: list[float] = []
    done = threading.Event()

    def probe_health(url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as health:
            while not done.is_set():
                started = time.perf_counter()
                assert health.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.005)

    async def attack(url: str) -> None:
        huge = [legacy("ping", id=n) for n in range(32_000)]
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            client = await legacy_session(http, "2025-03-26")
            for _ in range(3):
                started = time.perf_counter()
                refused = await client.post(huge)
                assert time.perf_counter() - started < 1.0
                assert refused.status_code == 400
                assert "at most 64" in refused.json()["error"]["message"]
                answered = await client.post([legacy("ping", id=n) for n in range(64)])
                assert len(answered.json()) == 64

    with running(application) as server:
        prober = threading.Thread(target=probe_health, args=(server.url,))
        prober.start()
        try:
            anyio.run(attack, server.url)
        finally:
            done.set()
            prober.join()
    assert len(latencies) > 5
    assert max(latencies) < 0.25, f"/healthz took {max(latencies):.3f} s during the batches"


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
async def test_later_versions_reject_batches_with_400(
    http: httpx.AsyncClient, version: str
) -> None:
    client = await legacy_session(http, version)
    response = await client.post([legacy("ping", id=1), legacy("ping", id=2)])
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


async def test_a_batch_that_cancels_its_own_request_still_answers(
    app: Application, http: httpx.AsyncClient
) -> None:
    client = await legacy_session(http, "2025-03-26")
    batch = [
        tool_call("echo", {"text": "never mind"}, id=5),
        notification("notifications/cancelled", {"requestId": 5}),
        legacy("ping", id=6),
    ]
    try:
        with anyio.fail_after(1):
            response = await client.post(batch)
    finally:
        assert client.session_id is not None
        runtime = app.runtimes.peek(client.session_id)
        assert runtime is not None
        stuck = dict(runtime.inflight)
        app.runtimes.end_all()
    assert stuck == {}
    assert response.status_code == 200
    assert [answer["id"] for answer in response.json()] == [6]


# -- session lifetime (in-process, no lifespan: nothing expires on its own) ---------------------


async def test_a_session_found_expired_on_use_releases_its_runtime() -> None:
    application = create_app(settings(session_idle_timeout_s=0.05), legacy_catalog())
    async with asgi_client(application) as http:
        client = await legacy_session(http)
        assert client.session_id is not None
        await client.call("ping")
        assert application.runtimes.peek(client.session_id) is not None
        await anyio.sleep(0.1)
        assert (await client.post(legacy("ping"))).status_code == 404
    assert application.runtimes.peek(client.session_id) is None


async def test_the_cap_never_evicts_a_busy_session() -> None:
    application = create_app(settings(max_sessions=1, session_idle_timeout_s=0.1), legacy_catalog())
    async with asgi_client(application) as http:
        busy = await legacy_session(http)
        assert busy.session_id is not None
        calling = asyncio.ensure_future(busy.post(tool_call("slow", id=1)))
        try:
            await wait_until(signals.slow_started.is_set)
            await anyio.sleep(0.2)
            message = legacy("initialize", {"protocolVersion": VERSION, "capabilities": {}})
            newcomer = await http.post("/mcp", json=message, headers={"Accept": BOTH})
            still_there = await application.sessions.get(busy.session_id)
        finally:
            application.runtimes.end_all()
            with anyio.fail_after(2):
                await calling
    assert newcomer.status_code == 503
    assert still_there is not None


# == streaming (a real uvicorn) =================================================================


async def test_logs_after_set_level_stream_with_a_priming_event_first(
    net: httpx.AsyncClient,
) -> None:
    client = await legacy_session(net)
    assert (await client.call("logging/setLevel", {"level": "info"}))["result"] == {}
    message_id = client.next_id()
    async with client.stream(tool_call("chatty", id=message_id)) as events:
        assert events.response.headers["x-accel-buffering"] == "no"
        assert "no-store" in events.response.headers["cache-control"]
        await events.rest()
    priming, *rest = events.frames
    assert priming.data == ""
    assert priming.retry == RETRY_MS
    assert priming.id is not None
    assert priming.id.endswith("_0")
    assert [frame.message for frame in rest] == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "info line"},
        },
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "warning", "data": "warning line"},
        },
        {
            "jsonrpc": "2.0",
            "id": message_id,
            "result": {"content": [{"type": "text", "text": "chatted"}]},
        },
    ]
    ids = [frame.id for frame in events.frames]
    assert len(set(ids)) == len(ids)
    # One stream; sequence numbers count from the priming event's 0.
    stream = stream_of(priming)
    assert [parse_event_id(str(frame_id)) for frame_id in ids] == [
        (stream, 0),
        (stream, 1),
        (stream, 2),
        (stream, 3),
    ]


async def test_clients_before_2025_11_25_get_no_priming_event(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net, "2025-06-18")
    await client.call("logging/setLevel", {"level": "warning"})
    async with client.stream(tool_call("chatty", id=5)) as events:
        messages = await events.rest()
    assert all(frame.data for frame in events.frames)
    assert all(frame.retry is None for frame in events.frames)
    assert all(frame.id for frame in events.frames)
    assert [message.get("method") for message in messages] == ["notifications/message", None]
    assert messages[0]["params"]["data"] == "warning line"
    assert messages[1]["id"] == 5


async def test_logs_before_set_level_go_out_from_the_default_level(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("chatty", id=6)) as events:
        messages = await events.rest()
    assert [message.get("params", {}).get("data") for message in messages[:-1]] == [
        "debug line",
        "info line",
        "warning line",
    ]
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "chatted"}]


async def test_no_log_messages_before_set_level_when_the_default_is_off() -> None:
    application = create_app(settings(legacy_default_log_level="off"), legacy_catalog())
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        client = await legacy_session(http)
        body = await client.call("tools/call", {"name": "chatty", "arguments": {}})
        assert body["result"]["content"] == [{"type": "text", "text": "chatted"}]


async def test_the_default_log_level_is_a_setting() -> None:
    application = create_app(settings(legacy_default_log_level="warning"), legacy_catalog())
    async with application.lifespan(application.starlette), asgi_client(application) as http:
        client = await legacy_session(http)
        async with client.stream(tool_call("chatty", id=7)) as events:
            notes, final = await events.rest()
    assert notes["params"] == {"level": "warning", "data": "warning line"}
    assert final["result"]["content"] == [{"type": "text", "text": "chatted"}]


async def test_progress_with_a_progress_token(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("count", {"steps": 3}, token="tok", id=8)) as events:
        *notes, final = await events.rest()
    assert notes == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {
                "progressToken": "tok",
                "progress": step,
                "total": 3,
                "message": f"step {step}",
            },
        }
        for step in (1, 2, 3)
    ]
    assert final["id"] == 8
    assert final["result"]["content"] == [{"type": "text", "text": "counted to 3"}]
    # Without a token, the same tool answers plain JSON.
    body = await client.call("tools/call", {"name": "count", "arguments": {"steps": 2}})
    assert body["result"]["content"][0]["text"] == "counted to 2"


async def test_event_ids_are_unique_across_the_session_streams(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net)
    ids: list[str] = []
    async with client.get() as standalone:
        first = await standalone.next_frame()
        assert first is not None
        ids.append(str(first.id))
        for token in ("a", "b", "c"):
            async with client.stream(tool_call("count", {"steps": 2}, token=token)) as events:
                await events.rest()
            ids += [str(frame.id) for frame in events.frames]
    assert all(parse_event_id(event_id) is not None for event_id in ids)
    assert len(ids) == 1 + 3 * 4
    assert len(set(ids)) == len(ids)
    assert len({parse_event_id(event_id)[0] for event_id in ids}) == 4  # type: ignore[index]


@pytest.mark.parametrize("answer_with_error", [False, True])
async def test_elicitation_goes_out_on_the_call_stream_and_the_answer_comes_back(
    net: httpx.AsyncClient, answer_with_error: bool
) -> None:
    client = await legacy_session(net, capabilities=ALL_CAPS)
    async with client.stream(tool_call("ask_name", id="call")) as events:
        question = await events.next()
        assert question is not None
        assert question["method"] == "elicitation/create"
        assert question["params"] == {"message": "Your name?", "requestedSchema": NAME_SCHEMA}
        assert isinstance(question["id"], str)
        if answer_with_error:
            answer = {"code": -1, "message": "User closed the dialog"}
            reply = {"jsonrpc": "2.0", "id": question["id"], "error": answer}
        else:
            content = {"action": "accept", "content": {"name": "Ada"}}
            reply = {"jsonrpc": "2.0", "id": question["id"], "result": content}
        answered = await client.post(reply)
        assert answered.status_code == 202
        assert answered.content == b""
        rest = await events.rest()
    assert len(rest) == 1
    final = rest[0]
    assert final["id"] == "call"
    if answer_with_error:
        assert final["result"]["isError"] is True
        assert "User closed the dialog" in final["result"]["content"][0]["text"]
    else:
        assert final["result"]["content"] == [{"type": "text", "text": "Hello Ada (accept)"}]
    # Every message on the stream, the question included, carries an event id.
    assert all(frame.id for frame in events.frames)


async def test_sampling_goes_out_on_the_call_stream(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net, capabilities=ALL_CAPS)
    async with client.stream(tool_call("sample", id=41)) as events:
        question = await events.next()
        assert question is not None
        assert question["method"] == "sampling/createMessage"
        assert question["params"]["maxTokens"] == 20
        sampled = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
        reply = {"jsonrpc": "2.0", "id": question["id"], "result": sampled}
        assert (await client.post(reply)).status_code == 202
        final = await events.next()
        assert await events.next() is None
    assert final is not None
    assert final["id"] == 41
    assert final["result"]["content"] == [{"type": "text", "text": "model said hi"}]


async def test_notifications_cancelled_stops_a_slow_tool_without_a_response(
    live: Live, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("slow", token="p", id="slow-1")) as events:
        first = await events.next()
        assert first is not None
        assert first["method"] == "notifications/progress"
        await wait_until(signals.slow_started.is_set)
        cancel = notification(
            "notifications/cancelled", {"requestId": "slow-1", "reason": "user gave up"}
        )
        response = await client.post(cancel)
        assert response.status_code == 202
        rest = await events.rest(limit=2)
    assert rest == []
    assert not any(message.get("id") == "slow-1" for message in events.messages)
    await wait_until(signals.slow_cancelled.is_set)
    assert not signals.slow_finished.is_set()
    assert client.session_id is not None
    runtime = live.app.runtimes.peek(client.session_id)
    assert runtime is not None
    await wait_until(lambda: not runtime.inflight)
    # Cancelling it again, or something unknown, is accepted and ignored.
    assert (await client.post(cancel)).status_code == 202
    assert (await client.post(notification("notifications/cancelled", {}))).status_code == 202


async def test_get_stream_carries_list_changes_and_subscribed_resource_updates(
    net: httpx.AsyncClient,
) -> None:
    client = await legacy_session(net)
    for uri in ("test://docs", "test://dir/"):
        assert (await client.call("resources/subscribe", {"uri": uri}))["result"] == {}
    async with client.get() as events:
        priming = await events.next_frame()
        assert priming is not None
        assert priming.data == ""
        assert priming.retry == RETRY_MS
        for name, arguments in (
            ("touch", {"uri": "test://other"}),
            ("touch", {"uri": "test://docsextra"}),
            ("touch", {"uri": "test://docs/page/1"}),
            ("toggle_tool", {}),
            ("touch", {"uri": "test://dir"}),
            ("touch", {"uri": "test://dir/a"}),
            ("toggle_tool", {}),
            ("touch", {"uri": "test://docs"}),
        ):
            await client.call("tools/call", {"name": name, "arguments": arguments})
        received = [await events.next(limit=2) for _ in range(5)]
        with anyio.move_on_after(0.4) as idle:
            await events.next(limit=1)
        assert idle.cancelled_caught
    updated = "notifications/resources/updated"
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert received == [
        {"jsonrpc": "2.0", "method": updated, "params": {"uri": "test://docs/page/1"}},
        changed,
        {"jsonrpc": "2.0", "method": updated, "params": {"uri": "test://dir/a"}},
        changed,
        {"jsonrpc": "2.0", "method": updated, "params": {"uri": "test://docs"}},
    ]
    # Only notifications, never a response, each with its own id on one stream.
    ids = [frame.id for frame in events.frames]
    assert len(set(ids)) == len(ids)
    assert len({stream_of(frame) for frame in events.frames}) == 1
    assert events.comments >= 1  # keep-alives while idle


async def test_unsubscribed_sessions_get_no_resource_updates(net: httpx.AsyncClient) -> None:
    listener = await legacy_session(net)
    other = await legacy_session(net)
    await other.call("resources/subscribe", {"uri": "test://docs"})
    async with listener.get() as events:
        await events.next_frame()
        await other.call("tools/call", {"name": "touch", "arguments": {"uri": "test://docs"}})
        await other.call("tools/call", {"name": "toggle_tool", "arguments": {}})
        await other.call("tools/call", {"name": "toggle_tool", "arguments": {}})
        first = await events.next(limit=2)
        second = await events.next(limit=2)
    assert first == second == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_a_second_get_stream_is_409_until_the_first_closes(
    live: Live, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    assert client.session_id is not None
    async with client.get() as events:
        await events.next_frame()
        second = await net.get("/mcp", headers=client.headers("text/event-stream"))
        assert second.status_code == 409
        assert second.json()["error"]["code"] == -32600
    runtime = live.app.runtimes.peek(client.session_id)
    assert runtime is not None
    await wait_until(lambda: runtime.standalone_followers == 0)
    async with client.get() as again:
        assert await again.next_frame() is not None


async def test_last_event_id_resumes_the_same_stream_after_a_dropped_connection(
    live: Live, net: httpx.AsyncClient
) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("gated", token="g", id="gated")) as events:
        priming = await events.next_frame()
        first = await events.next_frame()
    # The connection is gone; in this era that is not a cancellation.
    assert priming is not None
    assert first is not None
    assert first.message is not None
    assert first.message["params"]["message"] == "before the gate"
    assert first.id is not None
    stream = stream_of(first)
    # Another call streams meanwhile: its events belong to another stream.
    async with client.stream(tool_call("count", {"steps": 2}, token="other")) as other:
        assert len(await other.rest()) == 3
    signals.gate.set()
    assert client.session_id is not None
    runtime = live.app.runtimes.peek(client.session_id)
    assert runtime is not None
    await wait_until(lambda: "gated" not in runtime.inflight)

    async with client.get(last_event_id=first.id) as resumed:
        messages = await resumed.rest()
    assert [frame.id for frame in resumed.frames] == [first.id, f"{stream}_2", f"{stream}_3"]
    assert resumed.frames[0].data == ""
    assert messages == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {
                "progressToken": "g",
                "progress": 2,
                "total": 2,
                "message": "after the gate",
            },
        },
        {
            "jsonrpc": "2.0",
            "id": "gated",
            "result": {"content": [{"type": "text", "text": "through the gate"}]},
        },
    ]
    # From the priming id the whole stream is replayed.
    assert priming.id == f"{stream}_0"
    async with client.get(last_event_id=priming.id) as replayed:
        everything = await replayed.rest()
    assert [message.get("params", {}).get("progress") for message in everything] == [1, 2, None]


async def test_a_resumed_stream_follows_a_call_that_is_still_running(
    net: httpx.AsyncClient,
) -> None:
    client = await legacy_session(net, "2025-06-18")
    async with client.stream(tool_call("gated", token=1, id=2)) as events:
        first = await events.next_frame()
    assert first is not None
    assert first.id is not None
    await wait_until(signals.gate_reached.is_set)
    async with client.get(last_event_id=first.id) as resumed:
        # The call is still waiting at its gate: what follows is live, not replayed.
        await anyio.sleep(0.1)
        assert not signals.gate.is_set()
        signals.gate.set()
        messages = await resumed.rest()
    assert [message.get("id") for message in messages] == [None, 2]
    assert messages[1]["result"]["content"][0]["text"] == "through the gate"
    # 2025-06-18: no priming event on the resumed stream either.
    assert all(frame.data for frame in resumed.frames)


async def test_a_call_that_closes_its_stream_is_resumable(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("reconnect", id="r")) as events:
        assert await events.rest() == []
    (priming,) = events.frames
    assert priming.data == ""
    assert priming.retry == RETRY_MS
    assert priming.id is not None
    async with client.get(last_event_id=priming.id) as resumed:
        messages = await resumed.rest()
    assert messages == [
        {
            "jsonrpc": "2.0",
            "id": "r",
            "result": {
                "content": [{"type": "text", "text": "Reconnection test completed"}],
            },
        }
    ]
    assert stream_of(resumed.frames[-1]) == stream_of(priming)


async def test_close_stream_never_loses_the_result_of_an_older_client(
    net: httpx.AsyncClient,
) -> None:
    client = await legacy_session(net, "2025-06-18")
    response = await client.post(tool_call("reconnect", id="r"))
    assert response.status_code == 200
    text = response.text
    assert "Reconnection test completed" in text


async def test_nothing_to_resume_is_410(net: httpx.AsyncClient) -> None:
    client = await legacy_session(net)
    async with client.stream(tool_call("count", {"steps": 1}, token="t", id=1)) as events:
        await events.rest()
    last = events.frames[-1].id
    assert last is not None
    headers = client.headers("text/event-stream", Content_Type=None)
    # Unknown streams, and a complete stream read to its end: nothing to send.
    for last_event_id in ("abcdef99_3", f"abcdef99_{2**64 - 1}", last):
        response = await net.get("/mcp", headers={**headers, "Last-Event-ID": last_event_id})
        assert response.status_code == 410, last_event_id
        assert response.json()["error"]["code"] == -32600
    # The session is fine: its standalone stream still opens.
    async with client.get() as standalone:
        assert await standalone.next_frame() is not None


@pytest.mark.parametrize(
    "last_event_id",
    [
        b"abc_\xb2",  # not ASCII digits
        b"not an event id",
        b"nosuchstream_3",  # a stream id of a shape this server never makes
        b"abc_18446744073709551616",  # past what a Redis stream id holds
        b"abc_" + b"9" * 5000,
    ],
)
async def test_a_last_event_id_this_server_cannot_have_made_is_400(
    net: httpx.AsyncClient, last_event_id: bytes
) -> None:
    client = await legacy_session(net)
    headers: dict[str, Any] = client.headers("text/event-stream", Content_Type=None)
    headers["Last-Event-ID"] = last_event_id
    response = await net.get("/mcp", headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "Last-Event-ID" in error["message"]
    assert "is not an event id of this server" in error["message"]


# -- expiry, shutdown: servers of their own -----------------------------------------------------


async def test_idle_sessions_expire_and_their_runtime_goes_but_a_get_stream_keeps_one() -> None:
    application = create_app(settings(session_idle_timeout_s=0.3), legacy_catalog())
    with running(application) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=5) as http:
            idle = await legacy_session(http)
            busy = await legacy_session(http)
            idle_id, busy_id = idle.session_id, busy.session_id
            assert idle_id is not None
            assert busy_id is not None
            await idle.call("ping")
            assert application.runtimes.peek(idle_id) is not None
            async with busy.get() as events:
                await events.next_frame()
                await wait_until(lambda: application.runtimes.peek(idle_id) is None)
                # The session with an open GET stream outlived the same idle time.
                assert application.sessions.count() == 1
                assert application.runtimes.peek(busy_id) is not None
                assert (await idle.post(legacy("ping"))).status_code == 404
                assert (await busy.call("ping"))["result"] == {}
            # Without its stream, it goes the same way.
            await wait_until(lambda: application.runtimes.peek(busy_id) is None)
            assert (await busy.post(legacy("ping"))).status_code == 404
            assert len(application.runtimes) == 0


async def test_graceful_shutdown_ends_open_get_streams() -> None:
    application = create_app(settings(), legacy_catalog())
    with running(application) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=5) as http:
            client = await legacy_session(http)
            async with client.get() as events:
                assert await events.next_frame() is not None
                started = time.monotonic()
                live.server.should_exit = True
                assert await events.rest(limit=3) == []
                # Well inside uvicorn's 1 s graceful timeout: ended by the app, not cut off.
                assert time.monotonic() - started < 0.9
        live.thread.join(5)
        assert not live.thread.is_alive()
    assert not application.ready
    assert len(application.runtimes) == 0
