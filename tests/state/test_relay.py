"""server.state.relay and server.state.messages: what each bus message does here, and two apps.

:class:`~server.state.relay.BusRelay` is exercised on a real :class:`~server.app.Application`
(its hub, its legacy shell and session runtimes), without HTTP: each test calls ``deliver`` as
the bus would and checks what this process did. Then two apps built by ``create_app`` share one
test bus (each publish handed, as JSON, to the other app's relay) and one session store, with
no Redis: an HTTP+SSE call posted to one app is answered on the stream the other holds. Last,
one test over a real Redis bus (the session's ``redis_server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import pytest

import server.state.auto
from server.app import Application, create_app
from server.catalog import Catalog, Change
from server.hub import Closed, Event, Stream
from server.legacy.runtime import SessionRuntime
from server.modern.listen import ListenFilter, ListenFrames
from server.settings import Settings
from server.state.bus import Deliver
from server.state.memory import MemoryBus, MemorySessionStore
from server.state.messages import DECODERS, publish_subscription
from server.state.redis.bus import RedisBus
from server.state.redis.link import RedisLink
from server.state.relay import BusRelay
from tests.support.http_sse import sse_get_scope
from tests.support.mcp_client import initialize
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer, fresh_prefix

pytestmark = pytest.mark.anyio

ALL_CAPS = {"tools": {}, "prompts": {}, "resources": {"subscribe": True}}


def settings(**overrides: Any) -> Settings:
    overrides.setdefault("redis_url", "")
    return Settings(_env_file=None, **overrides)


@pytest.fixture
def app() -> Application:
    return Application(settings(), Catalog("replication-test", "1.0.0"))


def frames(stream: Stream) -> list[bytes]:
    got = []
    while not stream.queue.empty():
        item = stream.queue.get_nowait()
        assert not isinstance(item, Closed)
        got.append(item)
    return got


def attach(app: Application) -> Stream:
    """A hub stream that turns every change into ``kind uri``."""

    def frame(change: Event) -> bytes:
        assert isinstance(change, Change)
        return f"{change.kind} {change.uri}".encode()

    return app.hub.attach(frame)


async def sleeper(runtime: SessionRuntime, request_id: str | int) -> asyncio.Task[None]:
    task = asyncio.create_task(asyncio.sleep(30))
    runtime.inflight[request_id] = task
    await asyncio.sleep(0)
    return task


def test_every_kind_has_one_decoder() -> None:
    kinds = {"change", "task", "ended", "answer", "cancel", "subs", "sse"}
    local = {"resync", "away", "unsent"}  # from a bus to its own replica
    assert set(DECODERS) == kinds | local


# -- BusRelay.deliver: catalog changes -----------------------------------------------------------


async def test_a_change_reaches_the_hub(app: Application) -> None:
    stream = attach(app)
    app.relay.deliver("change", {"kind": "tools", "uri": None})
    app.relay.deliver("change", {"kind": "prompts"})
    app.relay.deliver("change", {"kind": "resource_updated", "uri": "file:///a.txt"})
    assert frames(stream) == [b"tools None", b"prompts None", b"resource_updated file:///a.txt"]


async def test_a_malformed_change_is_ignored(app: Application) -> None:
    stream = attach(app)
    malformed: list[dict[str, Any]] = [
        {},
        {"kind": "bogus"},
        {"kind": None},
        {"kind": ["tools"]},
        {"kind": "tools", "uri": 5},
        {"kind": "tools", "uri": "file:///a"},
        {"kind": "resource_updated"},
        {"kind": "resource_updated", "uri": None},
        {"kind": "resource_updated", "uri": {"x": 1}},
    ]
    # A session's GET stream is fed by the hub too (it needs a resource update's uri).
    runtime = app.legacy.runtimes.get("s1")
    runtime.subscriptions.apply("file:///", True)
    standalone = runtime.standalone_stream(app.hub, lambda: ALL_CAPS)
    for data in malformed:
        app.relay.deliver("change", data)
    assert frames(stream) == []
    assert standalone.events_after(0) == []
    app.relay.deliver("change", {"kind": "resource_updated", "uri": "file:///b"})
    assert frames(stream) == [b"resource_updated file:///b"]
    assert len(standalone.events_after(0)) == 1


async def test_resync_offers_the_three_list_changes(app: Application) -> None:
    stream = attach(app)
    app.relay.deliver("resync", {})
    assert frames(stream) == [b"tools None", b"prompts None", b"resources None"]


async def test_resync_with_what_the_log_says_offers_its_updates_and_every_list(
    app: Application,
) -> None:
    # Issue 35: the change log told what the lost subscription missed: its resource
    # updates, then every list (one changed where publishing failed is in no log).
    stream = attach(app)
    missed = [
        {"kind": "resource_updated", "uri": "file:///a"},
        {"kind": "tools", "uri": None},
        {"kind": "resource_updated", "uri": "file:///a"},
        {"kind": "tools", "uri": None},
        {"kind": "nonsense"},
    ]
    app.relay.deliver("resync", {"changes": missed})
    assert frames(stream) == [
        b"resource_updated file:///a",
        b"resource_updated file:///a",
        b"tools None",
        b"prompts None",
        b"resources None",
    ]


def test_announce_change_publishes_on_the_bus(app: Application) -> None:
    published: list[tuple[str, dict[str, Any]]] = []

    class RecordingBus(MemoryBus):
        def publish(self, kind: str, data: dict[str, Any]) -> None:
            published.append((kind, data))

    app.relay.bus = RecordingBus()
    app.relay.announce_change(Change("resource_updated", "file:///a"))
    app.relay.announce_change(Change("tools"))
    assert published == [
        ("change", {"kind": "resource_updated", "uri": "file:///a"}),
        ("change", {"kind": "tools", "uri": None}),
    ]


# -- BusRelay.deliver: a session's events --------------------------------------------------------


async def test_ended_releases_what_the_session_holds_here(
    app: Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = app.legacy.runtimes.get("s1")
    question = asyncio.get_running_loop().create_future()
    runtime.pending["srv-1"] = question
    call = await sleeper(runtime, 1)
    stream = runtime.open_stream()
    ended: list[str] = []
    real = app.legacy.sessions.session_ended

    def session_ended(session_id: str) -> None:
        ended.append(session_id)
        real(session_id)

    monkeypatch.setattr(app.legacy.sessions, "session_ended", session_ended)
    app.relay.deliver("ended", {"sid": "s1"})
    assert ended == ["s1"]
    assert app.legacy.runtimes.peek("s1") is None
    assert question.cancelled()
    await asyncio.sleep(0)
    assert call.cancelled()
    assert stream.finished
    app.relay.deliver("ended", {"sid": "never-here"})  # nothing here: nothing to do
    assert ended == ["s1", "never-here"]


async def test_an_answer_resolves_the_question_waiting_here(app: Application) -> None:
    runtime = app.legacy.runtimes.get("s1")
    loop = asyncio.get_running_loop()
    ok, failed, numeric = loop.create_future(), loop.create_future(), loop.create_future()
    runtime.pending.update({"srv-a-1": ok, "srv-a-2": failed, "7": numeric})
    app.relay.deliver("answer", {"sid": "s1", "id": "srv-a-1", "result": {"action": "accept"}})
    error = {"code": -32600, "message": "declined"}
    app.relay.deliver("answer", {"sid": "s1", "id": "srv-a-2", "error": error})
    app.relay.deliver("answer", {"sid": "s1", "id": 7, "result": {}})
    assert ok.result() == {"result": {"action": "accept"}}
    assert failed.result() == {"error": error}
    assert numeric.result() == {"result": {}}
    # A second answer to the same question changes nothing.
    app.relay.deliver("answer", {"sid": "s1", "id": "srv-a-1", "result": {"action": "no"}})
    assert ok.result() == {"result": {"action": "accept"}}


async def test_malformed_answers_are_ignored(app: Application) -> None:
    runtime = app.legacy.runtimes.get("s1")
    waiting = asyncio.get_running_loop().create_future()
    runtime.pending["1"] = waiting
    malformed: list[dict[str, Any]] = [
        {"sid": "s1"},
        {"sid": "s1", "id": None, "result": {}},
        {"sid": "s1", "id": True, "result": {}},
        {"sid": "s1", "id": 1.0, "result": {}},
        {"sid": "s1", "id": ["1"], "result": {}},
        {"sid": "s1", "id": "1", "error": "not an object"},
        {"sid": "s1", "id": "1", "error": ["x"]},
        {"sid": "s1", "id": "unknown", "result": {}},
    ]
    for data in malformed:
        app.relay.deliver("answer", data)
    assert not waiting.done()


async def test_cancel_stops_the_call_running_here(app: Application) -> None:
    runtime = app.legacy.runtimes.get("s1")
    target = await sleeper(runtime, "req-1")
    other = await sleeper(runtime, 2)
    app.relay.deliver("cancel", {"sid": "s1", "params": {"requestId": "other"}})
    app.relay.deliver("cancel", {"sid": "s1", "params": "req-1"})
    app.relay.deliver("cancel", {"sid": "s1", "params": {"requestId": True}})
    app.relay.deliver("cancel", {"sid": "s1"})
    await asyncio.sleep(0)
    assert not target.done()
    app.relay.deliver("cancel", {"sid": "s1", "params": {"requestId": "req-1", "reason": "x"}})
    await asyncio.sleep(0)
    assert target.cancelled()
    assert not other.done()
    other.cancel()


async def test_subs_adds_or_removes_one_subscription_of_the_session_here(
    app: Application,
) -> None:
    runtime = app.legacy.runtimes.get("s1")
    runtime.subscriptions.apply("file:///old", True)
    app.relay.deliver("subs", {"sid": "s1", "add": "file:///a"})
    app.relay.deliver("subs", {"sid": "s1", "add": "db://b"})
    assert runtime.subscriptions.uris == {"file:///old", "file:///a", "db://b"}
    app.relay.deliver("subs", {"sid": "s1", "remove": "file:///old"})
    assert runtime.subscriptions.uris == {"file:///a", "db://b"}
    # Malformed: no URI string, or the whole-set shape of older replicas: nothing changes.
    for data in (
        {"sid": "s1", "add": 5},
        {"sid": "s1", "remove": ["file:///a"]},
        {"sid": "s1", "uris": []},
        {"sid": "s1"},
    ):
        app.relay.deliver("subs", data)
    assert runtime.subscriptions.uris == {"file:///a", "db://b"}


def test_publish_subscription_publishes_one_uri_not_the_set() -> None:
    published: list[tuple[str, dict[str, Any]]] = []

    class RecordingBus(MemoryBus):
        def publish(self, kind: str, data: dict[str, Any]) -> None:
            published.append((kind, data))

    bus = RecordingBus()
    publish_subscription(bus, "s1", "file:///a", True)
    publish_subscription(bus, "s1", "file:///a", False)
    assert published == [
        ("subs", {"sid": "s1", "add": "file:///a"}),
        ("subs", {"sid": "s1", "remove": "file:///a"}),
    ]


async def test_resync_reads_the_subscriptions_of_get_streams_again(app: Application) -> None:
    session = await app.sessions.create("2025-11-25", {}, {})
    await app.sessions.subscribe(session.id, "file:///kept")
    following = app.legacy.runtimes.get(session.id)
    await following.subscriptions.load(lambda: app.sessions.subscriptions(session.id))
    following.standalone_stream(app.hub, lambda: ALL_CAPS)
    # A removal this replica never heard of (the bus was away when it was announced).
    following.subscriptions.apply("file:///removed-elsewhere", True)
    idle = app.legacy.runtimes.get("s2")
    idle.subscriptions.loaded = True
    app.relay.deliver("resync", {})
    assert not idle.subscriptions.loaded  # read again when its GET stream opens
    await wait_until(lambda: following.subscriptions.loaded)
    assert following.subscriptions.uris == {"file:///kept"}


async def test_resync_that_cannot_know_the_updates_tells_every_followed_resource(
    app: Application,
) -> None:
    # Issue 35's chaos run: Redis restarted empty lost the log and a change published just
    # before it; a GET stream was told the lists changed, never its resource's update.
    runtime = app.legacy.runtimes.get("s1")
    runtime.subscriptions.apply("file:///a", True)
    runtime.subscriptions.apply("file:///b", True)
    standalone = runtime.standalone_stream(app.hub, lambda: ALL_CAPS)
    told = len(standalone.events_after(0))
    app.relay.deliver("resync", {"changes": []})  # the log says: nothing missed
    lists = len(standalone.events_after(0)) - told
    assert lists == 3
    app.relay.deliver("resync", {})  # unknown
    methods = [
        json.loads(event.payload).get("params", {}).get("uri", "list")
        for _, event in standalone.events_after(0)[told + lists :]
    ]
    assert sorted(methods) == ["file:///a", "file:///b", "list", "list", "list"]
    # And a 2026-07-28 listen stream following a resource (told only by the unknown one).
    granted = ListenFilter.grant(
        {"resourceSubscriptions": ["file:///c"]}, {"resources": {"subscribe": True}}
    )
    listen = app.hub.attach(ListenFrames(granted, "L"))
    app.relay.deliver("resync", {"changes": []})
    assert listen.queue.empty()
    app.relay.deliver("resync", {})
    assert [json.loads(frame)["params"]["uri"] for frame in frames(listen)] == ["file:///c"]


def test_a_message_for_an_http_sse_stream_reaches_it_only_where_it_is_held(
    app: Application,
) -> None:
    held = app.legacy.runtimes.get("s1")
    stream = held.standalone_stream(app.hub, lambda: ALL_CAPS)
    held.standalone_followers = 1  # a GET connection follows it here
    unfollowed = app.legacy.runtimes.get("s2")
    unfollowed.standalone_stream(app.hub, lambda: ALL_CAPS)
    app.relay.deliver("sse", {"sid": "s1", "m": '{"jsonrpc":"2.0","id":1,"result":{}}'})
    app.relay.deliver("sse", {"sid": "s2", "m": "{}"})
    app.relay.deliver("sse", {"sid": "s1", "m": 5})  # malformed: ignored
    app.relay.deliver("sse", {"sid": "unknown", "m": "{}"})
    assert [event.payload for _, event in stream.events_after(0)] == [
        b'{"jsonrpc":"2.0","id":1,"result":{}}'
    ]
    assert unfollowed.standalone is not None
    assert unfollowed.standalone.last_seq == 0
    assert app.legacy.runtimes.peek("unknown") is None


async def test_unknown_sessions_and_malformed_events_are_ignored(app: Application) -> None:
    stream = attach(app)
    runtime = app.legacy.runtimes.get("s1")
    runtime.subscriptions.apply("file:///keep", True)
    waiting = asyncio.get_running_loop().create_future()
    runtime.pending["1"] = waiting
    events: list[tuple[str, dict[str, Any]]] = [
        ("answer", {"sid": "unknown", "id": "1", "result": {}}),
        ("cancel", {"sid": "unknown", "params": {"requestId": 1}}),
        ("subs", {"sid": "unknown", "add": "file:///x"}),
        ("answer", {"id": "1", "result": {}}),
        ("answer", {"sid": None, "id": "1", "result": {}}),
        ("subs", {"sid": ["s1"], "remove": "file:///keep"}),
        ("ended", {"sid": 1}),
        ("ended", {}),
        ("no-such-kind", {"sid": "s1"}),
        ("no-such-kind", {}),
    ]
    for kind, data in events:
        app.relay.deliver(kind, data)
    # Nothing was created for the unknown session, and s1 is as it was.
    assert app.legacy.runtimes.peek("unknown") is None
    assert app.legacy.runtimes.ids() == ["s1"]
    assert runtime.subscriptions.uris == {"file:///keep"}
    assert not waiting.done()
    assert frames(stream) == []


# -- over a real bus ----------------------------------------------------------------------------


async def test_events_from_another_replica_arrive_through_the_bus(
    redis_server: RedisServer,
) -> None:
    prefix = fresh_prefix()
    links = [RedisLink(redis_server.url, prefix=prefix, timeout_s=0.5) for _ in range(2)]
    there, here = RedisBus(links[0]), RedisBus(links[1])
    app = Application(settings(), Catalog("replication-test", "1.0.0"))
    relay = BusRelay(app.hub, app.legacy.sessions, here)
    try:
        there.start(lambda kind, data: None)
        here.start(relay.deliver)
        async with asyncio.timeout(5):
            while not (there.subscribed and here.subscribed):  # noqa: ASYNC110 - no event
                await asyncio.sleep(0.005)
        stream = attach(app)
        runtime = app.legacy.runtimes.get("s1")
        question = asyncio.get_running_loop().create_future()
        runtime.pending["srv-x-1"] = question
        there.publish("change", {"kind": "tools", "uri": None})
        there.publish("answer", {"sid": "s1", "id": "srv-x-1", "result": {"ok": True}})
        async with asyncio.timeout(5):
            await question
        assert question.result() == {"result": {"ok": True}}
        assert frames(stream) == [b"tools None"]
    finally:
        for bus in (there, here):
            await bus.close()
        for link in links:
            await link.close()


# -- two apps over one test bus, no Redis ------------------------------------------------------


class PairedBus:
    """A test bus between two apps: each publish goes, through JSON as on Redis and on a later
    turn of the loop, to the other app's relay (never back to its own)."""

    def __init__(self, holders: set[str]) -> None:
        self.peer: PairedBus | None = None
        self.deliver: Deliver | None = None
        self.published: list[str] = []
        self.holders = holders  # the sessions whose stream either app holds

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        self.published.append(kind)
        peer = self.peer
        if peer is not None and peer.deliver is not None:
            wire = json.loads(json.dumps(data))
            asyncio.get_running_loop().call_soon(peer.deliver, kind, wire)

    async def send(self, kind: str, data: dict[str, Any]) -> bool | None:
        self.publish(kind, data)
        return self.peer is not None and self.peer.deliver is not None

    def start(self, deliver: Deliver) -> None:
        self.deliver = deliver

    async def hold(self, session_id: str) -> None:
        self.holders.add(session_id)

    def release(self, session_id: str) -> None:
        self.holders.discard(session_id)

    async def stream_held(self, session_id: str) -> bool:
        return session_id in self.holders

    async def close(self) -> None:
        self.deliver = None

    def status(self) -> dict[str, Any]:
        return {"kind": "paired"}


