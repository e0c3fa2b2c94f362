"""A real nginx with the shipped ``deploy/nginx/mcp.conf`` in front of a real ``python -m server``.

The config is used as shipped except for the upstream servers and the listen address, which
are rewritten to free loopback ports. The server runs as it would behind that proxy:
``MCP_ROOT_PATH=/api`` and ``MCP_TRUSTED_PROXIES=127.0.0.1`` (nginx connects from there). The
client connects from another loopback address (127.0.0.5), so the real client, the proxy and
a spoofed ``X-Forwarded-For`` are three different addresses. nginx and the server are stopped
by their PIDs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.deploy_helpers import (
    BOTH,
    ROOT,
    ServerProcess,
    free_port,
    legacy_headers,
    listen,
    modern,
    modern_call,
    modern_headers,
    open_session,
    read_records,
    sse_messages,
    stop_process,
)
from tests.support.mcp_client import tool_call

SHIPPED = ROOT / "deploy" / "nginx" / "mcp.conf"
NGINX = shutil.which("nginx") or next(
    (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(path)), None
)
CLIENT_ADDRESS = "127.0.0.5"
SPOOFED = "198.51.100.9"
FIRST_FRAME_LIMIT_S = 0.2

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install nginx; .ci/run installs it)"
)


def config_for_test(text: str, upstream: str, listen_on: str) -> str:
    """The shipped config with only the upstream servers and the listen address replaced."""
    block = re.search(r"upstream\s+mcp_app\s*\{.*?\n\}", text, re.S)
    assert block is not None, "deploy/nginx/mcp.conf has no 'upstream mcp_app { ... }'"
    servers, count = re.subn(r"(?m)^(\s*server\s+)[^\s;]+", rf"\g<1>{upstream}", block.group(0))
    assert count >= 1
    text = text[: block.start()] + servers + text[block.end() :]
    text, count = re.subn(r"(?m)^(\s*listen\s+)[^;]+;", rf"\g<1>{listen_on};", text)
    assert count == 1, "expected one active listen directive"
    return text


def main_config(workdir: Path) -> str:
    user = "user root;" if os.geteuid() == 0 else ""
    temp = "\n".join(
        f"    {kind}_temp_path {workdir / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
master_process on;
worker_processes 1;
{user}
pid {workdir / "nginx.pid"};
error_log {workdir / "error.log"} info;
events {{ worker_connections 256; }}
http {{
    access_log {workdir / "access.log"};
{temp}
    include {workdir / "mcp.conf"};
}}
"""


@dataclass
class Proxy:
    server: ServerProcess
    url: str
    records: Path
    workdir: Path


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        assert process.poll() is None, log.read_text(errors="replace")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        assert time.monotonic() < deadline, "nginx did not start listening"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    workdir = tmp_path_factory.mktemp("nginx")
    records = workdir / "records.jsonl"
    server = ServerProcess(
        workdir,
        MCP_ROOT_PATH="/api",
        MCP_TRUSTED_PROXIES="127.0.0.1",
        MCP_RECORDS="file",
        MCP_RECORDS_FILE=str(records),
    ).start()
    try:
        port = free_port()
        site = config_for_test(SHIPPED.read_text(), f"127.0.0.1:{server.port}", f"127.0.0.1:{port}")
        with running_nginx(workdir, site, port):
            yield Proxy(server, f"http://127.0.0.1:{port}", records, workdir)
    finally:
        server.stop()


