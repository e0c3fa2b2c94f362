"""SIGTERM under every way of serving the app: each process exits on its own, in time.

One catalog (tests/e2e/embedding_apps.py) is served by a real process, one per way of
serving it: ``python -m server serve`` with its flags, ``serve()`` from Python, plain
``uvicorn module:app``, ``uvicorn --factory``, gunicorn with two uvicorn workers, hypercorn
(its default: a supervisor and one worker process, which no signal reaches; and in one
process, ``--workers 0``), and mounted in a Starlette and a FastAPI host app under plain
uvicorn. Each process is given:

- a ``subscriptions/listen`` stream (2026-07-28) and a session's ``GET`` stream (the
  ``initialize`` era), both open;
- a ``tools/call`` answered before, one still running when SIGTERM arrives (it ends within
  the drain time), and where the mode is the issue's own (plain uvicorn, gunicorn), one that
  would run far past the drain deadline.

SIGTERM goes to the process the test started (its PID only; gunicorn's master passes it to
the workers, hypercorn's sets the event its workers poll). Then: the listen stream gets its
graceful result at once, the GET stream ends,
the short call its result and the long one a -32000 "Server shutting down" error, the process
exits within the drain time plus 2 s, the records file holds exactly one request record per
request sent, and the catalog's own lifespan ran once in each serving process (one enter, one
exit per PID). Before this, plain uvicorn waited for the open streams until SIGKILL.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.deploy_helpers import (
    ROOT,
    SUB_ID,
    free_port,
    listen,
    modern_call,
    modern_headers,
    open_session,
    read_records,
    sse_get_headers,
    sse_messages,
)

DRAIN_TIMEOUT_S = 3.0
SHORT_CALL_S = 0.6
LONG_CALL_S = 60.0
APPS = "tests.e2e.embedding_apps"


def _gunicorn_worker() -> str | None:
    """uvicorn's own gunicorn worker (deprecated there), or the uvicorn-worker package's."""
    for module, name in (("uvicorn.workers", "uvicorn.workers.UvicornWorker"),
                         ("uvicorn_worker", "uvicorn_worker.UvicornWorker")):  # fmt: skip
        with contextlib.suppress(ImportError), _quiet_deprecation():
            __import__(module)
            return name
    return None


@contextlib.contextmanager
def _quiet_deprecation() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@dataclass(frozen=True)
class Mode:
    """One way of serving: the command (``{port}`` filled in), where the app's paths are,
    how many serving processes it runs, what exit status a clean stop gives."""

    argv: tuple[str, ...]
    prefix: str = ""
    processes: int = 1
    exit_codes: tuple[int, ...] = (0,)
    long_call: bool = False


UVICORN = (sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "{port}")
# hypercorn evaluates the name after the colon in the module's namespace, where the apps are
# built on first use: through the module's __getattr__. Its graceful timeout is far past the
# drain: a server that waited it out (for the open streams to close) fails the exit deadline.
HYPERCORN = (sys.executable, "-m", "hypercorn", "--bind", "127.0.0.1:{port}",
             "--graceful-timeout", "60", f"{APPS}:__getattr__('app')")  # fmt: skip
# uvicorn re-raises the SIGTERM it handled once it has shut down: "killed by SIGTERM", by choice.
BY_SIGTERM = (0, -signal.SIGTERM)
MODES = {
    "python -m server serve": Mode(
        (sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", "{port}",
         "--catalog", f"{APPS}:embedding_catalog"),
    ),
    "serve() from Python": Mode(
        (sys.executable, "-c", f"from server import serve; from {APPS} import embedding_catalog; "
         "serve(embedding_catalog(), host='127.0.0.1', port={port})"),
    ),
    "uvicorn module:app": Mode((*UVICORN, f"{APPS}:app"), exit_codes=BY_SIGTERM, long_call=True),
    "uvicorn --factory": Mode((*UVICORN, "--factory", f"{APPS}:factory"), exit_codes=BY_SIGTERM),
    "gunicorn, 2 uvicorn workers": Mode(
        (sys.executable, "-m", "gunicorn", "-k", str(_gunicorn_worker()), "-w", "2",
         "-b", "127.0.0.1:{port}", f"{APPS}:app"),
        processes=2,
        long_call=True,
    ),
    "hypercorn (a worker process)": Mode(HYPERCORN, long_call=True),
    "hypercorn --workers 0": Mode((*HYPERCORN, "--workers", "0"), long_call=True),
    "mounted in Starlette, uvicorn": Mode(
        (*UVICORN, f"{APPS}:starlette_host"), prefix="/ai", exit_codes=BY_SIGTERM
    ),
    "mounted in FastAPI, uvicorn": Mode(
        (*UVICORN, f"{APPS}:fastapi_host"), prefix="/ai", exit_codes=BY_SIGTERM
    ),
}  # fmt: skip


@dataclass
class Stream:
    """What one client got: status, messages, and when it ended after SIGTERM."""

    status: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    ended_after_s: float | None = None
    error: str | None = None


@dataclass
class Run:
    streams: dict[str, Stream]
    sent: list[str]  # the method of every request sent
    exit_code: int | None
    exit_after_s: float
    records: list[dict[str, Any]]
    lifespans: list[str]
    log: str


async def _read(
    response_cm: Any, stream: Stream, opened: asyncio.Event, sigterm: dict[str, float]
) -> None:
    try:
        async with response_cm as response:
            stream.status = response.status_code
            opened.set()
            if response.headers.get("content-type", "").startswith("application/json"):
                import json

                stream.messages.append(json.loads(await response.aread()))
            else:
                async for message in sse_messages(response):
                    stream.messages.append(message)
    except httpx.HTTPError as error:
        stream.error = repr(error)
    finally:
        opened.set()
        if "at" in sigterm:
            stream.ended_after_s = time.monotonic() - sigterm["at"]


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def _wait_until_serving(url: str, lifespan_log: Path, processes: int, log: Path) -> None:
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(timeout=1) as client:
        while True:
            entered = _text(lifespan_log).count("enter")
            with contextlib.suppress(httpx.HTTPError):
                healthy = (await client.get(f"{url}/healthz")).status_code == 200
                if healthy and entered >= processes:
                    return
            assert time.monotonic() < deadline, f"not serving: {_text(log)}"
            await asyncio.sleep(0.1)


async def _drive(mode: Mode, url: str, pid: int) -> tuple[dict[str, Stream], list[str], float]:
    mcp = f"{mode.prefix}/mcp"
    streams: dict[str, Stream] = collections.defaultdict(Stream)
    sent: list[str] = []
    sigterm: dict[str, float] = {}
    tasks: list[asyncio.Task[None]] = []
    opened: list[asyncio.Event] = []
    timeout = httpx.Timeout(DRAIN_TIMEOUT_S + 10)
    # The session's requests on one connection: with several workers, sessions live in the
    # worker that made them (no Redis here), and a connection stays with one worker.
    async with (
        httpx.AsyncClient(base_url=url, timeout=timeout) as client,
        httpx.AsyncClient(
            base_url=url, timeout=timeout, limits=httpx.Limits(max_connections=1)
        ) as session_client,
    ):

        def begin(name: str, response_cm: Any, method: str, wait: bool = True) -> asyncio.Event:
            event = asyncio.Event()
            if wait:  # until its response has begun (a JSON answer begins only at its end)
                opened.append(event)
            sent.append(method)
            tasks.append(asyncio.create_task(_read(response_cm, streams[name], event, sigterm)))
            return event

        message = listen("listen-1")
        begin("listen", client.stream(
            "POST", mcp, json=message, headers=modern_headers(message, "text/event-stream")
        ), "subscriptions/listen")  # fmt: skip
        message = modern_call("echo", {"text": "before"}, "echo-1")
        answer = await client.post(mcp, json=message, headers=modern_headers(message))
        assert answer.json()["result"]["content"][0]["text"] == "before", answer.text
        sent.append("tools/call")
        message = modern_call("lifespan_state", {}, "state-1")
        answer = await client.post(mcp, json=message, headers=modern_headers(message))
        assert answer.json()["result"]["structuredContent"]["pool"] == "open", answer.text
        sent.append("tools/call")

        session_id = await open_session(session_client, mcp)
        sent += ["initialize", "notifications/initialized"]
        begin("get", session_client.stream("GET", mcp, headers=sse_get_headers(session_id)), "GET")

        message = modern_call("slow", {"seconds": SHORT_CALL_S}, "short-1", progressToken="p")
        short = begin("short", client.stream(
            "POST", mcp, json=message, headers=modern_headers(message)
        ), "tools/call")  # fmt: skip
        if mode.long_call:
            message = modern_call("slow", {"seconds": LONG_CALL_S}, "long-1")
            begin("long", client.stream(
                "POST", mcp, json=message, headers=modern_headers(message, "application/json")
            ), "tools/call", wait=False)  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 10)
        # The short call has sent its progress frame: it is running.
        await asyncio.wait_for(short.wait(), 5)
        deadline = time.monotonic() + 5
        while not streams["short"].messages or not streams["listen"].messages:
            assert time.monotonic() < deadline, dict(streams)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # the long call's request has arrived by now
        assert not any(task.done() for task in tasks), ("ended before SIGTERM", dict(streams))
        assert session_id
        sigterm["at"] = time.monotonic()
        os.kill(pid, signal.SIGTERM)  # the process this test started, by its PID
        await asyncio.wait_for(asyncio.gather(*tasks), DRAIN_TIMEOUT_S + 10)
    return dict(streams), sent, sigterm["at"]


def _run(mode: Mode, workdir: Path) -> Run:
    port = free_port()
    records = workdir / "records.jsonl"
    lifespan_log = workdir / "lifespan.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(
        {
            "MCP_LOG_LEVEL": "warning",
            "MCP_RECORDS": "file",
            "MCP_RECORDS_FILE": str(records),
            "MCP_DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S),
            "EMBED_LIFESPAN_LOG": str(lifespan_log),
            "PYTHONPATH": str(ROOT),
        }
    )
    argv = [part.replace("{port}", str(port)) for part in mode.argv]
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(
            _wait_until_serving(f"{url}{mode.prefix}", lifespan_log, mode.processes, log_path)
        )
        streams, sent, signalled = asyncio.run(_drive(mode, url, process.pid))
        exit_code = process.wait(DRAIN_TIMEOUT_S + 10)
        exit_after = time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    return Run(
        streams,
        sent,
        exit_code,
        exit_after,
        read_records(records),
        lifespan_log.read_text().splitlines(),
        log_path.read_text(errors="replace"),
    )


@pytest.fixture(scope="module", params=list(MODES), ids=list(MODES))
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Mode, Run]:
    mode = MODES[request.param]
    if "hypercorn" in request.param:
        pytest.importorskip("hypercorn")
    if "gunicorn" in request.param:
        pytest.importorskip("gunicorn")
        if _gunicorn_worker() is None:
            pytest.skip("no uvicorn worker for gunicorn (uvicorn.workers or uvicorn-worker)")
    return mode, _run(mode, tmp_path_factory.mktemp("any-server"))


def test_the_process_exits_within_the_drain_time_plus_2_s(run: tuple[Mode, Run]) -> None:
    mode, result = run
    assert result.exit_code in mode.exit_codes, result.log
    assert result.exit_after_s < DRAIN_TIMEOUT_S + 2, (result.exit_after_s, result.log)


def test_the_listen_stream_gets_its_graceful_result_at_once(run: tuple[Mode, Run]) -> None:
    _, result = run
    stream = result.streams["listen"]
    assert stream.status == 200, stream
    assert stream.error is None, stream
    ack, closing = stream.messages
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert closing["id"] == "listen-1"
    assert closing["result"]["resultType"] == "complete"
    assert closing["result"]["_meta"][SUB_ID] == "listen-1"
    # Ended by the app as the shutdown began, not by the drain deadline.
    assert stream.ended_after_s is not None
    assert stream.ended_after_s < DRAIN_TIMEOUT_S, stream.ended_after_s


def test_the_sessions_get_stream_ends(run: tuple[Mode, Run]) -> None:
    _, result = run
    stream = result.streams["get"]
    assert stream.status == 200, stream
    assert stream.error is None, stream
    assert stream.ended_after_s is not None
    assert stream.ended_after_s < DRAIN_TIMEOUT_S, stream.ended_after_s


def test_calls_in_flight_finish_or_end_at_the_drain_deadline(run: tuple[Mode, Run]) -> None:
    mode, result = run
    short = result.streams["short"]
    assert short.status == 200, short
    assert short.error is None, short
    (final,) = [message for message in short.messages if message.get("id") == "short-1"]
    assert final["result"]["content"][0]["text"] == f"slept {SHORT_CALL_S}"
    if mode.long_call:
        long = result.streams["long"]
        assert long.status == 503, long
        (answer,) = long.messages
        assert answer["error"] == {"code": -32000, "message": "Server shutting down"}


def test_one_request_record_per_request_sent(run: tuple[Mode, Run]) -> None:
    _, result = run
    requests = [record for record in result.records if record["kind"] == "request"]
    assert len({record["request_id"] for record in requests}) == len(requests)
    methods = collections.Counter(
        "GET" if record["verb"] == "GET" else record["method"] for record in requests
    )
    assert methods == collections.Counter(result.sent), (methods, result.sent)
    # Every other line is the one stream record of a request answered as a stream.
    streams = [record for record in result.records if record["kind"] == "stream"]
    assert len(requests) + len(streams) == len(result.records)
    streamed = sorted(record["request_id"] for record in requests if record["streaming"])
    assert sorted(record["request_id"] for record in streams) == streamed


def test_the_catalogs_lifespan_ran_once_in_each_serving_process(run: tuple[Mode, Run]) -> None:
    mode, result = run
    by_pid: dict[str, list[str]] = collections.defaultdict(list)
    for line in result.lifespans:
        what, pid = line.split()
        by_pid[pid].append(what)
    assert len(by_pid) == mode.processes, result.lifespans
    assert all(events == ["enter", "exit"] for events in by_pid.values()), result.lifespans
