"""Hostile input, property-based: whatever a client sends, the server answers it properly.

Hypothesis posts arbitrary bytes, arbitrary JSON values, JSON-RPC-shaped messages (real and
made-up methods, params with and without ``_meta`` variants, batches) and arbitrary
combinations of the headers the server reads, through the whole ASGI app with a file record
sink and static-token authentication. For every request:

- the status is never 500;
- a JSON body is a JSON-RPC response (or a batch of them), an SSE body is a sequence of
  events whose data are JSON-RPC messages, and anything else has no body;
- no error and no traceback is logged (an exception logged for some input is a bug);
- the request leaves exactly one request record with the status it got (counted after the
  lifespan ends and the Recorder has written everything).

Requests are driven by a small ASGI client (:func:`drive`) rather than httpx: it sends raw
header bytes as a real server would pass them on (visible ASCII, tab and obs-text; never CR,
LF or NUL, which HTTP parsers refuse before any app sees them), and it closes the connection
after the first bytes of an SSE response, so a listen stream that a random message opened ends
the way a departing client ends it. The app and its lifespan run on an event loop in a
thread (an anyio blocking portal) for the whole property, so each example costs one request.
Bounded: 200 examples per property, no deadline, a few seconds in all.
"""

import asyncio
import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import Catalog, Context, ToolError
from server.app import Application, create_app
from server.protocol import LEGACY_METHODS, LEGACY_VERSIONS, MODERN_METHODS, MODERN_VERSION
from server.settings import Settings
from tests.support.core_helpers import post_scope
from tests.support.mcp_client import initialize

