"""Real HTTP+SSE (2024-11-05) clients against the server, alone and on two replicas behind nginx.

Three clients, each through the same scenario on the ``probe`` catalog (initialize, list, a
call with progress and logs, a resource subscription's update, elicitation, close):

- the official Python SDK's ``sse_client`` (``mcp.client.sse``, mcp 2.3.0);
- fastmcp's ``SSETransport`` (pip ``fastmcp``, installed beside mcp 2.3.0);
- ``mcp-remote --transport sse-only`` (npm ``mcp-remote``, the stdio bridge Claude Desktop and
  others use), driven over stdio by the SDK's client. It is installed once into
  ``~/.cache/mcp-sse-clients`` (``MCP_SSE_CLIENTS_HOME``) with npm; the test is skipped when
  npm is missing, unless ``MCP_TESTS_REQUIRE_NODE=1`` (CI) makes that a failure.

Then the same through two replicas sharing Redis behind round-robin nginx (no affinity): the
stream is held by one replica, and the messages land on both (the records show it). A POST
made on B directly reaches the stream held on A. Last, a call silent for longer than nginx's
``proxy_read_timeout`` still returns its result: the keep-alive comments keep the stream up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client

from server.app import create_app
from server.settings import Settings
from tests.e2e.test_nginx import NGINX, SHIPPED
from tests.support.http_sse import endpoint_of
from tests.support.live_server import ServerThread
from tests.support.mcp_client import initialize
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer
from tests.support.replicas import Replicas

pytestmark = pytest.mark.slow

MCP_REMOTE_VERSION = "0.15.1"
CLIENTS_HOME = Path(
    os.environ.get("MCP_SSE_CLIENTS_HOME", Path.home() / ".cache" / "mcp-sse-clients")
)
NAME = {"name": "Ada Lovelace"}


# -- the scenario ----------------------------------------------------------------------------


class Seen:
    """What the server sent a client besides answers."""

    def __init__(self) -> None:
        self.logs: list[str] = []
        self.progress: list[float] = []
        self.updates: list[str] = []
        self.asked: list[str] = []

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(str(params.data))

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updates.append(str(message.params.uri))

    async def on_elicit(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content=NAME)


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def sdk_scenario(transport: Any) -> None:
    """The scenario with the SDK's ``Client`` over ``transport`` (an SSE or stdio client)."""
    seen = Seen()
    async with Client(
        transport,
        mode="legacy",
        read_timeout_seconds=20,
        logging_callback=seen.on_log,
        message_handler=seen.on_message,
        elicitation_callback=seen.on_elicit,
    ) as client:
        assert client.server_info is not None
        assert client.server_info.name == "mcp-http-server-probe"
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"count_slowly", "touch_resource", "ask_name"} <= tools
        counted = await client.call_tool(
            "count_slowly", {"steps": 3, "delay_ms": 20}, progress_callback=seen.on_progress
        )
        assert text_of(counted) == "Counted to 3."
        await wait_until(lambda: len(seen.progress) == 3 and len(seen.logs) == 3, limit=10.0)
        assert seen.logs == ["counted 1", "counted 2", "counted 3"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource("probe://readme")
        await client.call_tool("touch_resource", {"uri": "probe://readme"})
        await wait_until(lambda: seen.updates == ["probe://readme"], limit=10.0)
        assert text_of(await client.call_tool("ask_name", {})) == "Hello, Ada Lovelace!"
        assert seen.asked == ["What is your name?"]


async def fastmcp_scenario(url: str) -> None:
    from fastmcp import Client as FastClient
    from fastmcp.client.transports import SSETransport

    seen = Seen()

    async def on_log(message: Any) -> None:
        seen.logs.append(str(message.data))

    async def on_elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
        seen.asked.append(message)
        return NAME

    async with FastClient(
        SSETransport(url),
        mode="legacy",
        log_handler=on_log,
        message_handler=seen.on_message,
        elicitation_handler=on_elicit,
        timeout=20,
    ) as client:
        tools = {tool.name for tool in await client.list_tools()}
        assert {"count_slowly", "touch_resource", "ask_name"} <= tools
        counted = await client.call_tool(
            "count_slowly", {"steps": 3, "delay_ms": 20}, progress_handler=seen.on_progress
        )
        assert text_of(counted) == "Counted to 3."
        await wait_until(lambda: len(seen.progress) == 3 and len(seen.logs) == 3, limit=10.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.session.subscribe_resource("probe://readme")
        await client.call_tool("touch_resource", {"uri": "probe://readme"})
        await wait_until(lambda: seen.updates == ["probe://readme"], limit=10.0)
        assert text_of(await client.call_tool("ask_name", {})) == "Hello, Ada Lovelace!"
        assert seen.asked == ["What is your name?"]


def mcp_remote() -> list[str]:
    """The command that runs mcp-remote (installed on first use), or a skip."""
    script = CLIENTS_HOME / "node_modules" / "mcp-remote" / "dist" / "proxy.js"
    node = shutil.which("node")
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None or node is None:
            if os.environ.get("MCP_TESTS_REQUIRE_NODE") == "1":
                pytest.fail("node and npm are needed for mcp-remote")
            pytest.skip("node/npm not installed")
        CLIENTS_HOME.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--prefix", str(CLIENTS_HOME), "--no-audit", "--no-fund",
             "--loglevel=error", f"mcp-remote@{MCP_REMOTE_VERSION}"],
            check=True,
            capture_output=True,
            timeout=300,
        )  # fmt: skip
    assert node is not None
    assert script.exists(), script
    return [node, str(script)]


