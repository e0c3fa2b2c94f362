"""Silent long calls stay alive: a call that sends nothing for ``keepalive_s`` is answered as a
stream with keep-alives (SSE comments; whitespace before the JSON for a client that takes
only JSON), in both eras, so that a proxy's idle timeout does not cut it (issue 28).

A real uvicorn on 127.0.0.1 serves a small catalog with ``keepalive_s`` 0.2 s and writes
records to a file; the tests read the raw bytes as they arrive (httpx's ``aiter_raw``), so
they see when each keep-alive came, not only what the body held at the end. The same through
a real nginx with a short ``proxy_read_timeout`` is tests/e2e/test_nginx_silent_calls.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from server import Catalog, Context
from server.app import create_app
from server.errors import ServiceUnavailable
from server.settings import Settings
from tests.support import mcp_client as mcp
from tests.support.live_server import ServerThread
from tests.support.polling import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEEPALIVE_S = 0.2
SILENCE_S = 0.9  # four and a half keep-alive periods
JSON_ONLY = "application/json"
SSE_ONLY = "text/event-stream"


def silent_catalog() -> Catalog:
    catalog = Catalog("silent-calls-test", "1.0.0")

    @catalog.tool
    async def silent(seconds: float) -> str:
        """Sends nothing for ``seconds``, then answers."""
        await asyncio.sleep(seconds)
        return f"silent for {seconds} s"

    @catalog.tool
    async def silent_then_busy(seconds: float) -> str:
        """Sends nothing for ``seconds``, then fails with a 503-class error."""
        await asyncio.sleep(seconds)
        raise ServiceUnavailable("busy after a silence")

    @catalog.tool
    async def silent_then_progress(ctx: Context, seconds: float) -> str:
        """Silent for ``seconds``, then reports progress once and answers."""
        await asyncio.sleep(seconds)
        await ctx.report_progress(1, 1, "after the silence")
        return "loud at last"

    return catalog


@dataclass
class Live:
    server: ServerThread
    records: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    records = tmp_path_factory.mktemp("silent") / "records.jsonl"
    settings = Settings(
        _env_file=None,
        keepalive_s=KEEPALIVE_S,
        records=["file"],
        records_file=str(records),
    )
    server = ServerThread(create_app(settings, silent_catalog()), graceful_timeout=1).start()
    try:
        yield Live(server, records)
    finally:
        server.stop()


@pytest.fixture
async def http(live: Live) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.server.url, timeout=5) as client:
        yield client


@dataclass
class Answer:
    """A response as it arrived: status, headers, and each piece of the body with the
    seconds from the request to its arrival."""

    status: int
    headers: httpx.Headers
    pieces: list[tuple[float, bytes]]

    @property
    def body(self) -> bytes:
        return b"".join(piece for _, piece in self.pieces)

    @property
    def content_type(self) -> str:
        return self.headers["content-type"]

    def messages(self) -> list[dict[str, Any]]:
        return mcp.messages_of(self.body.decode())

    def comments(self) -> int:
        return sum(line.startswith(":") for line in self.body.decode().splitlines())


async def post(http: httpx.AsyncClient, message: Any, headers: dict[str, str]) -> Answer:
    started = time.perf_counter()
    pieces: list[tuple[float, bytes]] = []
    content = json.dumps(message)
    async with http.stream("POST", "/mcp", content=content, headers=headers) as response:
        async for piece in response.aiter_raw():
            pieces.append((time.perf_counter() - started, piece))
        return Answer(response.status_code, response.headers, pieces)


def call(name: str, seconds: float, id: Any) -> dict[str, Any]:
    return mcp.modern("tools/call", {"name": name, "arguments": {"seconds": seconds}}, id)


async def modern(http: httpx.AsyncClient, message: dict[str, Any], accept: str) -> Answer:
    return await post(http, message, mcp.modern_headers(message, accept))


def text_of(message: dict[str, Any]) -> str:
    return str(message["result"]["content"][0]["text"])


def assert_kept_alive(answer: Answer) -> None:
    """Something arrived within about one keep-alive period of the request, and no gap
    between arrivals was much longer than one."""
    times = [0.0] + [at for at, _ in answer.pieces]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # A coarse timer fires up to a slot late, and a loaded machine adds more: the bound is
    # three periods, still well below the silence the call keeps (SILENCE_S).
    assert max(gaps) < 3 * KEEPALIVE_S, gaps


async def records_of(live: Live, ids: set[Any]) -> dict[Any, dict[str, Any]]:
    """The request records of ``ids``, by JSON-RPC id."""
    found: dict[Any, dict[str, Any]] = {}

    def read() -> bool:
        found.clear()
        for record in all_records(live):
            if record["kind"] == "request" and record.get("jsonrpc_id") in ids:
                found[record["jsonrpc_id"]] = record
        return set(found) == ids

    await wait_until(read)
    return found


def all_records(live: Live) -> list[dict[str, Any]]:
    if not live.records.exists():
        return []
    return [json.loads(line) for line in live.records.read_text().splitlines()]


async def stream_record_of(live: Live, request: dict[str, Any]) -> dict[str, Any]:
    """The stream record of a request that streamed (written when its stream ended)."""
    found: list[dict[str, Any]] = []

    def read() -> bool:
        found[:] = [
            record
            for record in all_records(live)
            if record["kind"] == "stream" and record["request_id"] == request["request_id"]
        ]
        return bool(found)

    await wait_until(read)
    return found[0]


# == the modern era ==============================================================================


async def test_a_silent_modern_call_becomes_sse_with_comments_then_its_result(
    live: Live, http: httpx.AsyncClient
) -> None:
    answer = await modern(http, call("silent", SILENCE_S, "m-silent"), mcp.BOTH)
    assert answer.status == 200
    assert answer.content_type == "text/event-stream"
    assert answer.comments() >= 3
    (result,) = answer.messages()
    assert result["id"] == "m-silent"
    assert text_of(result) == f"silent for {SILENCE_S} s"
    assert answer.pieces[0][0] < SILENCE_S / 2  # the first keep-alive: not with the result
    assert_kept_alive(answer)
    records = await records_of(live, {"m-silent"})
    assert records["m-silent"]["status"] == 200
    assert records["m-silent"]["streaming"] is True
    stream = await stream_record_of(live, records["m-silent"])
    assert stream["bytes_out"] == len(answer.body)
    assert stream["events"] == 1  # the result; keep-alive comments are not events
    assert (stream["end"], stream["outcome"]) == ("complete", "ok")


async def test_a_quick_modern_call_still_answers_plain_json(http: httpx.AsyncClient) -> None:
    answer = await modern(http, call("silent", 0.02, "m-quick"), mcp.BOTH)
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.body)
    assert text_of(json.loads(answer.body)) == "silent for 0.02 s"


async def test_a_silent_modern_call_to_a_json_only_client_is_json_led_by_whitespace(
    live: Live, http: httpx.AsyncClient
) -> None:
    answer = await modern(http, call("silent", SILENCE_S, "m-json"), JSON_ONLY)
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert "content-length" not in answer.headers  # chunked: its length was not known
    body = answer.body
    padding = body[: len(body) - len(body.lstrip())]
    assert set(padding) == {ord(" ")}
    assert len(padding) >= 3
    assert text_of(json.loads(body)) == f"silent for {SILENCE_S} s"  # whitespace is valid JSON
    assert_kept_alive(answer)
    records = await records_of(live, {"m-json"})
    assert records["m-json"]["status"] == 200
    assert records["m-json"]["streaming"] is False
    assert records["m-json"]["bytes_out"] == len(body)


async def test_a_silent_modern_call_to_an_sse_only_client_gets_comments(
    http: httpx.AsyncClient,
) -> None:
    answer = await modern(http, call("silent", SILENCE_S, "m-sse"), SSE_ONLY)
    assert answer.content_type == "text/event-stream"
    assert answer.comments() >= 3
    assert text_of(answer.messages()[-1]) == f"silent for {SILENCE_S} s"
    assert_kept_alive(answer)


async def test_a_failure_after_a_silence_is_the_last_event_or_the_padded_body_on_200(
    live: Live, http: httpx.AsyncClient
) -> None:
    quick = await modern(http, call("silent_then_busy", 0.0, "m-busy-quick"), mcp.BOTH)
    assert quick.status == 503  # nothing was sent before it: its own status
    streamed = await modern(http, call("silent_then_busy", SILENCE_S, "m-busy-sse"), mcp.BOTH)
    assert streamed.status == 200
    assert streamed.messages()[-1]["error"]["message"] == "busy after a silence"
    padded = await modern(http, call("silent_then_busy", SILENCE_S, "m-busy-json"), JSON_ONLY)
    assert padded.status == 200
    assert json.loads(padded.body)["error"]["message"] == "busy after a silence"
    records = await records_of(live, {"m-busy-quick", "m-busy-sse", "m-busy-json"})
    assert [records[id_]["status"] for id_ in ("m-busy-quick", "m-busy-sse", "m-busy-json")] == [
        503,
        200,
        200,
    ]
    assert records["m-busy-json"]["error"]["message"] == "busy after a silence"


async def test_progress_after_a_silence_goes_on_the_stream_the_silence_opened(
    http: httpx.AsyncClient,
) -> None:
    message = mcp.modern(
        "tools/call",
        {"name": "silent_then_progress", "arguments": {"seconds": 0.5}},
        "m-progress",
        progressToken="p",
    )
    answer = await modern(http, message, mcp.BOTH)
    assert answer.content_type == "text/event-stream"
    assert answer.body.startswith(b": \r\n\r\n")  # a keep-alive before anything else
    progress, result = answer.messages()
    assert progress["method"] == "notifications/progress"
    assert text_of(result) == "loud at last"


# == the legacy era ==============================================================================


async def legacy(
    client: mcp.LegacySession, name: str, seconds: float, id: Any, accept: str = mcp.BOTH
) -> Answer:
    message = mcp.tool_call(name, {"seconds": seconds}, id=id)
    return await post(client.http, message, client.headers(accept))


async def test_a_silent_legacy_call_becomes_a_resumable_stream_with_comments(
    live: Live, http: httpx.AsyncClient
) -> None:
    client = await mcp.legacy_session(http)
    answer = await legacy(client, "silent", SILENCE_S, "l-silent")
    assert answer.status == 200
    assert answer.content_type == "text/event-stream"
    frames = mcp.frames_of(answer.body.decode())
    assert frames[0].data == ""  # the priming event (2025-11-25): resumable from here
    assert frames[0].id is not None
    assert answer.comments() >= 2
    assert frames[-1].message is not None
    assert text_of(frames[-1].message) == f"silent for {SILENCE_S} s"
    assert_kept_alive(answer)
    records = await records_of(live, {"l-silent"})
    assert records["l-silent"]["status"] == 200
    assert records["l-silent"]["streaming"] is True
    stream = await stream_record_of(live, records["l-silent"])
    assert stream["bytes_out"] == len(answer.body)
    assert (stream["end"], stream["outcome"]) == ("complete", "ok")
    # The result stays resumable from the priming event.
    async with client.get(last_event_id=frames[0].id) as resumed:
        (again,) = await resumed.rest()
    assert again["id"] == "l-silent"


async def test_a_silent_call_of_an_older_session_starts_its_stream_with_a_comment(
    http: httpx.AsyncClient,
) -> None:
    client = await mcp.legacy_session(http, "2025-06-18")
    answer = await legacy(client, "silent", SILENCE_S, "l-old")
    assert answer.content_type == "text/event-stream"
    assert answer.body.startswith(b": \r\n\r\n")  # no priming event in this version
    assert text_of(answer.messages()[-1]) == f"silent for {SILENCE_S} s"
    assert_kept_alive(answer)


async def test_a_quick_legacy_call_still_answers_plain_json(http: httpx.AsyncClient) -> None:
    client = await mcp.legacy_session(http)
    answer = await legacy(client, "silent", 0.02, "l-quick")
    assert answer.content_type == "application/json"
    assert int(answer.headers["content-length"]) == len(answer.body)
    assert text_of(json.loads(answer.body)) == "silent for 0.02 s"


async def test_a_silent_legacy_call_to_a_json_only_client_is_json_led_by_whitespace(
    live: Live, http: httpx.AsyncClient
) -> None:
    client = await mcp.legacy_session(http)
    answer = await legacy(client, "silent", SILENCE_S, "l-json", JSON_ONLY)
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert answer.body.startswith(b"   ")
    assert text_of(json.loads(answer.body)) == f"silent for {SILENCE_S} s"
    assert_kept_alive(answer)
    failed = await legacy(client, "silent_then_busy", SILENCE_S, "l-json-busy", JSON_ONLY)
    assert failed.status == 200
    assert json.loads(failed.body)["error"]["message"] == "busy after a silence"
    records = await records_of(live, {"l-json", "l-json-busy"})
    assert records["l-json"]["status"] == 200
    assert records["l-json"]["streaming"] is False
    assert records["l-json"]["bytes_out"] == len(answer.body)
    assert records["l-json-busy"]["error"]["message"] == "busy after a silence"


async def test_a_silent_batch_is_a_json_array_led_by_whitespace(http: httpx.AsyncClient) -> None:
    client = await mcp.legacy_session(http, "2025-03-26")
    batch = [
        mcp.tool_call("silent", {"seconds": SILENCE_S}, id="b-slow"),
        mcp.tool_call("silent", {"seconds": 0.0}, id="b-quick"),
    ]
    answer = await post(http, batch, client.headers())
    assert answer.status == 200
    assert answer.content_type == "application/json"
    assert answer.body.startswith(b"   ")
    assert [message["id"] for message in json.loads(answer.body)] == ["b-slow", "b-quick"]
    assert_kept_alive(answer)
    quick = await post(http, [batch[1]], client.headers())
    assert int(quick.headers["content-length"]) == len(quick.body)  # as before: plain JSON


async def test_a_client_that_leaves_a_padded_legacy_call_does_not_cancel_it(
    live: Live, http: httpx.AsyncClient
) -> None:
    client = await mcp.legacy_session(http)
    message = mcp.tool_call("silent", {"seconds": 1.0}, id="l-left")
    headers = client.headers(JSON_ONLY)
    async with http.stream("POST", "/mcp", content=json.dumps(message), headers=headers) as got:
        assert got.headers["content-type"] == "application/json"
        first = await got.aiter_raw().__anext__()
        assert first.strip() == b""  # padding: the connection is then closed under it
    records = await records_of(live, {"l-left"})
    assert records["l-left"]["status"] == 200
    assert records["l-left"]["error"] is None  # the call ran to its end