TOKEN = "hostile-input-test-token-0123456789"
DIGEST = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
HOST = b"127.0.0.1:8000"
PROPERTY = settings(
    max_examples=200,
    deadline=None,
    # CI replays one fixed set of examples (a red CI is then reproducible); local runs explore.
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"


def hostile_catalog() -> Catalog:
    catalog = Catalog("hostile-input", "1.0.0")

    @catalog.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    @catalog.tool
    async def add(a: float, b: float) -> float:
        """Adds."""
        return a + b

    @catalog.tool
    async def fail(message: str = "no") -> str:
        """Fails the way a tool should."""
        raise ToolError(message)

    @catalog.tool
    async def ask_name(ctx: Context) -> str:
        """Elicits."""
        answer = await ctx.elicit("Name?", {"type": "object", "properties": {}}, key="name")
        return answer.action

    @catalog.tool
    async def ask_model(ctx: Context, question: str) -> str:
        """Samples."""
        reply = await ctx.sample(question, 50, key="answer")
        return str(reply.get("content"))

    @catalog.tool
    async def show_roots(ctx: Context) -> str:
        """Lists roots."""
        return str(await ctx.list_roots(key="roots"))

    @catalog.tool
    async def progress(ctx: Context, steps: int = 2) -> str:
        """Reports progress."""
        for step in range(min(max(steps, 0), 3)):
            await ctx.report_progress(step + 1, 3)
            await ctx.info(f"step {step}")
        return "done"

    @catalog.resource("test://doc", mime_type="text/plain")
    def doc() -> str:
        """A document."""
        return "doc"

    @catalog.resource_template("test://echo/{text}")
    def echo_resource(text: str) -> str:
        """Echoes its variable."""
        return text

    @catalog.completion(template="test://echo/{text}", argument="text")
    def complete_text(value: str, context: Any) -> list[str]:
        return [value + "a", value + "b"]

    @catalog.prompt()
    def greet(name: str) -> str:
        """Greets."""
        return f"Hello {name}"

    return catalog


# -- a raw ASGI client --------------------------------------------------------------------------


@dataclass
class Exchange:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


async def drive(
    app: Application,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    *,
    method: str = "POST",
    path: str = "/mcp",
) -> Exchange:
    """One request, as uvicorn would hand it to the app; an SSE response is read up to its first
    bytes, then the client leaves."""
    scope = {
        **post_scope(headers, path),
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "method": method,
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent_body = False
    gone = anyio.Event()
    status = 0
    response_headers: dict[bytes, bytes] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            response_headers.update((k.lower(), v) for k, v in message.get("headers", []))
            if response_headers.get(b"content-type", b"").startswith(b"text/event"):
                # A stream that stays silent (a legacy GET stream) is left after a moment.
                asyncio.get_running_loop().call_later(0.1, gone.set)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            streaming = response_headers.get(b"content-type", b"").startswith(b"text/event")
            if streaming and b"".join(chunks).strip():
                gone.set()  # enough of this stream: the client goes away

    with anyio.fail_after(10):
        await app(scope, receive, send)
    gone.set()
    return Exchange(status, response_headers, b"".join(chunks))


# -- what every answer must look like -----------------------------------------------------------


def is_response(message: Any) -> bool:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "id" not in message:
        return False
    if ("result" in message) == ("error" in message):
        return False
    if "error" in message:
        error = message["error"]
        return (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        )
    return isinstance(message["result"], dict)


def is_message(message: Any) -> bool:
    """A JSON-RPC message a server may send on a stream: a response, request or notification."""
    if is_response(message):
        return True
    return (
        isinstance(message, dict)
        and message.get("jsonrpc") == "2.0"
        and isinstance(message.get("method"), str)
        and isinstance(message.get("params", {}), dict)
    )


def sse_data(body: bytes) -> list[tuple[str, str]]:
    """The type and data of each complete event (a cut-off last event is skipped: the client
    left)."""
    text = body.decode("utf-8")
    events = text.replace("\r\n", "\n").split("\n\n")
    found = []
    for event in events[:-1]:
        lines = event.split("\n")
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
        kinds = [line[6:].strip() for line in lines if line.startswith("event:")]
        if data and "".join(data):
            found.append((kinds[-1] if kinds else "message", "\n".join(data)))
    return found


def check_exchange(exchange: Exchange) -> None:
    assert exchange.status != 500, exchange
    assert 200 <= exchange.status < 600, exchange
    kind = exchange.headers.get(b"content-type", b"")
    if kind.startswith(b"application/json"):
        body = json.loads(exchange.body)
        if isinstance(body, list):
            assert body, exchange
            assert all(is_response(item) for item in body), exchange
        else:
            assert is_response(body), exchange
    elif kind.startswith(b"text/event-stream"):
        assert exchange.status == 200, exchange
        for kind_of_event, data in sse_data(exchange.body):
            if kind_of_event == "endpoint":
                # A GET with no session that takes SSE opens the HTTP+SSE transport
                # (2024-11-05), whose first event is where to post, not a message.
                assert re.fullmatch(r"/[^\s?]*\?session_id=[\w-]+", data), exchange
            else:
                assert is_message(json.loads(data)), exchange
    else:
        assert exchange.body == b"", exchange
        assert exchange.status in (200, 202, 204), exchange


# -- the app, its lifespan and its records for one property -------------------------------------


def failures(records: list[logging.LogRecord]) -> list[tuple[str, str, str | None]]:
    """Log records that say something went wrong: ERROR and above, or any traceback."""
    return [
        (record.name, record.getMessage(), record.exc_text)
        for record in records
        if record.levelno >= logging.ERROR or record.exc_info is not None
    ]


@dataclass
class Harness:
    portal: BlockingPortal
    app: Application
    log: pytest.LogCaptureFixture
    statuses: list[int] = field(default_factory=list)
    session: str = ""
    _seen_logs: int = 0

    def request(
        self,
        headers: list[tuple[bytes, bytes]],
        body: bytes = b"",
        *,
        method: str = "POST",
        path: str = "/mcp",
    ) -> Exchange:
        exchange = self.portal.call(
            lambda: drive(self.app, headers, body, method=method, path=path)
        )
        self.statuses.append(exchange.status)
        check_exchange(exchange)
        logged, self._seen_logs = self.log.records[self._seen_logs :], len(self.log.records)
        assert failures(logged) == [], exchange
        if method == "DELETE" and exchange.status == 200:
            self.session = open_session(self)  # that was the session: open another
        return exchange


@pytest.fixture
def harness(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Harness]:
    """The app with its lifespan running on a portal's loop; afterwards, the checks that need
    every record written: one request record per request, and nothing logged at ERROR."""
    caplog.set_level(logging.WARNING)
    path = tmp_path / "records.jsonl"
    app = create_app(
        Settings(
            _env_file=None,
            records=["file"],
            records_file=str(path),
            auth="tokens",
            auth_tokens=DIGEST,
            rate_limit_rps=0,
            client_request_timeout_s=2,
            handler_timeout_s=5,
            max_body_bytes=64 * 1024,
        ),
        hostile_catalog(),
    )
    with start_blocking_portal() as portal:
        lifespan = app.starlette.router.lifespan_context(app.starlette)
        with portal.wrap_async_context_manager(lifespan):
            running = Harness(portal, app, caplog)
            running.session = open_session(running)
            yield running
    # The lifespan has ended: the Recorder wrote every record before it closed.
    # JSON Lines: split on \n only (a record may hold U+0085 or U+2028, which JSON allows raw).
    records = [json.loads(line) for line in path.read_bytes().split(b"\n") if line]
    requests = [record for record in records if record["kind"] == "request"]
    assert len(requests) == len(running.statuses)
    assert Counter(record["status"] for record in requests) == Counter(running.statuses)
    assert TOKEN not in path.read_text()
    assert failures(caplog.records) == []  # nothing later either (streams, the shutdown)


def open_session(harness: Harness) -> str:
    """A real legacy session, so some random messages land in one."""
    body = json.dumps(
        initialize(
            LEGACY_VERSIONS[0],
            {"sampling": {}, "elicitation": {}, "roots": {}},
            {"name": "hostile", "version": "0"},
        )
    ).encode()
    exchange = harness.request(base_headers(), body)
    assert exchange.status == 200
    return exchange.headers[b"mcp-session-id"].decode()


def base_headers(**extra: bytes) -> list[tuple[bytes, bytes]]:
    headers = {
        b"host": HOST,
        b"content-type": b"application/json",
        b"accept": b"application/json, text/event-stream",
        b"authorization": b"Bearer " + TOKEN.encode(),
    }
    headers.update(
        {name.replace("_", "-").lower().encode(): value for name, value in extra.items()}
    )
    return list(headers.items())


# -- strategies ---------------------------------------------------------------------------------


def mostly(good: st.SearchStrategy[Any], other: st.SearchStrategy[Any], percent: int = 85) -> Any:
    """``good`` most of the time, so many examples get past the first check to the handlers."""
    return st.integers(0, 99).flatmap(lambda n: good if n < percent else other)


# What an HTTP server passes on in a header value: tab, visible ASCII, obs-text.
HEADER_BYTES = [9, *range(0x20, 0x7F), *range(0x80, 0x100)]
header_values = st.binary(max_size=40).map(
    lambda raw: bytes(HEADER_BYTES[byte % len(HEADER_BYTES)] for byte in raw)
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=12), json_values, max_size=4)

VERSIONS = [MODERN_VERSION, *LEGACY_VERSIONS, "v999.0.0", "", "2026-07-28 "]
METHODS = sorted(
    {
        *MODERN_METHODS,
        *LEGACY_METHODS,
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/roots/list_changed",
    }
)
TOOLS = ["echo", "add", "fail", "ask_name", "ask_model", "show_roots", "progress", "nope"]
URIS = ["test://doc", "test://echo/x", "test://echo/", "test://none", "file:///etc/passwd"]

capabilities = mostly(
    st.sampled_from([{}, {"elicitation": {}}, {"sampling": {}}, {"roots": {"listChanged": True}}]),
    json_values,
)
meta = st.fixed_dictionaries(
    {
        META_VERSION: mostly(st.just(MODERN_VERSION), st.sampled_from(VERSIONS) | json_values),
        META_CAPABILITIES: capabilities,
    },
    optional={
        META_INFO: st.fixed_dictionaries({"name": st.text(max_size=10)}) | json_values,
        "io.modelcontextprotocol/logLevel": st.sampled_from(["debug", "error", "x"]),
        "io.modelcontextprotocol/subscriptionId": json_values,
        "progressToken": st.integers() | st.text(max_size=5) | json_values,
    },
)
arguments = mostly(
    st.fixed_dictionaries({"text": st.text(max_size=10)})
    | st.fixed_dictionaries({"a": st.floats(), "b": st.floats() | json_values})
    | st.fixed_dictionaries({"question": st.text(max_size=10)})
    | st.fixed_dictionaries({"message": st.text(max_size=10)})
    | st.fixed_dictionaries({"steps": st.integers()}),
    json_values,
    70,
)
uris = mostly(st.sampled_from(URIS), json_values)
PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "tools/call": st.fixed_dictionaries(
        {"name": mostly(st.sampled_from(TOOLS), json_values)},
        optional={"arguments": arguments},
    ),
    "prompts/get": st.fixed_dictionaries(
        {"name": mostly(st.just("greet"), json_values)},
        optional={"arguments": mostly(st.fixed_dictionaries({"name": st.text()}), json_values)},
    ),
    "resources/read": st.fixed_dictionaries({"uri": uris}),
    "resources/subscribe": st.fixed_dictionaries({"uri": uris}),
    "resources/unsubscribe": st.fixed_dictionaries({"uri": uris}),
    "completion/complete": st.fixed_dictionaries(
        {
            "ref": st.fixed_dictionaries(
                {"type": st.sampled_from(["ref/prompt", "ref/resource", "x"])},
                optional={"name": st.just("greet"), "uri": st.just("test://echo/{text}")},
            )
            | json_values,
            "argument": st.fixed_dictionaries(
                {"name": st.sampled_from(["name", "text", "x"]), "value": st.text(max_size=5)}
            )
            | json_values,
        }
    ),
    "subscriptions/listen": st.fixed_dictionaries(
        {
            "notifications": mostly(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "toolsListChanged": st.booleans() | json_values,
                        "promptsListChanged": st.booleans(),
                        "resourceSubscriptions": st.lists(st.sampled_from(URIS), max_size=2),
                    },
                ),
                json_values,
            )
        }
    ),
    "initialize": st.fixed_dictionaries(
        {
            "protocolVersion": mostly(st.sampled_from(VERSIONS), json_values),
            "capabilities": capabilities,
            "clientInfo": mostly(
                st.fixed_dictionaries({"name": st.text(max_size=8), "version": st.just("1")}),
                json_values,
            ),
        }
    ),
    "logging/setLevel": st.fixed_dictionaries(
        {"level": mostly(st.sampled_from(["debug", "info", "bogus"]), json_values)}
    ),
    "notifications/cancelled": st.fixed_dictionaries(
        {"requestId": json_values}, optional={"reason": st.text(max_size=5)}
    ),
}
LIST_PARAMS = st.fixed_dictionaries({}, optional={"cursor": st.text(max_size=30) | json_values})
SHAPES = ["request", "request", "request", "notification", "response", "both"]


