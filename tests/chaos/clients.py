"""The chaos run's raw clients of the 2026-07-28 and ``initialize`` eras, and a readiness probe
(``tests/chaos/run.py``); the HTTP+SSE one is in ``tests/chaos/http_sse.py``, the official
SDK's in ``tests/chaos/sdk_clients.py``.

Each runs until its ``stop`` event, notes every operation in the shared :class:`Ledger` (its
error kind, if any) and recovers the way a careful client of its generation does: a 2026-07-28
client re-opens its listen stream when it ends, an ``initialize``-era client resumes its GET
stream with ``Last-Event-ID`` and opens a new session after a 404, an HTTP+SSE client opens a
new stream when its stream closes. Every wait is bounded (``HANG_S``: a client that waited that
long for an answer notes ``hang``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import ssl
from typing import Any

import httpx

from tests.chaos.ledger import Ledger, error_kind
from tests.support import mcp_client as mcp

HANG_S = 15.0
# How long a new session waits for its GET stream before it touches its resource anyway.
GET_OPEN_S = 5.0
TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


@functools.cache
def tls() -> ssl.SSLContext:
    """One TLS context for every client of the run (the run speaks plain HTTP; httpx builds
    one for each client anyway)."""
    return ssl.create_default_context()


def http_client(ledger: Ledger, base: str, read_s: float = HANG_S) -> httpx.AsyncClient:
    async def on_response(response: httpx.Response) -> None:
        ledger.response(response)

    return httpx.AsyncClient(
        base_url=base,
        verify=tls(),  # one for the run: each costs ~40 ms of CPU on the clients' loop
        timeout=httpx.Timeout(5.0, read=read_s),
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
        event_hooks={"response": [on_response]},
    )


class Client:
    """What every chaos client shares: its name (its ``clientInfo.name``, so the records show
    it), the ledger, the stop event and a pause that holds resource touches (so updates in
    flight arrive before the run counts them)."""

    era = ""

    def __init__(self, name: str, base: str, ledger: Ledger, stop: asyncio.Event) -> None:
        self.name = name
        self.base = base
        self.ledger = ledger
        self.stop = stop
        self.info = {"name": name, "version": "1"}
        self.touches_ok = 0
        self.updates = 0

    def note(self, what: str, start: float, error: str | None = None) -> None:
        self.ledger.op(self.name, self.era, what, start, error)

    async def nap(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds * random.uniform(0.7, 1.3))

    async def run(self) -> None:
        raise NotImplementedError


def rpc_error(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return error_kind(rpc=body["error"].get("code"))
    return None


class ModernCaller(Client):
    """2026-07-28: ``tools/call`` (echo), ``tools/list``, and tasks when ``tasks`` is set."""

    era = "2026-07-28"

    def __init__(self, *args: Any, tasks: bool = False, silent: tuple[float, float] | None = None):
        super().__init__(*args)
        self.tasks = tasks
        self.silent = silent

    async def request(self, http: httpx.AsyncClient, message: dict[str, Any]) -> Any:
        response = await http.post(
            "/mcp", content=json.dumps(message), headers=mcp.modern_headers(message)
        )
        if response.status_code != 200:
            raise Failure(error_kind(status=response.status_code, headers=response.headers))
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            found = [m for m in mcp.messages_of(text) if m.get("id") == message["id"]]
            if not found:
                raise Failure("stream ended without an answer")
            body = found[-1]
        else:
            body = json.loads(text)
        if (kind := rpc_error(body)) is not None:
            raise Failure(kind)
        return body["result"]

    async def run(self) -> None:
        ids = iter(range(1, 10**9))
        async with http_client(self.ledger, self.base, HANG_S + (self.silent or (0, 0))[1]) as http:
            while not self.stop.is_set():
                if self.silent is not None:
                    seconds = round(random.uniform(*self.silent), 1)
                    what, params = (
                        "silent call",
                        {"name": "silent", "arguments": {"seconds": seconds}},
                    )
                elif self.tasks:
                    what, params = "task", {"name": "work", "arguments": {"seconds": 1.0}}
                else:
                    what, params = "call", {"name": "echo", "arguments": {"text": self.name}}
                caps = TASKS if self.tasks else {}
                message = mcp.modern(
                    "tools/call", params, next(ids), capabilities=caps, client_info=self.info
                )
                start = self.ledger.now()
                try:
                    result = await self.request(http, message)
                    if self.tasks and result.get("resultType") == "task":
                        await self.poll(http, result["taskId"], ids)
                    self.note(what, start)
                    if not self.tasks and self.silent is None:
                        start = self.ledger.now()
                        message = mcp.modern("tools/list", {}, next(ids), client_info=self.info)
                        await self.request(http, message)
                        self.note("list", start)
                except Exception as error:
                    self.note(what, start, failure_kind(error))
                await self.nap(0.25 if self.silent is None else 0.5)

    async def poll(self, http: httpx.AsyncClient, task_id: str, ids: Any) -> None:
        for _ in range(60):
            await asyncio.sleep(0.3)
            message = mcp.modern(
                "tasks/get",
                {"taskId": task_id},
                next(ids),
                capabilities=TASKS,
                client_info=self.info,
            )
            status = (await self.request(http, message)).get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise Failure(f"task {status}")
        raise Failure("hang")


class Failure(Exception):
    """A failure already named by its kind."""


def failure_kind(error: BaseException) -> str:
    return str(error) if isinstance(error, Failure) else error_kind(error)


class ModernListener(ModernCaller):
    """2026-07-28: a ``subscriptions/listen`` stream, re-opened whenever it ends. A stream that
    ends with its result (the server's goodbye) is a ``listen completed`` mark; one that ends
    without it is a ``listen cut`` error."""

    async def run(self) -> None:
        ids = iter(range(1, 10**9))
        async with http_client(self.ledger, self.base, read_s=60) as http:
            while not self.stop.is_set():
                message = mcp.modern(
                    "subscriptions/listen",
                    {"notifications": {"toolsListChanged": True}},
                    next(ids),
                    client_info=self.info,
                )
                start = self.ledger.now()
                try:
                    await self.listen(http, message)
                    self.note("listen", start)
                except Exception as error:
                    self.note("listen", start, failure_kind(error))
                    await self.nap(0.2)

    async def listen(self, http: httpx.AsyncClient, message: dict[str, Any]) -> None:
        headers = mcp.modern_headers(message)
        async with http.stream("POST", "/mcp", content=json.dumps(message), headers=headers) as r:
            if r.status_code != 200:
                raise Failure(error_kind(status=r.status_code, headers=r.headers))
            stream = mcp.SSE(r)
            reading = asyncio.ensure_future(self.read_until_end(stream, message["id"]))
            stopping = asyncio.ensure_future(self.stop.wait())
            done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if reading not in done:
                reading.cancel()
                return
            reading.result()
            self.ledger.mark(self.name, self.era, "listen completed")

    @staticmethod
    async def read_until_end(stream: mcp.SSE, request_id: Any) -> None:
        while True:
            try:
                frame = await stream.next_frame(limit=None)
            except (httpx.HTTPError, AssertionError) as error:
                raise Failure(f"listen cut ({type(error).__name__})") from error
            if frame is None:
                raise Failure("listen cut")
            message = frame.message
            if message is not None and message.get("id") == request_id:
                if "result" in message:
                    return
                raise Failure(rpc_error(message) or "listen cut")


class LegacyClient(Client):
    """``initialize`` era: a session with its GET stream (resumed by ``Last-Event-ID``), a
    subscription to its own URI (each ``touch`` of it must arrive once on the GET stream), and
    calls with progress on their POST stream."""

    era = "initialize"

    def __init__(self, *args: Any, touching: asyncio.Event) -> None:
        super().__init__(*args)
        self.touching = touching
        self.uri = f"chaos://{self.name}"
        self.session: mcp.LegacySession | None = None

    async def open_session(self, http: httpx.AsyncClient) -> mcp.LegacySession:
        session = mcp.LegacySession(http)
        start = self.ledger.now()
        try:
            message = mcp.initialize(client_info=self.info)
            response = await http.post(
                "/mcp", json=message, headers=mcp.legacy_headers(version=None)
            )
            if response.status_code != 200:
                raise Failure(error_kind(status=response.status_code, headers=response.headers))
            session.session_id = response.headers["mcp-session-id"]
            done = await session.post(mcp.notification("notifications/initialized"))
            if done.status_code != 202:
                raise Failure(error_kind(status=done.status_code, headers=done.headers))
            answer = await session.call("resources/subscribe", {"uri": self.uri})
            if "error" in answer:
                raise Failure(rpc_error(answer) or "subscribe")
        except Exception as error:
            self.note("initialize", start, failure_kind(error))
            raise Failure("no session") from error
        self.note("initialize", start)
        return session

    async def run(self) -> None:
        async with (
            http_client(self.ledger, self.base) as http,
            http_client(self.ledger, self.base, read_s=60) as streams,
        ):
            while not self.stop.is_set():
                try:
                    self.session = await self.open_session(http)
                except Failure:
                    await self.nap(0.5)
                    continue
                opened = asyncio.Event()
                getter = asyncio.ensure_future(self.get_stream(streams, self.session, opened))
                try:
                    # Touches wait for the GET stream (a fresh GET is told what comes after it).
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(opened.wait(), GET_OPEN_S)
                    await self.work(self.session)
                finally:
                    getter.cancel()
                    with contextlib.suppress(BaseException):
                        await getter

    async def work(self, session: mcp.LegacySession) -> None:
        """Calls until the session is gone (404: a new one) or the run stops."""
        while not self.stop.is_set():
            for what, call in (("progress call", self.progress_call), ("touch", self.touch)):
                if what == "touch" and not self.touching.is_set():
                    continue
                start = self.ledger.now()
                try:
                    await call(session)
                    self.note(what, start)
                except Exception as error:
                    kind = failure_kind(error)
                    self.note(what, start, kind)
                    if kind == "http 404":
                        return
            await self.nap(0.3)

    async def touch(self, session: mcp.LegacySession) -> None:
        answer = await self.post_call(session, mcp.tool_call("touch", {"uri": self.uri}))
        if (kind := rpc_error(answer)) is not None:
            raise Failure(kind)
        self.touches_ok += 1

    async def progress_call(self, session: mcp.LegacySession) -> None:
        message = mcp.tool_call("count", {"steps": 3, "delay_ms": 20}, token="p")
        answer = await self.post_call(session, message)
        if (kind := rpc_error(answer)) is not None:
            raise Failure(kind)

    async def post_call(self, session: mcp.LegacySession, message: dict[str, Any]) -> Any:
        message["id"] = session.next_id()
        response = await session.post(message)
        if response.status_code != 200:
            raise Failure(error_kind(status=response.status_code, headers=response.headers))
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            found = [m for m in mcp.messages_of(response.text) if m.get("id") == message["id"]]
            if not found:
                raise Failure("stream ended without an answer")
            return found[-1]
        return response.json()

    async def get_stream(
        self, http: httpx.AsyncClient, session: mcp.LegacySession, opened: asyncio.Event
    ) -> None:
        """The session's GET stream, resumed with ``Last-Event-ID`` whenever it ends; ``opened``
        set at its first 200."""
        last_id: str | None = None
        while not self.stop.is_set():
            headers = session.headers("text/event-stream", Content_Type=None)
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            start = self.ledger.now()
            what = "GET resume" if last_id is not None else "GET stream"
            try:
                async with http.stream("GET", "/mcp", headers=headers) as response:
                    if response.status_code != 200:
                        kind = error_kind(status=response.status_code, headers=response.headers)
                        self.note(what, start, kind)
                        if response.status_code == 410:
                            last_id = None  # what a client can do: a fresh stream, events lost
                        await self.nap(0.3)
                        continue
                    opened.set()
                    if last_id is not None:
                        self.ledger.mark(self.name, self.era, "GET resumed")
                    self.note(what, start)
                    stream = mcp.SSE(response)
                    while (frame := await stream.next_frame(limit=None)) is not None:
                        if frame.id is not None:
                            last_id = frame.id
                        message = frame.message or {}
                        if message.get("method") == "notifications/resources/updated":
                            self.updates += 1
                self.ledger.mark(self.name, self.era, "GET ended")
            except (httpx.HTTPError, AssertionError) as error:
                self.ledger.mark(self.name, self.era, f"GET cut ({type(error).__name__})")
            await self.nap(0.05)


class ReadinessProbe(Client):
    """Each replica's ``/readyz``, asked directly every quarter second (as a kubelet would, more
    often): a ``readyz I STATUS`` mark each time replica I's answer changes."""

    era = "probe"

    def __init__(self, *args: Any, replicas: list[str]) -> None:
        super().__init__(*args)
        self.replicas = replicas

    async def run(self) -> None:
        last: dict[int, str] = {}
        # Longer than MCP_REDIS_TIMEOUT_S: a 503 that takes that long to come is still seen as
        # the 503 it is (when it arrives), not as a timeout of the probe's own.
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0)) as http:
            while not self.stop.is_set():
                for index, url in enumerate(self.replicas):
                    try:
                        status = str((await http.get(f"{url}/readyz")).status_code)
                    except httpx.HTTPError as error:
                        status = type(error).__name__
                    if last.get(index) != status:
                        last[index] = status
                        self.ledger.mark(self.name, self.era, f"readyz {index} {status}")
                await self.nap(0.25)
