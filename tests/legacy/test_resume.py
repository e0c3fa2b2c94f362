"""server.legacy.resume: where a GET with Last-Event-ID resumes, decided without HTTP or I/O."""

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.errors import InvalidRequest, http_status
from server.legacy.eventstream import MAX_SEQ, Copy
from server.legacy.resume import Resume, elsewhere, locate
from server.legacy.runtime import SessionRuntime
from server.state.redis.mirror import CALL_LOST
from tests.support.deploy_helpers import (
    legacy_headers,
    modern_call,
    modern_headers,
    open_session,
    sse_get_headers,
)
from tests.support.mcp_client import sse_frames
from tests.support.replica_catalog import COUNTER_URI
from tests.support.replicas import Replicas


def runtime_with_a_call() -> tuple[SessionRuntime, str]:
    runtime = SessionRuntime("session", events_per_stream=8)
    stream = runtime.open_stream()
    stream.publish(b'{"n":1}')
    stream.publish(b'{"n":2}')
    return runtime, stream.id


def test_a_fresh_get_follows_the_standalone_stream() -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, None) is None
    assert locate(runtime, None, None, 8) == Resume(None, 0)


def test_a_stream_held_here_resumes_after_the_named_event() -> None:
    runtime, stream_id = runtime_with_a_call()
    assert elsewhere(runtime, f"{stream_id}_1") is None  # nothing to ask another replica
    found = locate(runtime, f"{stream_id}_1", None, 8)
    assert found.stream is runtime.streams[stream_id]
    assert found.after == 1
    assert not found.follow


def test_a_finished_stream_with_nothing_left_is_410() -> None:
    runtime, stream_id = runtime_with_a_call()
    runtime.streams[stream_id].finish(b'{"n":3}')
    assert locate(runtime, f"{stream_id}_2", None, 8).after == 2  # the result is still due
    with pytest.raises(InvalidRequest) as refused:
        locate(runtime, f"{stream_id}_3", None, 8)
    assert refused.value.http_status == 410


@pytest.mark.parametrize("last_event_id", ["abcdef99_4", f"abc7_{MAX_SEQ}"])
def test_an_unknown_event_id_is_410(last_event_id: str) -> None:
    runtime, _ = runtime_with_a_call()
    with pytest.raises(InvalidRequest) as refused:
        locate(runtime, last_event_id, None, 8)
    assert refused.value.http_status == 410


@pytest.mark.parametrize(
    "last_event_id",
    ["nonsense", "gone_4", "_3", f"abc7_{MAX_SEQ + 1}", "abc7_" + "1" * 400, "a:b_1", "é_1"],
)
def test_an_id_this_server_cannot_have_made_is_400_before_the_mirror_is_asked(
    last_event_id: str,
) -> None:
    runtime, _ = runtime_with_a_call()
    with pytest.raises(InvalidRequest) as refused:
        elsewhere(runtime, last_event_id)  # what the shell asks before the mirror (Redis)
    assert http_status(refused.value, "legacy") == 400
    assert "is not an event id of this server" in str(refused.value)
    assert len(str(refused.value)) < 300  # a long id is shown cut short
    with pytest.raises(InvalidRequest) as again:
        locate(runtime, last_event_id, None, 8)
    assert http_status(again.value, "legacy") == 400


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_id_is_a_fresh_get(blank: str) -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, blank) is None
    assert locate(runtime, blank, None, 8) == Resume(None, 0)


def test_another_replicas_running_call_is_followed_from_its_copy() -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, "abc7_2") == ("abc7", 2)
    found = locate(runtime, "abc7_2", Copy([(3, b'{"n":3}')], finished=False), 8)
    assert found.stream is not None
    assert found.stream.id == "abc7"
    assert found.after == 2
    assert found.follow
    assert [seq for seq, _ in found.stream.events_after(2)] == [3]


def test_another_replicas_finished_call_is_replayed_not_followed() -> None:
    runtime, _ = runtime_with_a_call()
    found = locate(runtime, "abc7_2", Copy([(3, b'{"n":3}')], finished=True), 8)
    assert not found.follow
    assert found.stream is not None
    assert found.stream.finished


def test_another_replicas_standalone_stream_is_replayed_then_this_one_follows() -> None:
    runtime, _ = runtime_with_a_call()
    found = locate(runtime, "abc1g_5", Copy([(6, b"six"), (7, b"seven")], finished=False), 8)
    assert found.stream is None  # this replica's own standalone stream carries on
    assert found.missed == (("abc1g_6", b"six"), ("abc1g_7", b"seven"))


@pytest.mark.parametrize(
    "copy",
    [Copy([], finished=False), Copy([], finished=True), None],
    ids=["nothing-missed", "drained", "crashed-before-any-event"],
)
def test_another_replicas_standalone_stream_with_nothing_missed_carries_on_here(
    copy: Copy | None,
) -> None:
    # Issue 35: its replica drained (the copy ends with its end marker) or crashed (no end
    # marker, or no copy at all if it had sent nothing yet): this replica's stream carries
    # on, where a 410 made the official SDK stop listening for good.
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, "abc1g_5") == ("abc1g", 5)
    assert locate(runtime, "abc1g_5", copy, 8) == Resume(None, 0)
    assert locate(runtime, "abcdef1g_0", copy, 8) == Resume(None, 0)


