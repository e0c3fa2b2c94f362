"""SIGTERM to a real ``python -m server`` holding open listen streams and in-flight calls.

One scenario runs once for the module (a few seconds): the probe catalog, records in a file,
3 listen streams, and 4 calls of ``count_slowly`` taking ~1.5 s each — 2 of the 2026-07-28
era with a progress token (answered as SSE), 2 of the ``initialize`` era in one session (one
with a progress token, one without). Once every call is under way, SIGTERM goes to the
server's PID. The tests then check what each client got, how the process ended, and the
records file.

A second scenario runs calls past the drain deadline: ``count_slowly`` taking ~10 s in both
eras, answered as JSON and as SSE, with a 1 s drain and 3 s of grace after it. At the drain
deadline the app ends each of them with a -32000 "Server shutting down" error (a 503 JSON
answer, or an error event on the stream), well before uvicorn's own deadline would cut them
off with a plain-text 500; the process exits 0 and each call's record has its status and the
error code.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.deploy_helpers import (
    BOTH,
    SUB_ID,
    ServerProcess,
    legacy_headers,
    listen,
    modern_call,
    modern_headers,
    open_session,
    read_records,
    sse_messages,
)

DRAIN_TIMEOUT_S = 8
STEPS, DELAY_MS = 15, 100  # ~1.5 s per call
LISTEN_IDS = ["listen-1", "listen-2", "listen-3"]
MODERN_CALLS = ["modern-1", "modern-2"]
LEGACY_CALLS = {"legacy-progress": True, "legacy-json": False}


@dataclass
class Outcome:
    """What one client saw: every message, and when the last one arrived (after SIGTERM)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    content_type: str = ""
    ended_after_s: float | None = None
    error: str | None = None


@dataclass
class Scenario:
    listens: dict[str, Outcome]
    calls: dict[str, Outcome]
    exit_code: int | None
    exit_after_s: float
    records: list[dict[str, Any]]
    sent: list[tuple[str, Any]]  # (method, JSON-RPC id) of every request the clients sent
    log: str


async def _stream(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    outcome: Outcome,
    started: asyncio.Event,
    sigterm: dict[str, float],
) -> None:
    try:
        async with client.stream("POST", "/mcp", json=body, headers=headers) as response:
            outcome.status = response.status_code
            outcome.content_type = response.headers.get("content-type", "")
            if outcome.content_type.startswith("application/json"):
                started.set()
                outcome.messages.append(json.loads(await response.aread()))
            else:
                async for message in sse_messages(response):
                    outcome.messages.append(message)
                    started.set()
    except httpx.HTTPError as error:  # a connection cut without an end of stream
        outcome.error = repr(error)
    finally:
        started.set()
        if "at" in sigterm:
            outcome.ended_after_s = time.monotonic() - sigterm["at"]


