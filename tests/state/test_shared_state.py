"""Two replicas in one test process, sharing one real Redis: what each must see of the other.

Each replica is a full :class:`~server.app.Application` with its *own* catalog instance under a
real uvicorn on 127.0.0.1, so the only way anything reaches the other replica is Redis (the
bus, the session store, the stream mirror). ``tests/e2e/test_replicas.py`` runs the same kind of
checks against separate processes behind nginx.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from server.app import Application
from server.catalog import Catalog
from server.context import Context
from server.settings import Settings
from tests.support.core_helpers import add_toggle_tool
from tests.support.deploy_helpers import (
    INITIALIZE,
    legacy_headers,
    listen,
    modern_call,
    modern_headers,
    open_session,
    sse_get_headers,
    sse_messages,
)
from tests.support.live_server import ServerThread
from tests.support.mcp_client import sse_frames
from tests.support.redis_server import fresh_prefix

# Real uvicorn servers and a real Redis per test: end to end, outside the inner loop.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def shared_state_catalog() -> Catalog:
    catalog = Catalog("shared-state-test", "1.0.0")

    add_toggle_tool(catalog, "toggle")

    @catalog.tool
    async def ask_name(ctx: Context) -> str:
        """Ask the client for a name."""
        answer = await ctx.elicit("Name?", NAME_SCHEMA, key="name")
        return f"Hello, {(answer.content or {}).get('name')}!"

    @catalog.tool
    async def slow(ctx: Context, steps: int = 3) -> str:
        """Log a message per step, then answer."""
        for step in range(steps):
            await ctx.log("info", f"step {step}")
            await asyncio.sleep(0.05)
        return "done"

    @catalog.resource("test://doc", mime_type="text/plain")
    def doc() -> str:
        """A document whose updates clients can subscribe to."""
        return "text"

    @catalog.tool
    async def touch(uri: str = "test://doc") -> str:
        """Announce that the resource at `uri` changed."""
        catalog.notify_resource_updated(uri)
        return "touched"

    return catalog


ASKABLE: dict[str, Any] = {"elicitation": {}}


def replica_settings(redis_server: Any, prefix: str) -> Settings:
    """One replica's settings: the shared Redis and secret, short Redis timeouts, no records."""
    return Settings(
        redis_url=redis_server.url,
        redis_prefix=prefix,
        redis_timeout_s=0.5,
        state_secret="a shared secret for both replicas",
        records=["none"],
    )


@pytest.fixture
def replicas(redis_server: Any, tmp_path: Any) -> Iterator[list[str]]:
    prefix = fresh_prefix()  # each test its own keys and channel
    threads = []
    for _ in range(2):
        app = Application(replica_settings(redis_server, prefix), shared_state_catalog())
        threads.append(ServerThread(app).start())
    try:
        wait_ready([thread.url for thread in threads])
        yield [thread.url for thread in threads]
    finally:
        for thread in threads:
            thread.stop()


