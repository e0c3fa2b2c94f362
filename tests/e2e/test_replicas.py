"""Two replicas sharing state through a real Redis, behind a real round-robin nginx.

The harness is :class:`tests.support.replicas.Replicas`: ``python -m server`` processes with the
same ``MCP_STATE_SECRET`` and ``MCP_REDIS_URL``, serving ``tests/support/replica_catalog.py``,
and nginx with the shipped config made plain round robin (no affinity). Most checks talk to a named
replica directly (A = ``replica_urls[0]``, B = ``replica_urls[1]``), so "made on A, seen on B"
is certain and not left to the balancer; the nginx checks show the same through the proxy.

What is checked:

- health and readiness, and stateless 2026-07-28 requests through nginx landing on both
  replicas (a cursor or a requestState from one replica is good on the other);
- a tool list change or a resource update made on A reaches ``subscriptions/listen`` streams
  held on A and on B, and a legacy GET stream held on B, within a second;
- a legacy session is shared: initialize on A, use it on B; DELETE on B, gone on A; the same
  through nginx;
- a legacy call on A that asks the client (elicitation, sampling) completes on A when the
  client's answer is POSTed to B;
- Redis taken away mid-run and brought back (its own harness and Redis): 2026-07-28 calls go
  on, a legacy initialize gets 503 with a JSON-RPC error (no 500, no hang), ``/readyz`` says
  not ready and then ready again, legacy works again, and every request sent has exactly one
  record in the replicas' record files.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_nginx import NGINX, SHIPPED
from tests.support.deploy_helpers import (
    legacy_headers,
    listen,
    modern,
    modern_call,
    modern_headers,
    open_session,
    read_records,
    sse_get_headers,
    sse_messages,
)
from tests.support.mcp_client import initialize, legacy, notification, tool_call
from tests.support.redis_server import RedisServer
from tests.support.replica_catalog import COUNTER_URI
from tests.support.replicas import Replicas, round_robin_config

DELIVERY_LIMIT_S = 1.0  # a change on one replica reaches streams on the others within this
WAIT_S = 3.0  # how long a test waits for something before it says it never came
REQUEST_TIMEOUT = httpx.Timeout(5.0, read=30.0)
CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}}
LIST_CHANGED = "notifications/tools/list_changed"

needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    with Replicas(
        2,
        extra_env={
            "MCP_PAGE_SIZE": "2",  # so tools/list pages: a cursor from A is read on B
            "MCP_CLIENT_REQUEST_TIMEOUT_S": "10",  # an unanswered ask does not outlive the test
        },
        redis=redis_server,
        nginx=NGINX is not None,
        workdir=tmp_path_factory.mktemp("replicas"),
    ) as running:
        yield running


def mcp(base: str) -> str:
    return f"{base}/mcp"


# -- messages and streams -----------------------------------------------------------------


async def post_modern(client: httpx.AsyncClient, base: str, message: dict[str, Any]) -> Any:
    answer = await client.post(mcp(base), json=message, headers=modern_headers(message))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "result" in body, body
    return body["result"]


async def toggle(client: httpx.AsyncClient, base: str, id: Any) -> None:
    result = await post_modern(client, base, modern_call("toggle_tool", {}, id))
    assert result["content"][0]["text"] in ("added", "removed"), result


class Feed:
    """The JSON-RPC messages of one SSE response, read by a background task, each with the
    ``time.perf_counter()`` of its arrival."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, dict[str, Any]]] = []
        self.arrived = asyncio.Event()
        self.ended = False

    async def pump(self, response: httpx.Response) -> None:
        try:
            async for message in sse_messages(response):
                self.messages.append((time.perf_counter(), message))
                self.arrived.set()
        except httpx.HTTPError:
            pass
        finally:
            self.ended = True
            self.arrived.set()

    async def first(
        self, predicate: Callable[[dict[str, Any]], bool], limit: float = WAIT_S, after: int = 0
    ) -> tuple[float, dict[str, Any]] | None:
        """The first message (from index ``after``) that matches, waiting up to ``limit``."""
        deadline = time.monotonic() + limit
        seen = after
        while True:
            for arrival, message in self.messages[seen:]:
                if predicate(message):
                    return arrival, message
            seen = max(seen, len(self.messages))
            left = deadline - time.monotonic()
            if left <= 0 or self.ended:
                return None
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self.arrived.wait()