@contextlib.contextmanager
def running_nginx(workdir: Path, site: str, port: int) -> Iterator[None]:
    """nginx serving ``site`` (an ``mcp.conf`` listening on ``port``) from ``workdir``,
    checked with ``-t`` first, stopped gracefully (SIGQUIT) afterwards."""
    (workdir / "mcp.conf").write_text(site)
    (workdir / "nginx.conf").write_text(main_config(workdir))
    command = [str(NGINX), "-p", str(workdir), "-c", str(workdir / "nginx.conf")]
    check = subprocess.run([*command, "-t"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    log = workdir / "nginx.out"
    with log.open("wb") as out:
        nginx = subprocess.Popen(command, stdout=out, stderr=out)
    try:
        _wait_for_port(port, nginx, log)
        yield
    finally:
        # The master (this PID) stops its workers on SIGQUIT: a graceful stop.
        stop_process(nginx, signal.SIGQUIT)


def client_from(address: str, base_url: str) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (a distinct loopback source)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=base_url, transport=transport, timeout=5)


async def first_frames(
    url: str, path: str, message: dict[str, Any], accept: str, count: int
) -> tuple[list[float], list[dict[str, Any]]]:
    """Seconds from sending the request to each of the first ``count`` SSE messages."""
    async with client_from(CLIENT_ADDRESS, url) as client:
        started = time.perf_counter()
        times: list[float] = []
        messages: list[dict[str, Any]] = []
        headers = modern_headers(message, accept)
        async with client.stream("POST", path, json=message, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for frame in sse_messages(response):
                times.append(time.perf_counter() - started)
                messages.append(frame)
                if len(messages) == count:
                    break
    return times, messages


def test_nginx_accepts_the_shipped_config(proxy: Proxy) -> None:
    # (the fixture ran `nginx -t` on it; here: nothing else was changed)
    shipped = SHIPPED.read_text()
    used = (proxy.workdir / "mcp.conf").read_text()
    strip = re.compile(r"(?m)^\s*(server|listen)\s+[^;]+;.*$")
    assert strip.sub("", shipped) == strip.sub("", used)


@pytest.mark.anyio
async def test_listen_stream_first_frame_arrives_through_nginx_within_200ms(proxy: Proxy) -> None:
    latencies = []
    for attempt in range(3):
        message = listen(f"listen-{attempt}")
        times, (ack,) = await first_frames(proxy.url, "/api/mcp", message, "text/event-stream", 1)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        latencies.append(times[0])
    print(f"listen ack through nginx: {[round(t * 1000, 1) for t in latencies]} ms")
    assert min(latencies) < FIRST_FRAME_LIMIT_S, latencies
    assert sorted(latencies)[1] < FIRST_FRAME_LIMIT_S, latencies


@pytest.mark.anyio
async def test_streaming_tool_call_frames_arrive_through_nginx_as_sent(proxy: Proxy) -> None:
    steps, delay_ms = 8, 60
    message = modern_call(
        "count_slowly", {"steps": steps, "delay_ms": delay_ms}, 7, progressToken="p"
    )
    times, messages = await first_frames(proxy.url, "/api/mcp", message, BOTH, steps + 1)
    first, last = times[0] * 1000, times[-1] * 1000
    print(f"count_slowly through nginx: first frame {first:.1f} ms, last {last:.1f} ms")
    assert [m.get("method") for m in messages[:-1]] == ["notifications/progress"] * steps
    assert messages[-1]["result"]["content"][0]["text"] == f"Counted to {steps}."
    # The first progress frame comes delay_ms after the request: through the proxy it must
    # arrive then, not with the rest when the response ends (~steps * delay_ms).
    assert times[0] < FIRST_FRAME_LIMIT_S, times
    assert times[-1] - times[0] > (steps - 2) * delay_ms / 1000, times


@pytest.mark.anyio
async def test_the_prefix_serves_mcp_and_health(proxy: Proxy) -> None:
    async with client_from(CLIENT_ADDRESS, proxy.url) as client:
        for path in ("/api/mcp", "/api/mcp/"):
            message = modern("tools/list", id=path)
            answer = await client.post(path, json=message, headers=modern_headers(message))
            assert answer.status_code == 200, answer.text
            assert any(tool["name"] == "count_slowly" for tool in answer.json()["result"]["tools"])
        for path in ("/healthz", "/api/healthz", "/api/readyz"):
            assert (await client.get(path)).status_code == 200, path
        # Only the prefix reaches the app.
        message = modern("tools/list")
        answer = await client.post("/mcp", json=message, headers=modern_headers(message))
        assert answer.status_code == 404


@pytest.mark.anyio
async def test_a_legacy_session_works_through_the_prefix(proxy: Proxy) -> None:
    async with client_from(CLIENT_ADDRESS, proxy.url) as client:
        session_id = await open_session(client, "/api/mcp")
        call = tool_call("echo", {"text": "through nginx"}, id="echo")
        answer = await client.post("/api/mcp", json=call, headers=legacy_headers(session_id))
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["content"][0]["text"] == "through nginx"
        # A progress-reporting call streams through the proxy, with resumable event ids.
        call = tool_call("count_slowly", {"steps": 2, "delay_ms": 10}, token="t", id="count")
        async with client.stream(
            "POST", "/api/mcp", json=call, headers=legacy_headers(session_id)
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            messages = [message async for message in sse_messages(response)]
        assert messages[-1]["result"]["content"][0]["text"] == "Counted to 2."
        headers = legacy_headers(session_id)
        assert (await client.delete("/api/mcp", headers=headers)).status_code == 200
        again = await client.post("/api/mcp", json=call, headers=legacy_headers(session_id))
        assert again.status_code == 404


async def _records_for(path: Path, ids: set[Any], limit: float = 3) -> dict[Any, dict[str, Any]]:
    deadline = time.monotonic() + limit
    while True:
        found = {
            record["jsonrpc_id"]: record
            for record in read_records(path)
            if record["kind"] == "request" and record["jsonrpc_id"] in ids
        }
        if set(found) == ids or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


@pytest.mark.anyio
async def test_the_record_has_the_real_client_address_and_ignores_a_spoofed_one(
    proxy: Proxy,
) -> None:
    plain, spoofed, direct = "whoami-plain", "whoami-spoofed", "whoami-direct"
    async with client_from(CLIENT_ADDRESS, proxy.url) as client:
        for id_, extra in ((plain, {}), (spoofed, {"X-Forwarded-For": SPOOFED})):
            message = modern("tools/list", id=id_)
            headers = {**modern_headers(message), **extra}
            assert (await client.post("/api/mcp", json=message, headers=headers)).status_code == 200
    # Straight to the app (not through the proxy): the peer is not a trusted proxy.
    async with client_from(CLIENT_ADDRESS, proxy.server.url) as client:
        message = modern("tools/list", id=direct)
        headers = {**modern_headers(message), "X-Forwarded-For": SPOOFED}
        assert (await client.post("/mcp", json=message, headers=headers)).status_code == 200
    records = await _records_for(proxy.records, {plain, spoofed, direct})
    assert {id_: r["client_address"] for id_, r in records.items()} == {
        plain: CLIENT_ADDRESS,
        spoofed: CLIENT_ADDRESS,
        direct: CLIENT_ADDRESS,
    }
    assert json.dumps(records).count(SPOOFED) == 0


@pytest.mark.anyio
async def test_nginx_sets_its_own_request_id_over_the_clients(proxy: Proxy) -> None:
    chosen, plain = "whose-id-chosen", "whose-id-plain"
    answers = {}
    async with client_from(CLIENT_ADDRESS, proxy.url) as client:
        for id_, extra in ((chosen, {"X-Request-Id": "client-chose-this"}), (plain, {})):
            message = modern("tools/list", id=id_)
            headers = {**modern_headers(message), **extra}
            answers[id_] = await client.post("/api/mcp", json=message, headers=headers)
    records = await _records_for(proxy.records, {chosen, plain})
    for id_, answer in answers.items():
        assert answer.status_code == 200
        # nginx's $request_id: 32 hex digits, a new one per request, the record's id too.
        assert re.fullmatch(r"[0-9a-f]{32}", answer.headers["x-request-id"]), answer.headers
        assert records[id_]["request_id"] == answer.headers["x-request-id"]
    assert answers[chosen].headers["x-request-id"] != answers[plain].headers["x-request-id"]
    assert "client-chose-this" not in json.dumps(records)