def wait_ready(urls: list[str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    for url in urls:
        while httpx.get(f"{url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, httpx.get(f"{url}/readyz").text
            time.sleep(0.05)


async def open_asking_session(client: httpx.AsyncClient, url: str) -> str:
    """A session whose client can be asked (elicitation) and hears every log level."""
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": ASKABLE}}
    answer = await client.post(f"{url}/mcp", json=initialize, headers=legacy_headers())
    sid: str = answer.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(client, url, initialized, sid)).status_code == 202
    level = {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}}
    assert (await post(client, url, level, sid)).status_code == 200
    return sid


async def send_modern(client: httpx.AsyncClient, url: str, message: dict[str, Any]) -> Any:
    return await client.post(f"{url}/mcp", json=message, headers=modern_headers(message))


async def post(client: httpx.AsyncClient, url: str, message: dict[str, Any], sid: str) -> Any:
    return await client.post(f"{url}/mcp", json=message, headers=legacy_headers(sid))


async def next_message(messages: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    async with asyncio.timeout(5):
        return await anext(messages)


@contextlib.asynccontextmanager
async def legacy_get_stream(
    client: httpx.AsyncClient, url: str, sid: str | None = None
) -> AsyncIterator[tuple[str, dict[str, str], AsyncIterator[dict[str, Any]]]]:
    """The GET stream of a legacy session on replica ``url`` (a new session unless ``sid``):
    the session id, the GET's headers and the stream's messages."""
    if sid is None:
        sid = await open_session(client, f"{url}/mcp")
    headers = sse_get_headers(sid)
    async with client.stream("GET", f"{url}/mcp", headers=headers) as stream:
        assert stream.status_code == 200
        yield sid, headers, sse_messages(stream)


async def test_a_session_opened_on_one_replica_is_served_and_ended_by_the_other(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_session(client, f"{a}/mcp")
        listed = await post(client, b, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, sid)
        assert listed.status_code == 200
        assert {tool["name"] for tool in listed.json()["result"]["tools"]} >= {"toggle", "slow"}
        level = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "logging/setLevel",
            "params": {"level": "error"},
        }
        assert (await post(client, b, level, sid)).json()["result"] == {}
        # The log level set through B is what a call through A sees: no info lines now.
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow"}}
        answer = await post(client, a, call, sid)
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["result"]["content"][0]["text"] == "done"

        ended = await client.delete(f"{b}/mcp", headers=legacy_headers(sid))
        assert ended.status_code == 200
        gone = await post(client, a, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, sid)
        assert gone.status_code == 404


async def test_a_tool_list_change_on_one_replica_reaches_listen_streams_on_the_other(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        message = listen(1)
        async with client.stream(
            "POST", f"{b}/mcp", json=message, headers=modern_headers(message)
        ) as stream:
            messages = sse_messages(stream)
            first = await next_message(messages)
            assert first["method"] == "notifications/subscriptions/acknowledged"
            started = time.monotonic()
            toggled = await client.post(
                f"{a}/mcp",
                json=modern_call("toggle", {}, 2),
                headers=modern_headers(modern_call("toggle", {}, 2)),
            )
            assert toggled.status_code == 200
            changed = await next_message(messages)
            assert changed["method"] == "notifications/tools/list_changed"
            assert time.monotonic() - started < 1.0


async def test_a_legacy_get_stream_hears_changes_made_on_the_other_replica(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with (
        httpx.AsyncClient(timeout=5) as client,
        legacy_get_stream(client, b) as (_, _, messages),
    ):
        await asyncio.sleep(0.1)  # the GET stream is attached before the change
        message = modern_call("toggle", {}, 1)
        await send_modern(client, a, message)
        changed = await next_message(messages)
        assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def test_an_answer_posted_to_the_other_replica_reaches_the_waiting_tool(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_asking_session(client, a)
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask_name"}}
        async with client.stream(
            "POST", f"{a}/mcp", json=call, headers=legacy_headers(sid)
        ) as stream:
            messages = sse_messages(stream)
            question = await next_message(messages)
            assert question["method"] == "elicitation/create"
            answer = {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {"action": "accept", "content": {"name": "Ada"}},
            }
            relayed = await post(client, b, answer, sid)
            assert relayed.status_code == 202
            result = await next_message(messages)
            assert result["id"] == 7
            assert result["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_a_call_stream_is_resumed_on_the_other_replica(replicas: list[str]) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_asking_session(client, a)
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"steps": 6}},
        }
        last_id = None
        async with client.stream(
            "POST", f"{a}/mcp", json=call, headers=legacy_headers(sid)
        ) as stream:
            async for frame in sse_frames(stream):
                if frame.id is not None and frame.id.split("_")[-1] == "2":
                    last_id = frame.id
                    break  # drop the connection after the second message
        assert last_id is not None
        headers = {**legacy_headers(sid), "Accept": "text/event-stream", "Last-Event-ID": last_id}
        async with client.stream("GET", f"{b}/mcp", headers=headers) as resumed:
            assert resumed.status_code == 200
            received = [message async for message in sse_messages(resumed)]
        logs = [m["params"]["data"] for m in received if m.get("method") == "notifications/message"]
        assert logs == [f"step {step}" for step in range(2, 6)]
        assert received[-1]["id"] == 9
        assert received[-1]["result"]["content"][0]["text"] == "done"
        # Fully delivered now: resuming again says so, on either replica.
        again = await client.get(
            f"{b}/mcp", headers={**headers, "Last-Event-ID": f"{last_id.rpartition('_')[0]}_9"}
        )
        assert again.status_code == 410


async def test_redis_away_gives_503_for_shared_state_and_keeps_modern_calls_working(
    redis_server: Any, replicas: list[str]
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_session(client, f"{a}/mcp")
        redis_server.stop()
        try:
            started = time.monotonic()
            refused = await post(client, b, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, sid)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == -32000
            assert "Redis" in refused.json()["error"]["message"]
            assert time.monotonic() - started < 3
            initialize = await client.post(
                f"{a}/mcp",
                json=INITIALIZE,
                headers=legacy_headers(),
            )
            assert initialize.status_code == 503
            message = modern_call("slow", {"steps": 1}, 2)
            served = await send_modern(client, a, message)
            assert served.status_code == 200
            assert served.json()["result"]["content"][0]["text"] == "done"
            ready = await client.get(f"{b}/readyz")
            assert ready.status_code == 503
            assert ready.json()["redis"]["connected"] is False
        finally:
            redis_server.start()
        # Redis is empty after the restart (no persistence): the old session is gone, new ones work.
        await asyncio.to_thread(wait_ready, [a, b])
        sid = await open_session(client, f"{b}/mcp")
        pong = await post(client, a, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, sid)
        assert pong.status_code == 200


async def test_a_replica_started_while_redis_is_away_serves_what_it_can_and_recovers(
    redis_server: Any,
) -> None:
    redis_server.stop()
    thread = None
    try:
        settings = replica_settings(redis_server, fresh_prefix())
        thread = ServerThread(
            Application(settings, shared_state_catalog()), check_health=True
        ).start()
        url = thread.url
        async with httpx.AsyncClient(timeout=5) as client:
            ready = await client.get(f"{url}/readyz")
            assert ready.status_code == 503
            assert ready.json()["redis"]["connected"] is False
            served = await send_modern(client, url, modern_call("slow", {"steps": 1}, 1))
            assert served.status_code == 200
            # A tool that changed something ran, but its change could not reach the other
            # replicas: an error, not a success whose notification is lost (issue 35).
            untold = await send_modern(client, url, modern_call("toggle", {}, 2))
            assert untold.status_code == 503
            assert "could not be shared" in untold.json()["error"]["message"]
            refused = await client.post(
                f"{url}/mcp",
                json=INITIALIZE,
                headers=legacy_headers(),
            )
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == -32000
            redis_server.start()
            await asyncio.to_thread(wait_ready, [url])
            sid = await open_session(client, f"{url}/mcp")
            pong = await post(client, url, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid)
            assert pong.status_code == 200
    finally:
        if redis_server.process is None:
            redis_server.start()
        if thread is not None:
            thread.stop()


async def test_a_subscription_made_through_one_replica_feeds_the_get_stream_on_the_other(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with (
        httpx.AsyncClient(timeout=5) as client,
        legacy_get_stream(client, b) as (sid, _, messages),
    ):
        subscribe = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "resources/subscribe",
            "params": {"uri": "test://doc"},
        }
        assert (await post(client, a, subscribe, sid)).status_code == 200
        await asyncio.sleep(0.1)  # the subscription travels to B on the bus
        touch = modern_call("touch", {}, 2)
        await send_modern(client, a, touch)
        updated = await next_message(messages)
        assert updated == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "test://doc"},
        }


async def test_a_get_stream_resumed_on_the_other_replica_replays_what_was_missed(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_session(client, f"{a}/mcp")
        headers = sse_get_headers(sid)
        toggle = modern_call("toggle", {}, 1)
        last_id = None
        async with client.stream("GET", f"{a}/mcp", headers=headers) as stream:
            await asyncio.sleep(0.1)
            await send_modern(client, a, toggle)
            async with asyncio.timeout(5):
                async for frame in sse_frames(stream):
                    if frame.id is not None and not frame.id.endswith("_0"):
                        last_id = frame.id
                        break  # got the first change's event: the connection drops
        assert last_id is not None
        # Missed while away: a change that A's GET stream keeps for the resume.
        await send_modern(client, a, toggle)
        await asyncio.sleep(0.2)  # copied to Redis by then
        resume = {**headers, "Last-Event-ID": last_id}
        async with client.stream("GET", f"{b}/mcp", headers=resume) as resumed:
            assert resumed.status_code == 200
            messages = sse_messages(resumed)
            missed = await next_message(messages)
            assert missed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            # ... and the stream goes on from B: a change made on A arrives here too.
            await send_modern(client, a, toggle)
            later = await next_message(messages)
            assert later == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def subscription(method: str, uri: str, id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": f"resources/{method}", "params": {"uri": uri}}


def updated(uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


async def test_subscriptions_made_before_the_get_stream_opens_elsewhere_are_read_from_redis(
    replicas: list[str],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(timeout=5) as client:
        sid = await open_session(client, f"{a}/mcp")
        for number, uri in enumerate(("test://doc", "test://other")):
            assert (await post(client, a, subscription("subscribe", uri, number), sid)).is_success
        # B has never served this session: its GET stream reads the set from Redis.
        async with legacy_get_stream(client, b, sid) as (_, _, messages):
            await asyncio.sleep(0.1)  # the GET stream is attached before the change
            await send_modern(client, a, modern_call("touch", {"uri": "test://doc"}, 3))
            assert await next_message(messages) == updated("test://doc")
            # Unsubscribing on A reaches B as one removal: doc is no longer offered.
            unsubscribe = subscription("unsubscribe", "test://doc", 4)
            assert (await post(client, a, unsubscribe, sid)).is_success
            await asyncio.sleep(0.1)  # the removal travels to B on the bus
            await send_modern(client, a, modern_call("touch", {"uri": "test://doc"}, 5))
            await send_modern(client, a, modern_call("touch", {"uri": "test://other"}, 6))
            assert await next_message(messages) == updated("test://other")


async def test_a_last_event_id_redis_cannot_hold_is_400_and_redis_stays_ready(
    replicas: list[str],
) -> None:
    _, b = replicas
    async with (
        httpx.AsyncClient(timeout=5) as client,
        legacy_get_stream(client, b) as (_, headers, messages),
    ):
        for last_event_id in (
            f"abcdef1_{2**64}",  # one past a Redis stream id's sequence
            "abcdef1_" + "9" * 30,
            "ab:cd*_1",  # would be a key pattern
            "a" * 200 + "_1",
        ):
            refused = await client.get(
                f"{b}/mcp", headers={**headers, "Last-Event-ID": last_event_id}
            )
            assert refused.status_code == 400, (last_event_id, refused.text)
            assert "Last-Event-ID" in refused.json()["error"]["message"]
        # The largest sequence a stream id holds reaches Redis, which has nothing for it.
        largest = {**headers, "Last-Event-ID": f"abcdef1_{2**64 - 1}"}
        assert (await client.get(f"{b}/mcp", headers=largest)).status_code == 410
        ready = await client.get(f"{b}/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["redis"]["connected"] is True
        # No resync: past the time the bus listener takes to notice a lost Redis (1 s)
        # and to resubscribe (1 s), the GET stream was told of no list change.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await anext(messages)
        assert (await client.get(f"{b}/readyz")).status_code == 200
