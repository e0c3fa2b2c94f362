"""server.legacy.resume across replica processes: a GET stream cut by its replica's drain or crash
resumes on the other replica (issue 35). Two ``python -m server`` and a real redis-server."""

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

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

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["drained", "crashed"])
def test_a_get_stream_cut_by_its_replica_stopping_resumes_on_the_other(
    sig: signal.Signals, tmp_path: Path
) -> None:
    # Two `python -m server` replicas sharing a real redis-server. A session's GET stream on
    # replica A hears two resource updates; A is then stopped (SIGTERM: it drains and ends the
    # stream; SIGKILL: the connection just breaks). The client's GET with Last-Event-ID on B
    # must carry on there (it was a 410), and every update reaches the client once.
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

        resume = {**sse_get_headers(sid), "Last-Event-ID": last_id}
        async with client.stream("GET", f"{b}/mcp", headers=resume) as resumed:
            body = "" if resumed.status_code == 200 else (await resumed.aread()).decode()
            assert resumed.status_code == 200, body
            frames = sse_frames(resumed, limit=5)
            priming = await anext(frames)
            assert priming.message is None
            assert priming.id is not None
            assert not priming.id.startswith(last_id.split("_")[0])
            await touch(b, 20)
            frame = await anext(frames)
            assert frame.message is not None
            received.append(frame.message)
        updated = {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": COUNTER_URI},
        }
        assert received == [updated] * 3