@st.composite
def rpc_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC message, usually well-formed, in either era, sometimes wrong in any part."""
    method = draw(mostly(st.sampled_from(METHODS), st.text(max_size=20) | json_values))
    known = PARAMS.get(method, LIST_PARAMS) if isinstance(method, str) else LIST_PARAMS
    params = draw(mostly(known, json_values, 90))
    if isinstance(params, dict) and draw(st.booleans()):  # the modern era's _meta
        params["_meta"] = draw(mostly(meta, json_values, 90))
    if isinstance(params, dict):
        params.update(draw(mostly(st.just({}), json_objects, 90)))  # unknown members
    message: dict[str, Any] = {"jsonrpc": draw(mostly(st.just("2.0"), json_values, 90))}
    shape = draw(st.sampled_from(SHAPES))
    if shape != "response":
        message["method"] = method
        message["params"] = params
    if shape != "notification":
        message["id"] = draw(mostly(st.integers() | st.text(max_size=8), json_values))
    if shape in ("response", "both"):
        message[draw(st.sampled_from(["result", "error"]))] = draw(json_values)
    return message


bodies = mostly(rpc_messages(), st.lists(rpc_messages(), min_size=0, max_size=3), 80)


def encode(value: Any) -> bytes:
    # Python's json writes what orjson refuses (NaN, Infinity, integers past 64 bits): fine,
    # the server has to cope with those bytes too.
    return json.dumps(value).encode()


@st.composite
def header_sets(draw: st.DrawFn, message: Any, session: str) -> list[tuple[bytes, bytes]]:
    """Headers that agree with ``message`` (mostly), disagree with it, or are missing."""
    if not isinstance(message, dict):
        message = {}
    method = message.get("method")
    params: dict[str, Any] = message["params"] if isinstance(message.get("params"), dict) else {}
    meta_of: dict[str, Any] = params["_meta"] if isinstance(params.get("_meta"), dict) else {}
    modern = META_VERSION in meta_of
    name = params.get("uri" if method == "resources/read" else "name")

    def as_bytes(value: Any) -> bytes | None:
        return None if value is None else str(value).encode("utf-8", "replace")

    def pick(consistent: bytes | None, *others: bytes) -> bytes | None:
        roll = draw(st.integers(0, 99))
        if roll < 70 and consistent is not None:
            return consistent
        if roll < 80:
            return None
        if roll < 90 and others:
            return draw(st.sampled_from(others))
        return draw(header_values)

    version = meta_of.get(META_VERSION) if modern else LEGACY_VERSIONS[0]
    found: dict[bytes, bytes | None] = {
        b"host": pick(HOST, b"localhost", b"evil.example", b"127.0.0.1:1"),
        b"content-type": pick(b"application/json", b"application/json; charset=utf-8", b"text/x"),
        b"accept": pick(
            b"application/json, text/event-stream",
            b"application/json",
            b"text/event-stream",
            b"*/*",
        ),
        b"authorization": pick(b"Bearer " + TOKEN.encode(), b"Bearer wrong", b"Basic eA=="),
        b"mcp-protocol-version": pick(
            as_bytes(version), *(version.encode() for version in VERSIONS)
        ),
        b"mcp-method": pick(as_bytes(method) if modern else None, b"tools/call"),
        b"mcp-name": pick(as_bytes(name) if modern else None, b"echo"),
        b"mcp-session-id": pick(
            None if modern or method == "initialize" else session.encode(), b"unknown-session"
        ),
        b"origin": pick(None, b"http://127.0.0.1:8000", b"https://evil.example", b"null"),
        b"last-event-id": pick(None, b"0", b"x:1", session.encode() + b":0:1"),
    }
    headers = [(key, value) for key, value in found.items() if value is not None]
    if draw(st.integers(0, 99)) >= 95:  # (the smallest draw is the usual case)
        headers.append((b"authorization", b"Bearer " + TOKEN.encode()))  # twice
    return draw(st.permutations(headers))


# -- the properties -----------------------------------------------------------------------------


def test_arbitrary_bytes(harness: Harness) -> None:
    @PROPERTY
    @given(
        body=st.binary(max_size=2048),
        version=st.sampled_from([MODERN_VERSION, LEGACY_VERSIONS[0], None]),
    )
    def post_bytes(body: bytes, version: str | None) -> None:
        extra = {"mcp_protocol_version": version.encode()} if version else {}
        harness.request(base_headers(**extra), body)

    post_bytes()


def test_arbitrary_json_values(harness: Harness) -> None:
    @PROPERTY
    @given(value=json_values, modern=st.booleans())
    def post_json(value: Any, modern: bool) -> None:
        extra = {"mcp_protocol_version": MODERN_VERSION.encode()} if modern else {}
        harness.request(base_headers(**extra), encode(value))

    post_json()


def test_json_rpc_shapes(harness: Harness) -> None:
    @PROPERTY
    @given(data=st.data(), body=bodies)
    def post_message(data: st.DataObject, body: Any) -> None:
        first = body[0] if isinstance(body, list) and body else body
        headers = data.draw(header_sets(first, harness.session))
        harness.request(headers, encode(body))

    post_message()


def test_header_combinations(harness: Harness) -> None:
    @PROPERTY
    @given(
        data=st.data(),
        body=rpc_messages(),
        method=st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT"]),
        path=st.sampled_from(["/mcp", "/mcp/"]),
    )
    def send(data: st.DataObject, body: Any, method: str, path: str) -> None:
        headers = data.draw(header_sets(body, harness.session))
        payload = encode(body) if method == "POST" else b""
        harness.request(headers, payload, method=method, path=path)

    send()


# -- found by the properties --------------------------------------------------------------------


@pytest.mark.parametrize("declared", [b"\xb2", b"1" * 5000], ids=["superscript-two", "5000-digits"])
def test_a_strange_content_length_is_no_internal_error(
    declared: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    app = create_app(Settings(_env_file=None, records=["none"]), hostile_catalog())
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    headers = [*base_headers(), (b"content-length", declared)]

    async def run() -> Exchange:
        async with app.starlette.router.lifespan_context(app.starlette):
            return await drive(app, headers, body)

    exchange = anyio.run(run)
    check_exchange(exchange)
    assert b"-32603" not in exchange.body
    assert failures(caplog.records) == []