def via_mcp_remote(url: str) -> Any:
    node, script = mcp_remote()
    config = CLIENTS_HOME / "auth"  # mcp-remote keeps OAuth state here (none is used)
    return stdio_client(
        StdioServerParameters(
            command=node,
            args=[script, url, "--transport", "sse-only"],
            env={**os.environ, "MCP_REMOTE_CONFIG_DIR": str(config)},
        )
    )


# -- one server ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    folder = tmp_path_factory.mktemp("sse-clients")
    settings = Settings(
        catalog="probe", records=["file"], records_file=str(folder / "records.jsonl")
    )
    running = ServerThread(create_app(settings)).start()
    yield running
    running.stop()


@pytest.mark.anyio
async def test_sdk_sse_client(live: ServerThread) -> None:
    await sdk_scenario(sse_client(f"{live.url}/sse", timeout=10))


@pytest.mark.anyio
async def test_fastmcp_sse_client(live: ServerThread) -> None:
    await fastmcp_scenario(f"{live.url}/sse")


@pytest.mark.anyio
async def test_mcp_remote_sse_only(live: ServerThread) -> None:
    await sdk_scenario(via_mcp_remote(f"{live.url}/sse"))


# -- two replicas behind round-robin nginx ----------------------------------------------------

needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    with Replicas(
        2,
        catalog="probe",
        extra_env={"MCP_CLIENT_REQUEST_TIMEOUT_S": "15"},
        redis=redis_server,
        nginx=NGINX is not None,
        workdir=tmp_path_factory.mktemp("sse-replicas"),
    ) as running:
        yield running


def sse_records(replicas: Replicas) -> list[list[dict[str, Any]]]:
    return [[r for r in rs if r.get("transport") == "sse"] for rs in replicas.records()]


@needs_nginx
@pytest.mark.anyio
async def test_sdk_sse_client_through_nginx_over_two_replicas(replicas: Replicas) -> None:
    await sdk_scenario(sse_client(f"{replicas.url}/sse", timeout=10))
    # The stream was held by one replica; the messages landed on both.
    await wait_until(
        lambda: all(any(r["verb"] == "POST" for r in rs) for rs in sse_records(replicas)),
        limit=10.0,
    )


@needs_nginx
@pytest.mark.anyio
async def test_fastmcp_through_nginx_over_two_replicas(replicas: Replicas) -> None:
    await fastmcp_scenario(f"{replicas.url}/sse")


@needs_nginx
@pytest.mark.anyio
async def test_mcp_remote_through_nginx_over_two_replicas(replicas: Replicas) -> None:
    await sdk_scenario(via_mcp_remote(f"{replicas.url}/sse"))