@contextlib.asynccontextmanager
async def sse_feed(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: dict[str, str],
    message: dict[str, Any] | None = None,
) -> AsyncIterator[Feed]:
    """Open an SSE response (200 expected) and read it in the background while in use."""
    async with client.stream(method, url, json=message, headers=headers) as response:
        if response.status_code != 200:
            body = (await response.aread()).decode(errors="replace")
            pytest.fail(f"{method} {url}: HTTP {response.status_code}: {body[:500]}")
        assert response.headers["content-type"].startswith("text/event-stream")
        feed = Feed()
        task = asyncio.create_task(feed.pump(response))
        try:
            yield feed
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def listen_stream(
    client: httpx.AsyncClient, base: str, message: dict[str, Any]
) -> AsyncIterator[Feed]:
    """A ``subscriptions/listen`` stream on ``base``, open once its ack has arrived."""
    headers = modern_headers(message, "text/event-stream")
    async with sse_feed(client, "POST", mcp(base), headers, message) as feed:
        ack = await feed.first(
            lambda m: m.get("method") == "notifications/subscriptions/acknowledged"
        )
        assert ack is not None, f"no acknowledgement on the listen stream at {base}"
        yield feed


def method_is(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda message: message.get("method") == name


async def records_of(replicas: Replicas, ids: set[Any], limit: float = 3) -> list[set[Any]]:
    """Which of ``ids`` (JSON-RPC ids of requests) each replica has recorded so far."""
    deadline = time.monotonic() + limit
    while True:
        found = [
            {record["jsonrpc_id"] for record in records if record["jsonrpc_id"] in ids}
            for records in replicas.records()
        ]
        if set().union(*found) == ids or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


# -- health and the stateless era through nginx -------------------------------------------


@pytest.mark.anyio
async def test_every_replica_and_nginx_are_alive_and_ready(replicas: Replicas) -> None:
    bases = [*replicas.replica_urls, *([replicas.url] if replicas.nginx else [])]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        for base in bases:
            for probe in ("healthz", "readyz"):
                answer = await client.get(f"{base}/{probe}")
                assert answer.status_code == 200, (base, probe, answer.text)


@needs_nginx
@pytest.mark.anyio
async def test_stateless_requests_through_nginx_are_spread_over_the_replicas(
    replicas: Replicas,
) -> None:
    ids = {f"spread-{n}" for n in range(6)}
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        for id_ in sorted(ids):
            result = await post_modern(
                client, replicas.url, modern_call("echo", {"text": id_}, id_)
            )
            assert result["content"][0]["text"] == id_
    served = await records_of(replicas, ids)
    assert set().union(*served) == ids, served
    assert all(served), f"round robin left a replica idle: {served}"


@pytest.mark.anyio
async def test_a_cursor_and_a_request_state_from_one_replica_are_good_on_the_other(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls[:2]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        first = await post_modern(client, a, modern("tools/list", id="page-1"))
        assert "nextCursor" in first, first
        second = await post_modern(
            client, b, modern("tools/list", {"cursor": first["nextCursor"]}, id="page-2")
        )
        assert second["tools"], second
        names = {tool["name"] for tool in first["tools"] + second["tools"]}
        assert len(names) == len(first["tools"]) + len(second["tools"])

        meta = {"io.modelcontextprotocol/clientCapabilities": CAPABILITIES}
        asked = await post_modern(client, a, modern_call("ask_name", {}, "ask-1", **meta))
        assert asked["resultType"] == "input_required", asked
        retry = modern(
            "tools/call",
            {
                "name": "ask_name",
                "arguments": {},
                "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
                "requestState": asked["requestState"],
                "_meta": meta,
            },
            id="ask-2",
        )
        done = await post_modern(client, b, retry)
        assert done["resultType"] == "complete", done
        assert done["content"][0]["text"] == "Hello, Ada!"


# -- notifications across replicas ----------------------------------------------------------


@pytest.mark.anyio
async def test_a_tool_list_change_on_a_reaches_listen_streams_on_a_and_b_within_a_second(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls[:2]
    async with (
        httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client,
        listen_stream(client, a, listen("listen-a")) as on_a,
        listen_stream(client, b, listen("listen-b")) as on_b,
    ):
        started = time.perf_counter()
        await toggle(client, a, "toggle-listen")
        same = await on_a.first(method_is(LIST_CHANGED))
        other = await on_b.first(method_is(LIST_CHANGED))
    assert same is not None, "the change did not reach the listen stream on its own replica"
    assert other is not None, f"the change on A never reached the listen stream on B ({WAIT_S} s)"
    latencies = {"A (same)": same[0] - started, "B (other)": other[0] - started}
    print("list change on A ->", {k: f"{v * 1000:.1f} ms" for k, v in latencies.items()})
    assert latencies["B (other)"] < DELIVERY_LIMIT_S, latencies


@pytest.mark.anyio
async def test_a_resource_update_on_a_reaches_a_listen_stream_on_b_within_a_second(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls[:2]
    message = modern(
        "subscriptions/listen",
        {"notifications": {"resourceSubscriptions": [COUNTER_URI]}},
        id="listen-resource",
    )
    async with (
        httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client,
        listen_stream(client, b, message) as on_b,
    ):
        started = time.perf_counter()
        result = await post_modern(client, a, modern_call("touch", {}, "touch-1"))
        assert result["content"][0]["text"] == f"touched {COUNTER_URI}"
        update = await on_b.first(method_is("notifications/resources/updated"))
    assert update is not None, f"the update on A never reached the listen stream on B ({WAIT_S} s)"
    assert update[1]["params"]["uri"] == COUNTER_URI
    latency = update[0] - started
    print(f"resource update on A -> B: {latency * 1000:.1f} ms")
    assert latency < DELIVERY_LIMIT_S


@pytest.mark.anyio
async def test_a_tool_list_change_on_a_reaches_a_legacy_get_stream_on_b_within_a_second(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls[:2]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        session_id = await open_session(client, mcp(a))
        try:
            async with sse_feed(client, "GET", mcp(b), sse_get_headers(session_id)) as on_b:
                await asyncio.sleep(0.1)  # (a margin: the 200 came after the stream attached)
                started = time.perf_counter()
                await toggle(client, a, "toggle-get")
                change = await on_b.first(method_is(LIST_CHANGED))
        finally:
            await client.delete(mcp(a), headers=sse_get_headers(session_id))
    assert change is not None, f"the change on A never reached the GET stream on B ({WAIT_S} s)"
    latency = change[0] - started
    print(f"list change on A -> legacy GET stream on B: {latency * 1000:.1f} ms")
    assert latency < DELIVERY_LIMIT_S


# -- legacy sessions across replicas --------------------------------------------------------


@pytest.mark.anyio
async def test_a_legacy_session_opened_on_a_is_usable_on_b_and_deleted_everywhere(
    replicas: Replicas,
) -> None:
    a, b = replicas.replica_urls[:2]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        answer = await client.post(mcp(a), json=initialize(id="init-a"), headers=legacy_headers())
        assert answer.status_code == 200, answer.text
        session_id = answer.headers["mcp-session-id"]
        done = await client.post(
            mcp(b),
            json=notification("notifications/initialized"),
            headers=legacy_headers(session_id),
        )
        assert done.status_code == 202, f"notifications/initialized on B: {done.text}"
        for base, id_ in ((b, "list-b"), (a, "list-a")):
            listed = await client.post(
                mcp(base),
                json=legacy("tools/list", id=id_),
                headers=legacy_headers(session_id),
            )
            assert listed.status_code == 200, f"tools/list on {base}: {listed.text}"
            assert any(tool["name"] == "echo" for tool in listed.json()["result"]["tools"])
        deleted = await client.delete(mcp(b), headers=sse_get_headers(session_id))
        assert deleted.status_code == 200, f"DELETE on B: {deleted.text}"
        for base, id_ in ((a, "after-a"), (b, "after-b")):
            gone = await client.post(
                mcp(base),
                json=legacy("tools/list", id=id_),
                headers=legacy_headers(session_id),
            )
            assert gone.status_code == 404, f"after DELETE on B, {base} answered {gone.text}"


@needs_nginx
@pytest.mark.anyio
async def test_a_legacy_session_works_through_round_robin_nginx(replicas: Replicas) -> None:
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        session_id = await open_session(client, mcp(replicas.url))
        ids = {f"nginx-list-{n}" for n in range(4)}
        for id_ in sorted(ids):
            listed = await client.post(
                mcp(replicas.url),
                json=tool_call("echo", {"text": id_}, id=id_),
                headers=legacy_headers(session_id),
            )
            assert listed.status_code == 200, listed.text
            assert listed.json()["result"]["content"][0]["text"] == id_
        served = await records_of(replicas, ids)
        assert all(served), f"round robin left a replica idle: {served}"
        deleted = await client.delete(mcp(replicas.url), headers=sse_get_headers(session_id))
        assert deleted.status_code == 200, deleted.text
        for n in range(2):  # one lands on each replica
            gone = await client.post(
                mcp(replicas.url),
                json=legacy("tools/list", id=f"nginx-gone-{n}"),
                headers=legacy_headers(session_id),
            )
            assert gone.status_code == 404, gone.text


ASKS = {
    "elicitation": (
        "ask_name",
        "elicitation/create",
        {"action": "accept", "content": {"name": "Ada"}},
        "Hello, Ada!",
    ),
    "sampling": (
        "ask_model",
        "sampling/createMessage",
        {
            "role": "assistant",
            "content": {"type": "text", "text": "four"},
            "model": "test-model",
            "stopReason": "endTurn",
        },
        "The model said: four",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", sorted(ASKS))
async def test_a_client_answer_posted_to_b_completes_the_call_waiting_on_a(
    replicas: Replicas, kind: str
) -> None:
    tool, method, answer, expected = ASKS[kind]
    a, b = replicas.replica_urls[:2]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
        init = await client.post(
            mcp(a),
            json=initialize(capabilities=CAPABILITIES, id=f"init-{kind}"),
            headers=legacy_headers(),
        )
        assert init.status_code == 200, init.text
        session_id = init.headers["mcp-session-id"]
        headers = legacy_headers(session_id)
        done = await client.post(
            mcp(a), json=notification("notifications/initialized"), headers=headers
        )
        assert done.status_code == 202, done.text
        try:
            call = tool_call(tool, id=f"call-{kind}")
            async with sse_feed(client, "POST", mcp(a), headers, call) as on_a:
                asked = await on_a.first(method_is(method))
                assert asked is not None, f"A did not ask the client ({method})"
                request = asked[1]
                reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer}
                posted = await client.post(mcp(b), json=reply, headers=headers)
                assert posted.status_code == 202, f"the answer POSTed to B: {posted.text}"
                final = await on_a.first(lambda m: m.get("id") == call["id"], limit=5)
            assert final is not None, "the call on A never completed after the answer went to B"
            assert final[1]["result"]["content"][0]["text"] == expected, final[1]
        finally:
            await client.delete(mcp(a), headers=sse_get_headers(session_id))


# -- Redis away mid-run ------------------------------------------------------------------


class Sent:
    """Every MCP request sent in the fault test, as (verb, method, JSON-RPC id)."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str | None, Any]] = Counter()

    async def post(
        self, client: httpx.AsyncClient, base: str, message: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        self.requests["POST", message["method"], message.get("id")] += 1
        try:
            return await client.post(mcp(base), json=message, headers=headers, timeout=5)
        except httpx.TimeoutException:
            pytest.fail(f"{message['method']} to {base} hung (no answer within 5 s)")

    async def open_session(self, client: httpx.AsyncClient, base: str, tag: str) -> str:
        answer = await self.post(client, base, initialize(id=f"init-{tag}"), legacy_headers())
        assert answer.status_code == 200, answer.text
        session_id = answer.headers["mcp-session-id"]
        initialized = notification("notifications/initialized")
        done = await self.post(client, base, initialized, legacy_headers(session_id))
        assert done.status_code == 202, done.text
        return session_id


async def readiness(client: httpx.AsyncClient, bases: list[str]) -> list[int]:
    statuses = []
    for base in bases:
        try:
            statuses.append((await client.get(f"{base}/readyz", timeout=3)).status_code)
        except httpx.HTTPError:
            statuses.append(0)
    return statuses


async def wait_readiness(
    client: httpx.AsyncClient, bases: list[str], status: int, limit: float = 10
) -> list[int]:
    deadline = time.monotonic() + limit
    while True:
        statuses = await readiness(client, bases)
        if all(found == status for found in statuses) or time.monotonic() > deadline:
            return statuses
        await asyncio.sleep(0.1)


async def during_the_outage(
    client: httpx.AsyncClient, sent: Sent, a: str, b: str, before: str
) -> None:
    """What must hold while Redis is away (``before``: a legacy session made before)."""
    for base, id_ in ((a, "outage-a"), (b, "outage-b")):
        message = modern_call("echo", {"text": id_}, id_)
        answer = await sent.post(client, base, message, modern_headers(message))
        assert answer.status_code == 200, f"modern call during the outage: {answer.text}"
        assert answer.json()["result"]["content"][0]["text"] == id_

    refused = await sent.post(client, a, initialize(id="init-outage"), legacy_headers())
    assert refused.status_code == 503, (
        f"legacy initialize during the outage: HTTP {refused.status_code} {refused.text[:300]}"
    )
    body = refused.json()
    assert body["jsonrpc"] == "2.0", body
    assert body["id"] == "init-outage", body
    assert isinstance(body["error"]["code"], int), body
    assert "mcp-session-id" not in refused.headers

    # A session made before: served or refused with 503, never lost (404) or 500.
    during = await sent.post(
        client, b, legacy("tools/list", id="outage-list"), legacy_headers(before)
    )
    assert during.status_code in (200, 503), during.text
    assert during.json()["id"] == "outage-list", during.text

    statuses = await wait_readiness(client, [a, b], 503)
    assert statuses == [503, 503], f"/readyz during the outage: {statuses}"


def assert_every_request_recorded(harness: Replicas, sent: Sent) -> None:
    """Exactly one request record per request sent (read after a graceful stop)."""
    records = [record for path in harness.records_files for record in read_records(path)]
    requests = [record for record in records if record["kind"] == "request"]
    got = Counter((r["verb"], r["method"], r["jsonrpc_id"]) for r in requests)
    assert got == sent.requests, {"missing": sent.requests - got, "extra": got - sent.requests}
    assert not [r for r in requests if (r["status"] or 0) >= 500 and r["status"] != 503]
    (outage_init,) = [r for r in requests if r["jsonrpc_id"] == "init-outage"]
    assert outage_init["status"] == 503


@pytest.mark.anyio
async def test_redis_away_and_back(tmp_path: Path) -> None:
    # Its own Redis and replicas: this Redis is stopped, and the records are counted exactly.
    redis = RedisServer().start()
    harness = Replicas(2, redis=redis, nginx=False, workdir=tmp_path)
    sent = Sent()
    try:
        harness.start()
        a, b = harness.replica_urls[:2]
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
            # Before: a legacy session made on A works on B.
            before = await sent.open_session(client, a, "before")
            listed = await sent.post(
                client, b, legacy("tools/list", id="before-list"), legacy_headers(before)
            )
            assert listed.status_code == 200, listed.text

            redis.stop()
            try:
                await during_the_outage(client, sent, a, b, before)
            finally:
                if redis.process is None:
                    redis.start()

            statuses = await wait_readiness(client, [a, b], 200)
            assert statuses == [200, 200], f"/readyz after Redis came back: {statuses}"
            after = await sent.open_session(client, b, "after")
            listed = await sent.post(
                client, a, legacy("tools/list", id="after-list"), legacy_headers(after)
            )
            assert listed.status_code == 200, f"legacy after the restart: {listed.text}"
            message = modern_call("echo", {"text": "after"}, "after-modern")
            answer = await sent.post(client, b, message, modern_headers(message))
            assert answer.status_code == 200, answer.text

        harness.stop_replicas()  # SIGTERM: graceful, every record written
        assert_every_request_recorded(harness, sent)
    finally:
        harness.stop()
        redis.close()


def test_the_harness_keeps_the_shipped_upstream_settings_but_no_affinity() -> None:
    # What the replicas run behind is the shipped config: its server parameters (max_fails=0)
    # and upstream keep-alive stay; only the addresses change, and any pinning goes.
    pinned = SHIPPED.read_text().replace("upstream mcp_app {", "upstream mcp_app {\n    ip_hash;")
    text = round_robin_config(pinned, ["127.0.0.1:1", "127.0.0.1:2"], "127.0.0.1:3")
    block = text[text.index("upstream mcp_app") : text.index("}", text.index("upstream mcp_app"))]
    assert "ip_hash" not in block
    assert "server 127.0.0.1:1 max_fails=0;" in block
    assert "server 127.0.0.1:2 max_fails=0;" in block
    assert "keepalive_timeout 4s;" in block
    assert "mcp-a" not in block