# -- across replica processes: the GET stream cut by a drain or a crash (issue 35) ----------------


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["drained", "crashed"])
def test_a_get_stream_cut_by_its_replica_stopping_resumes_on_the_other(
    sig: signal.Signals, tmp_path: Path
) -> None:
    # Two `python -m server` replicas sharing a real redis-server. A session's GET stream on
    # replica A hears two resource updates; A is then stopped (SIGTERM: it drains and ends the
    # stream; SIGKILL: the connection just breaks). The client's GET with Last-Event-ID on B
    # must carry on there (it was a 410), and every update reaches the client once, the one
    # made through B while no replica held the stream too (it was lost: nobody published it).
    with Replicas(n=2, nginx=False, workdir=tmp_path) as replicas:
        a, b = replicas.replica_urls
        asyncio.run(_cut_and_resume(replicas, a, b, sig))


async def _cut_and_resume(replicas: Replicas, a: str, b: str, sig: signal.Signals) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        sid = await open_session(client, f"{a}/mcp")
        subscribe = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "resources/subscribe",
            "params": {"uri": COUNTER_URI},
        }
        answer = await client.post(f"{a}/mcp", json=subscribe, headers=legacy_headers(sid))
        assert answer.status_code == 200, answer.text

        async def touch(url: str, id: int) -> None:
            call = modern_call("touch", {}, id)
            done = await client.post(f"{url}/mcp", json=call, headers=modern_headers(call))
            assert done.status_code == 200, done.text

        received: list[dict[str, Any]] = []
        last_id = None
        async with client.stream("GET", f"{a}/mcp", headers=sse_get_headers(sid)) as stream:
            assert stream.status_code == 200
            frames = sse_frames(stream, limit=5)
            assert (await anext(frames)).message is None  # the priming event
            for n in range(2):
                await touch(b, 10 + n)
                frame = await anext(frames)
                assert frame.message is not None
                received.append(frame.message)
                last_id = frame.id
            await asyncio.sleep(0.3)  # A's copy of the stream is in Redis
            server = replicas.servers[0]
            os.kill(server.pid, sig)
            with contextlib.suppress(httpx.HTTPError):  # SIGKILL: the connection breaks
                async for frame in frames:
                    assert frame.message is None, frame  # nothing more was sent
        assert server.process is not None
        await asyncio.to_thread(server.process.wait, 20)
        assert last_id is not None
        assert last_id.rpartition("_")[0].endswith("g")
        # Twice while no GET is open anywhere: only the change log keeps them (and two
        # alike are two updates, each told).
        await touch(b, 15)
        await touch(b, 16)

        resume = {**sse_get_headers(sid), "Last-Event-ID": last_id}
        async with client.stream("GET", f"{b}/mcp", headers=resume) as resumed:
            body = "" if resumed.status_code == 200 else (await resumed.aread()).decode()
            assert resumed.status_code == 200, body
            frames = sse_frames(resumed, limit=5)
            priming = await anext(frames)
            assert priming.message is None
            assert priming.id is not None
            assert not priming.id.startswith(last_id.split("_")[0])
            for _ in range(2):  # the updates made while nobody held the stream
                frame = await anext(frames)
                assert frame.message is not None
                received.append(frame.message)
            await touch(b, 20)
            frame = await anext(frames)
            assert frame.message is not None
            received.append(frame.message)
        updated = {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": COUNTER_URI},
        }
        assert received == [updated] * 5


@pytest.mark.slow
def test_a_call_cut_by_its_replica_crashing_ends_its_resumed_stream_with_an_error(
    tmp_path: Path,
) -> None:
    # Issue 35: a call's stream copied from a replica that was SIGKILLed has no end marker,
    # and the GET resuming it on the other replica followed the copy for ever. It must end,
    # within MCP_REDIS_TIMEOUT_S-ish, with a JSON-RPC error for the call (send it again).
    with Replicas(n=2, nginx=False, workdir=tmp_path) as replicas:
        a, b = replicas.replica_urls
        asyncio.run(_call_cut(replicas, a, b))


async def _call_cut(replicas: Replicas, a: str, b: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        sid = await open_session(client, f"{a}/mcp")
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "work",
                "arguments": {"seconds": 120},
                "_meta": {"progressToken": "p"},
            },
        }
        last_id = None
        async with client.stream(
            "POST", f"{a}/mcp", json=call, headers=legacy_headers(sid)
        ) as answer:
            assert answer.status_code == 200
            async for frame in sse_frames(answer, limit=5):
                last_id = frame.id
                if frame.message is not None:  # the progress notification
                    break
            await asyncio.sleep(0.3)  # A's copy of the stream is in Redis
            server = replicas.servers[0]
            os.kill(server.pid, signal.SIGKILL)
        assert server.process is not None
        await asyncio.to_thread(server.process.wait, 20)
        assert last_id is not None
        assert not last_id.rpartition("_")[0].endswith("g")  # a call's stream

        resume = {**sse_get_headers(sid), "Last-Event-ID": last_id}
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with client.stream("GET", f"{b}/mcp", headers=resume) as resumed:
            assert resumed.status_code == 200
            messages = [
                frame.message async for frame in sse_frames(resumed, limit=8) if frame.message
            ]
        took = loop.time() - started
        assert messages == [
            {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": CALL_LOST}}
        ]
        assert took < 8, took  # MCP_REDIS_TIMEOUT_S (2 s) and the shared machine's margin
        # A second resume replays the error from the copy, now ended, and closes at once.
        async with client.stream("GET", f"{b}/mcp", headers=resume) as again:
            assert again.status_code == 200
            replayed = [
                frame.message async for frame in sse_frames(again, limit=5) if frame.message
            ]
        assert replayed == messages