async def _run(
    server: ServerProcess,
) -> tuple[dict[str, Outcome], dict[str, Outcome], list[tuple[str, Any]], float]:
    listens = {id_: Outcome() for id_ in LISTEN_IDS}
    calls = {id_: Outcome() for id_ in [*MODERN_CALLS, *LEGACY_CALLS]}
    sent: list[tuple[str, Any]] = []
    sigterm: dict[str, float] = {}
    timeout = httpx.Timeout(DRAIN_TIMEOUT_S + 5)
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(base_url=server.url, timeout=timeout, limits=limits) as client:
        session_id = await open_session(client, "/mcp")
        sent += [("initialize", "init"), ("notifications/initialized", None)]
        tasks: list[asyncio.Task[None]] = []
        started: list[asyncio.Event] = []

        def begin(
            body: dict[str, Any], headers: dict[str, str], outcome: Outcome, wait: bool = True
        ) -> None:
            event = asyncio.Event()
            if wait:  # until its first frame arrives
                started.append(event)
            sent.append((body["method"], body["id"]))
            tasks.append(
                asyncio.create_task(_stream(client, body, headers, outcome, event, sigterm))
            )

        for id_ in LISTEN_IDS:
            message = listen(id_)
            begin(message, modern_headers(message, "text/event-stream"), listens[id_])
        arguments = {"steps": STEPS, "delay_ms": DELAY_MS}
        for id_ in MODERN_CALLS:
            message = modern_call("count_slowly", arguments, id_, progressToken=id_)
            begin(message, modern_headers(message), calls[id_])
        for id_, progress in LEGACY_CALLS.items():
            params: dict[str, Any] = {"name": "count_slowly", "arguments": arguments}
            if progress:
                params["_meta"] = {"progressToken": id_}
            message = {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}
            begin(message, legacy_headers(session_id), calls[id_], wait=progress)
        # Every listen stream has its acknowledgement and every streaming call its first
        # progress frame; the call answered as JSON says nothing before its result (its
        # request has long arrived by the time the others have sent a frame).
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in started)), 5)
        await asyncio.sleep(0.3)
        assert all(not task.done() for task in tasks), ("ended before SIGTERM", listens, calls)
        sigterm["at"] = time.monotonic()
        server.terminate()
        await asyncio.wait_for(asyncio.gather(*tasks), DRAIN_TIMEOUT_S + 5)
    return listens, calls, sent, sigterm["at"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    workdir = tmp_path_factory.mktemp("shutdown")
    records = workdir / "records" / "requests.jsonl"
    server = ServerProcess(
        workdir,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(records),
        MCP_DRAIN_TIMEOUT_S=str(DRAIN_TIMEOUT_S),
        MCP_SHUTDOWN_GRACE_S="1",
    ).start()
    try:
        listens, calls, sent, signalled = asyncio.run(_run(server))
        assert server.process is not None
        exit_code = server.process.wait(DRAIN_TIMEOUT_S + 5)
        exit_after = time.monotonic() - signalled  # (within the time it takes to notice)
    finally:
        server.stop()
    return Scenario(
        listens, calls, exit_code, exit_after, read_records(records), sent, server.log()
    )


def _final(outcome: Outcome, id_: Any) -> dict[str, Any] | None:
    finals = [m for m in outcome.messages if m.get("id") == id_ and "method" not in m]
    return finals[-1] if finals else None


def test_each_listen_stream_ends_with_its_graceful_result(scenario: Scenario) -> None:
    for id_, outcome in scenario.listens.items():
        assert outcome.status == 200, (id_, outcome)
        assert outcome.error is None, (id_, outcome.error)
        ack, *rest = outcome.messages
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"] == {SUB_ID: id_}
        assert len(rest) == 1, (id_, rest)
        closing = rest[0]
        assert closing["id"] == id_
        assert closing["result"]["resultType"] == "complete"
        assert closing["result"]["_meta"][SUB_ID] == id_
        # Ended by the app at once, not by the drain deadline.
        assert outcome.ended_after_s is not None
        assert outcome.ended_after_s < 1.0, (id_, outcome.ended_after_s)


def test_each_modern_call_gets_its_answer_within_the_drain_deadline(scenario: Scenario) -> None:
    for id_ in MODERN_CALLS:
        outcome = scenario.calls[id_]
        assert outcome.error is None, (id_, outcome.error)
        assert outcome.content_type.startswith("text/event-stream")
        progress = [m for m in outcome.messages if m.get("method") == "notifications/progress"]
        assert len(progress) == STEPS, (id_, outcome.messages)
        final = _final(outcome, id_)
        assert final is not None, (id_, outcome.messages)
        assert final["result"]["content"][0]["text"] == f"Counted to {STEPS}."
        assert outcome.ended_after_s is not None
        assert outcome.ended_after_s < DRAIN_TIMEOUT_S


def test_each_legacy_call_gets_its_answer_within_the_drain_deadline(scenario: Scenario) -> None:
    for id_ in LEGACY_CALLS:
        outcome = scenario.calls[id_]
        assert outcome.error is None, (id_, outcome.error)
        final = _final(outcome, id_)
        assert final is not None, (id_, outcome.status, outcome.content_type, outcome.messages)
        assert final["result"]["content"][0]["text"] == f"Counted to {STEPS}."
        assert outcome.ended_after_s is not None
        assert outcome.ended_after_s < DRAIN_TIMEOUT_S


def test_the_process_exits_0_before_the_drain_deadline(scenario: Scenario) -> None:
    assert scenario.exit_code == 0, scenario.log
    assert scenario.exit_after_s < DRAIN_TIMEOUT_S, scenario.exit_after_s
    assert "Traceback" not in scenario.log, scenario.log


def test_every_request_sent_has_a_request_record(scenario: Scenario) -> None:
    recorded = [
        (record["method"], record["jsonrpc_id"])
        for record in scenario.records
        if record["kind"] == "request"
    ]
    assert sorted(recorded, key=repr) == sorted(scenario.sent, key=repr)
    for record in scenario.records:
        if record["kind"] == "request":
            assert record["status"] is not None, record
            assert record["client_address"] == "127.0.0.1", record


def test_every_stream_has_a_stream_record(scenario: Scenario) -> None:
    streams = {
        record["request_id"]: record for record in scenario.records if record["kind"] == "stream"
    }
    streaming = {
        record["request_id"]: record
        for record in scenario.records
        if record["kind"] == "request" and record["streaming"]
    }
    assert set(streams) == set(streaming)
    by_id = {
        record["jsonrpc_id"]: streams.get(record["request_id"]) for record in streaming.values()
    }
    for id_ in LISTEN_IDS:
        listen = by_id[id_]
        assert listen is not None
        assert listen["end"] == "shutdown"
        assert listen["events"] == 2  # acknowledgement + graceful result
    for id_ in MODERN_CALLS:
        call = by_id[id_]
        assert call is not None
        assert call["end"] == "complete"
        assert call["events"] == STEPS + 1


def test_legacy_stream_records_say_how_the_stream_ended(scenario: Scenario) -> None:
    requests = {
        record["request_id"]: record["jsonrpc_id"]
        for record in scenario.records
        if record["kind"] == "request"
    }
    for record in scenario.records:
        if record["kind"] != "stream" or requests[record["request_id"]] not in LEGACY_CALLS:
            continue
        id_ = requests[record["request_id"]]
        delivered = _final(scenario.calls[id_], id_) is not None
        assert record["end"] == ("complete" if delivered else "shutdown"), (id_, record)


# -- past the drain deadline --------------------------------------------------------------------

DRAIN_S, GRACE_S = 1.0, 3.0
SLOW = {"steps": 20, "delay_ms": 500}  # ~10 s: far past both deadlines
JSON_ONLY = "application/json"
# id -> (era, Accept, progress token?): each era answered as JSON and as SSE.
SLOW_CALLS = {
    "modern-json": ("modern", JSON_ONLY, False),
    "modern-sse": ("modern", BOTH, True),
    "legacy-json": ("legacy", JSON_ONLY, False),
    "legacy-sse": ("legacy", BOTH, True),
}


@dataclass
class PastDeadline:
    calls: dict[str, Outcome]
    exit_code: int | None
    records: list[dict[str, Any]]
    log: str


async def _run_past_deadline(server: ServerProcess) -> dict[str, Outcome]:
    calls = {id_: Outcome() for id_ in SLOW_CALLS}
    sigterm: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=server.url, timeout=DRAIN_S + GRACE_S + 5) as client:
        session_id = await open_session(client, "/mcp")
        tasks: list[asyncio.Task[None]] = []
        streaming: list[asyncio.Event] = []
        for id_, (era, accept, progress) in SLOW_CALLS.items():
            meta = {"progressToken": id_} if progress else {}
            if era == "modern":
                message = modern_call("count_slowly", SLOW, id_, **meta)
                headers = modern_headers(message, accept)
            else:
                params: dict[str, Any] = {"name": "count_slowly", "arguments": SLOW}
                if meta:
                    params["_meta"] = meta
                message = {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}
                headers = {**legacy_headers(session_id), "Accept": accept}
            started = asyncio.Event()
            if progress:
                streaming.append(started)  # set at its first progress frame
            tasks.append(
                asyncio.create_task(_stream(client, message, headers, calls[id_], started, sigterm))
            )
        # The streaming calls have sent their first progress (0.5 s in); every call is running.
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in streaming)), 5)
        assert all(not task.done() for task in tasks), ("ended before SIGTERM", calls)
        sigterm["at"] = time.monotonic()
        server.terminate()
        await asyncio.wait_for(asyncio.gather(*tasks), DRAIN_S + GRACE_S + 5)
    return calls