@pytest.mark.anyio
async def test_a_post_on_b_reaches_the_stream_held_on_a(replicas: Replicas) -> None:
    a, b = replicas.replica_urls
    opening = initialize("2024-11-05", client_info={"name": "a-and-b", "version": "1"}, id=1)
    async with (
        httpx.AsyncClient(timeout=10) as http,
        http.stream("GET", f"{a}/sse", headers={"accept": "text/event-stream"}) as stream,
    ):
        lines = stream.aiter_lines()
        # The replicas serve under /api (nginx strips it): post to B without it.
        path = (await endpoint_of(lines)).removeprefix("/api")
        assert (await http.post(f"{b}{path}", json=opening)).status_code == 202
        with anyio.fail_after(5):
            async for line in lines:
                if line.startswith("data: {"):
                    answer = json.loads(line.removeprefix("data: "))
                    break
        assert answer["id"] == 1
        assert answer["result"]["serverInfo"]["name"] == "mcp-http-server-probe"


# -- a silent call behind a proxy's idle timeout ----------------------------------------------

SILENT_S = float(os.environ.get("MCP_TESTS_SILENT_S", "70"))
PROXY_READ_TIMEOUT_S = int(os.environ.get("MCP_TESTS_PROXY_READ_TIMEOUT_S", "60"))


@contextlib.contextmanager
def proxy_read_timeout(seconds: int, folder: Path) -> Iterator[None]:
    """The shipped nginx config with ``proxy_read_timeout`` set to ``seconds``."""
    text = SHIPPED.read_text()
    patched, count = re.subn(r"proxy_read_timeout\s+\d+s;", f"proxy_read_timeout {seconds}s;", text)
    assert count >= 1
    conf = folder / "mcp.conf"
    conf.write_text(patched)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("tests.support.replicas.SHIPPED", conf)
        yield


@needs_nginx
@pytest.mark.timeout(600)  # waits out a 60 s proxy timeout by design
@pytest.mark.anyio
async def test_a_call_silent_longer_than_the_proxy_idle_timeout_returns(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with (
        proxy_read_timeout(PROXY_READ_TIMEOUT_S, tmp_path),
        Replicas(
            2,
            catalog="tests.support.replica_catalog:catalog",
            # The default (15 s) under 60 s; a shorter run (the variables above) needs less.
            extra_env={"MCP_KEEPALIVE_S": os.environ.get("MCP_TESTS_KEEPALIVE_S", "15")},
            redis=redis_server,
            workdir=tmp_path / "replicas",
        ) as running,
    ):
        async with Client(sse_client(f"{running.url}/sse", timeout=10, sse_read_timeout=600),
                          mode="legacy", read_timeout_seconds=SILENT_S + 60) as client:  # fmt: skip
            # No progress token: the call sends nothing until its result.
            result = await client.call_tool("work", {"seconds": SILENT_S, "label": "silent"})
            assert text_of(result) == "silent done"


@pytest.mark.anyio
async def test_sigterm_on_the_replica_running_a_call_still_answers_on_the_other(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with Replicas(2, catalog="probe", redis=redis_server, nginx=False, workdir=tmp_path) as running:
        a, b = running.replica_urls
        async with (
            httpx.AsyncClient(timeout=10) as http,
            http.stream("GET", f"{a}/sse", headers={"accept": "text/event-stream"}) as stream,
        ):
            lines = stream.aiter_lines()
            path = (await endpoint_of(lines)).removeprefix("/api")
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
            call["params"] = {"name": "count_slowly", "arguments": {"steps": 2, "delay_ms": 1000}}
            assert (await http.post(f"{b}{path}", json=call)).status_code == 202
            await anyio.sleep(0.3)
            running.servers[1].terminate()  # SIGTERM: B drains
            with anyio.fail_after(10):
                async for line in lines:
                    if line.startswith("data: {"):
                        answer = json.loads(line.removeprefix("data: "))
                        if answer.get("id") == 7:
                            break
            assert answer["result"]["content"][0]["text"] == "Counted to 2."
