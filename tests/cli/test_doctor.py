"""``python -m server doctor`` against a server directly and through a proxy that holds every
answer back until it ends (the buffering a misconfigured proxy does): all checks pass directly,
the buffering check fails behind the buffering proxy and names the setting, and the tools the
doctor needs are absent unless the server enables them."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from server.app import create_app
from server.catalog.catalog import Catalog
from server.cli.doctor import Doctor, examine
from server.settings import Settings
from tests.support.deploy_helpers import ROOT, ServerProcess
from tests.support.live_server import ServerThread

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # real uvicorns and a proxy


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    settings = Settings(_env_file=None, records=["none"], doctor=True, doctor_max_wait_s=5)
    # A catalog of its own: the doctor's tools are added to the catalog the app serves.
    server = ServerThread(create_app(settings, Catalog("doctor-test", "1.0.0"))).start()
    yield server.url
    server.stop()


@contextlib.asynccontextmanager
async def buffering_proxy(upstream: str) -> AsyncIterator[str]:
    """An HTTP proxy that sends each answer only once the upstream has finished it."""
    host, port = upstream.removeprefix("http://").split(":")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        lines = []
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
            if not line.lower().startswith("connection:"):
                lines.append(line)
        body = await reader.readexactly(length)
        request = "\r\n".join([*lines[:1], "Connection: close", *lines[1:]]).encode("latin-1")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        up_writer.write(request.rstrip(b"\r\n") + b"\r\n\r\n" + body)
        answer = await up_reader.read()  # all of it: the upstream closes when done
        up_writer.close()
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port_used = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port_used}"


async def test_directly_every_check_passes(live: str) -> None:
    checks = await examine(Doctor(live + "/mcp", None, 1, 10))
    statuses = {check.name: check.status for check in checks}
    assert statuses.pop("metadata") == "SKIP"  # no authentication: no 401 to follow
    assert set(statuses.values()) == {"PASS"}, checks


async def test_a_buffering_proxy_fails_the_buffering_check(live: str) -> None:
    async with buffering_proxy(live) as proxy:
        check = await Doctor(proxy + "/mcp", None, 1, 10).buffering()
    assert check.status == "FAIL", check
    assert "buffered" in check.detail
    direct = await Doctor(live + "/mcp", None, 1, 10).buffering()
    assert direct.status == "PASS", direct


def test_without_the_servers_tools_the_command_fails_and_says_how(tmp_path: object) -> None:
    server = ServerProcess(tmp_path, MCP_RECORDS="none").start(timeout=30)  # type: ignore[arg-type]
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "server", "doctor", server.url + "/mcp", "--idle", "1"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        server.stop()
    assert ran.returncode == 1
    lines = ran.stdout.splitlines()
    tools = next(line for line in lines if line.startswith("FAIL tools:"))
    assert "MCP_DOCTOR=true" in tools
    assert next(line for line in lines if line.startswith("PASS slash:"))
    assert len([line for line in lines if line.split(" ", 1)[0] in {"PASS", "FAIL", "SKIP"}]) == 12


async def test_the_tools_are_bounded(live: str) -> None:
    doctor = Doctor(live + "/mcp", None, 1, 10)
    too_long = await doctor.call("doctor.wait", {"seconds": 6})
    assert too_long is not None
    assert "MCP_DOCTOR_MAX_WAIT_S" in str(too_long)
    too_many = await doctor.call("doctor.events", {"count": 21})
    assert too_many is not None
    assert "error" in too_many or too_many["result"].get("isError")