@pytest.fixture(scope="module")
def past_deadline(tmp_path_factory: pytest.TempPathFactory) -> PastDeadline:
    workdir = tmp_path_factory.mktemp("past-deadline")
    records = workdir / "records" / "requests.jsonl"
    server = ServerProcess(
        workdir,
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(records),
        MCP_DRAIN_TIMEOUT_S=str(DRAIN_S),
        MCP_SHUTDOWN_GRACE_S=str(GRACE_S),
    ).start()
    try:
        calls = asyncio.run(_run_past_deadline(server))
        assert server.process is not None
        exit_code = server.process.wait(DRAIN_S + GRACE_S + 5)
    finally:
        server.stop()
    return PastDeadline(calls, exit_code, read_records(records), server.log())


def test_calls_past_the_drain_deadline_end_with_a_json_rpc_error(
    past_deadline: PastDeadline,
) -> None:
    for id_, (_, accept, _) in SLOW_CALLS.items():
        outcome = past_deadline.calls[id_]
        assert outcome.error is None, (id_, outcome.error)  # an answer, not a cut connection
        final = _final(outcome, id_)
        assert final is not None, (id_, outcome.status, outcome.content_type, outcome.messages)
        assert final["error"]["code"] == -32000, (id_, final)
        assert final["error"]["message"] == "Server shutting down"
        if accept == JSON_ONLY:
            assert outcome.status == 503, (id_, outcome.status)
            assert outcome.content_type.startswith("application/json")
        else:
            # The response was already an SSE stream: the error is its last event.
            assert outcome.status == 200
            assert outcome.content_type.startswith("text/event-stream")
            assert any(m.get("method") == "notifications/progress" for m in outcome.messages)
        # Ended by the app at its drain deadline, not by uvicorn's (DRAIN_S + GRACE_S).
        assert outcome.ended_after_s is not None
        assert DRAIN_S <= outcome.ended_after_s < DRAIN_S + GRACE_S, (id_, outcome.ended_after_s)