class Twins:
    """What two replicas share: the bus between them, and the sessions (as in Redis)."""

    def __init__(self) -> None:
        self.buses: list[PairedBus] = []
        self.sessions: OrderedDict[str, Any] = OrderedDict()
        self.subscriptions: dict[str, set[str]] = {}
        self.holders: set[str] = set()

    def bus(self) -> PairedBus:
        bus = PairedBus(self.holders)
        if self.buses:
            bus.peer, self.buses[-1].peer = self.buses[-1], bus
        self.buses.append(bus)
        return bus

    def store(self, **options: Any) -> MemorySessionStore:
        # Each replica's store keeps its own hooks (busy, ended) over the one set of sessions.
        store = MemorySessionStore(**options)
        store._sessions = self.sessions
        store._subscriptions = self.subscriptions
        return store


class SseStream:
    """A GET /sse held open on an ASGI app, read event by event."""

    def __init__(self, app: Application) -> None:
        self.app = app
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.left = asyncio.Event()
        self.buffer = b""
        self.task: asyncio.Task[None] | None = None

    async def open(self) -> str:
        """Open the stream; the URL the endpoint event names."""

        async def receive() -> dict[str, Any]:
            await self.left.wait()
            return {"type": "http.disconnect"}

        scope = sse_get_scope(b"127.0.0.1")

        async def send(message: MutableMapping[str, Any]) -> None:
            await self.sent.put(dict(message))

        self.task = asyncio.create_task(self.app(scope, receive, send))
        start = await asyncio.wait_for(self.sent.get(), 5)
        assert (start["type"], start["status"]) == ("http.response.start", 200)
        event, data = await self.event()
        assert event == "endpoint"
        return data

    async def event(self) -> tuple[str, str]:
        """The next event's name and data."""
        while b"\r\n\r\n" not in self.buffer:
            sent = await self.sent.get()
            assert sent["type"] == "http.response.body", sent
            assert sent.get("more_body"), "the stream ended"
            self.buffer += sent.get("body", b"")
        frame, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        fields = dict(line.split(": ", 1) for line in frame.decode().split("\r\n") if ": " in line)
        if "event" not in fields and "data" not in fields:
            return await self.event()  # a keep-alive comment
        return fields.get("event", "message"), fields.get("data", "")

    async def ended(self) -> None:
        """Read on until the server ends the response."""
        while True:
            sent = await self.sent.get()
            if sent["type"] == "http.response.body" and not sent.get("more_body"):
                return

    async def close(self) -> None:
        """The client leaves: the app's response must end."""
        self.left.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 5)

    async def cancel(self) -> None:
        """The app's task stopped, if it still runs (a test that failed before it closed)."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.wait([self.task])


@contextlib.asynccontextmanager
async def held_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Application, Application, SseStream, str]]:
    """Two apps built by ``create_app`` over one test bus and one session store, a GET /sse held
    on the second (``there``) and the URL its endpoint event names; the stream is closed after
    the test, and its task cancelled whatever happened, all within 5 s."""
    twins = Twins()
    monkeypatch.setattr(server.state.auto, "MemoryBus", twins.bus)
    monkeypatch.setattr(server.state.auto, "MemorySessionStore", twins.store)
    settings_of_both = settings(
        catalog="probe", records=["none"], keepalive_s=5.0, state_secret="twins " * 4
    )
    here, there = (create_app(settings_of_both) for _ in range(2))
    async with asyncio.timeout(5), here.lifespan(), there.lifespan():
        stream = SseStream(there)
        try:
            yield here, there, stream, await stream.open()
            await stream.close()
        finally:
            await stream.cancel()


PING = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
INITIALIZE = initialize("2024-11-05", client_info={"name": "twins", "version": "1"}, id=1)


async def post(app: Application, url: str, message: dict[str, Any]) -> int:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post(url, json=message)
    return answer.status_code


async def test_an_http_sse_call_on_one_app_reaches_the_stream_held_by_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with held_stream(monkeypatch) as (here, _there, stream, url):
        started = asyncio.get_running_loop().time()
        assert await post(here, url, INITIALIZE) == 202
        event, data = await stream.event()
        assert (event, json.loads(data)["id"]) == ("message", 1)
        assert json.loads(data)["result"]["protocolVersion"] == "2024-11-05"
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "echo", "arguments": {"text": "across"}}
        assert await post(here, url, call) == 202
        event, data = await stream.event()
        answer = json.loads(data)
        assert answer["id"] == 2
        assert answer["result"]["content"][0]["text"] == "across"
        assert asyncio.get_running_loop().time() - started < 1.0
        # It crossed the bus: the app that ran the call does not hold the stream.
        bus = here.shared.bus
        assert isinstance(bus, PairedBus)
        assert bus.published.count("sse") == 2
        assert not here.legacy.sessions.to_stream(url.split("=")[1], b"{}")


async def test_a_draining_app_serves_a_message_for_a_stream_another_app_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 35: a stopping replica keeps its idle kept-alive connections open a moment (a
    # proxy writing on one as it closed got a reset: 502), so a proxy may still send it a
    # message; one for a stream another replica holds is served, not refused with 503.
    async with held_stream(monkeypatch) as (here, _there, stream, url):
        assert await post(here, url, INITIALIZE) == 202
        await stream.event()
        here.begin_shutdown()
        await wait_until(lambda: here.sse is not None and here.sse.draining, limit=2)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "echo", "arguments": {"text": "while draining"}}
        assert await post(here, url, call) == 202
        _, data = await stream.event()
        assert json.loads(data)["result"]["content"][0]["text"] == "while draining"


async def refused(app: Application, url: str) -> bool:
    """Whether a post on the session is refused as not found (the store's delete is a task of
    its own: a few turns of the loop)."""
    for _ in range(50):
        if await post(app, url, PING) == 404:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_lost_bus_closes_the_http_sse_streams_held_here_and_ends_their_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with held_stream(monkeypatch) as (here, there, stream, url):
        assert await post(here, url, PING) == 202
        # What the other replica sends this stream from now on may be lost: it closes, and
        # its client connects again rather than wait for ever.
        there.relay.deliver("away", {})
        await stream.ended()
        assert await refused(here, url)
        assert there.sse is not None
        assert there.sse.held == {}


async def test_an_unsent_stream_message_ends_the_session_and_its_calls_on_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with held_stream(monkeypatch) as (here, _there, stream, url):
        session_id = url.split("=")[1]
        assert await post(here, url, INITIALIZE) == 202
        assert (await stream.event())[0] == "message"
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        call["params"] = {"name": "count_slowly", "arguments": {"steps": 1, "delay_ms": 2000}}
        assert await post(here, url, call) == 202
        assert here.sse is not None
        running = set(here.sse.calls)
        assert len(running) == 1
        # Its bus could not send a message of this call to the stream: nobody hears the
        # session's answers any more, so its calls stop here and the session ends everywhere.
        here.relay.deliver("unsent", {"k": "sse", "sid": session_id})
        await asyncio.wait(running)
        assert all(task.cancelled() for task in running)
        assert here.legacy.runtimes.peek(session_id) is None
        assert await refused(here, url)
        await stream.ended()  # the holder heard "ended"


async def test_a_post_for_a_session_whose_stream_no_replica_holds_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with held_stream(monkeypatch) as (here, _there, _stream, url):
        session_id = url.split("=")[1]
        assert await post(here, url, PING) == 202
        bus = here.shared.bus
        assert isinstance(bus, PairedBus)
        # The replica holding the stream died: nothing of it is left but the session.
        bus.holders.discard(session_id)
        assert await post(here, url, PING) == 404
        assert await refused(here, url)