def test_the_process_exits_0_after_ending_the_calls(past_deadline: PastDeadline) -> None:
    assert past_deadline.exit_code == 0, past_deadline.log
    assert "Traceback" not in past_deadline.log, past_deadline.log
    assert f"ended {len(SLOW_CALLS)} call(s) still running" in past_deadline.log


def test_calls_ended_by_the_drain_have_a_status_and_the_error_code(
    past_deadline: PastDeadline,
) -> None:
    requests = {
        record["jsonrpc_id"]: record
        for record in past_deadline.records
        if record["kind"] == "request" and record["method"] == "tools/call"
    }
    streams = {
        record["request_id"]: record
        for record in past_deadline.records
        if record["kind"] == "stream"
    }
    assert set(requests) == set(SLOW_CALLS)
    shutting_down = {"code": -32000, "message": "Server shutting down"}
    for id_, (_, accept, _) in SLOW_CALLS.items():
        record = requests[id_]
        if accept == JSON_ONLY:
            assert record["status"] == 503, record
            assert record["error"] == shutting_down, record
            assert record["streaming"] is False
        else:
            # Written when its stream opened (200); the stream record tells how it ended.
            assert record["status"] == 200, record
            assert record["streaming"] is True
            stream = streams[record["request_id"]]
            assert stream["error"] == shutting_down, stream
            assert stream["end"] == "complete", stream  # its last event sent, then closed
