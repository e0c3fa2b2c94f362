"""Silent long calls through a real nginx whose ``proxy_read_timeout`` is shorter than the call.

nginx cuts an upstream response that sends nothing for ``proxy_read_timeout`` ("upstream timed
out", a 504 before the head, a cut body after it). The shipped ``deploy/nginx/mcp.conf`` runs
here with only that timeout lowered (and the upstream and listen addresses rewritten, as in
tests/e2e/test_nginx.py), in front of ``python -m server`` serving
``tests/support/silent_catalog.py``: a tool silent for longer than the proxy waits must still
return its result, in both eras, as SSE with keep-alive comments or, for a client that takes
only JSON, as JSON led by whitespace.

The default suite runs it small: a 2 s proxy timeout, a 0.5 s keep-alive, a 5 s silent call.
The issue's own check (a 60 s proxy timeout, the default 15 s keep-alive, a 70 s silent call)
takes over a minute, so it runs only with ``MCP_TESTS_LONG=1`` (``.ci/run`` sets it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_nginx import NGINX, SHIPPED, config_for_test, running_nginx
from tests.support import mcp_client as mcp
from tests.support.deploy_helpers import (
    BOTH,
    ServerProcess,
    free_port,
    legacy_headers,
    modern_headers,
    open_session,
)

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install nginx; .ci/run installs it)"
)

LONG = os.environ.get("MCP_TESTS_LONG") == "1"
PATH = "/api/mcp"


def with_read_timeout(config: str, seconds: int) -> str:
    """The shipped config with its one ``proxy_read_timeout`` (the MCP location's) lowered."""
    changed, count = re.subn(r"(?m)^(\s*proxy_read_timeout\s+)[^;]+;", rf"\g<1>{seconds}s;", config)
    assert count == 1, "expected one proxy_read_timeout in deploy/nginx/mcp.conf"
    return changed


@contextmanager
def behind_nginx(workdir: Path, read_timeout_s: int, **settings: str) -> Iterator[str]:
    """``python -m server`` with ``settings`` behind nginx; the proxy's base URL."""
    server = ServerProcess(
        workdir,
        MCP_ROOT_PATH="/api",
        MCP_TRUSTED_PROXIES="127.0.0.1",
        MCP_CATALOG="tests.support.silent_catalog:catalog",
        MCP_RECORDS="none",
        **settings,
    ).start()
    try:
        port = free_port()
        config = config_for_test(
            SHIPPED.read_text(), f"127.0.0.1:{server.port}", f"127.0.0.1:{port}"
        )
        with running_nginx(workdir, with_read_timeout(config, read_timeout_s), port):
            yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def silent_call(seconds: float, id: Any) -> dict[str, Any]:
    return mcp.tool_call("silent", {"seconds": seconds}, id=id)


def modern_silent_call(seconds: float, id: Any) -> dict[str, Any]:
    return mcp.modern("tools/call", {"name": "silent", "arguments": {"seconds": seconds}}, id)


async def answer_of(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """How the answer came (``sse``, ``padded`` JSON or plain ``json``) and its message."""
    assert response.status_code == 200, response.text
    body = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        assert body.startswith(":") or body.startswith("id:"), body[:40]  # a keep-alive first
        return "sse", mcp.messages_of(body)[-1]
    shape = "padded" if body[:1].isspace() else "json"
    return shape, json.loads(body)


async def silent_calls(base_url: str, seconds: float, read_timeout_s: float) -> dict[str, Any]:
    """One silent call per era and Accept, side by side; what each came back as."""
    timeout = httpx.Timeout(5, read=read_timeout_s)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as client:
        session_id = await open_session(client, PATH)

        async def modern(accept: str, id: str) -> tuple[str, dict[str, Any]]:
            message = modern_silent_call(seconds, id)
            headers = modern_headers(message, accept)
            return await answer_of(await client.post(PATH, json=message, headers=headers))

        async def legacy(accept: str, id: str) -> tuple[str, dict[str, Any]]:
            headers = {**legacy_headers(session_id), "Accept": accept}
            response = await client.post(PATH, json=silent_call(seconds, id), headers=headers)
            return await answer_of(response)

        ids = ("modern-sse", "modern-json", "legacy-sse", "legacy-json")
        answers = await asyncio.gather(
            modern(BOTH, ids[0]),
            modern("application/json", ids[1]),
            legacy(BOTH, ids[2]),
            legacy("application/json", ids[3]),
        )
    return dict(zip(ids, answers, strict=True))


def assert_every_call_returned(answers: dict[str, Any], seconds: float) -> None:
    for id_, (shape, message) in answers.items():
        assert message["id"] == id_
        assert message["result"]["content"][0]["text"] == f"silent for {float(seconds)} s"
        assert shape == ("sse" if id_.endswith("sse") else "padded"), (id_, shape)


@pytest.mark.anyio
async def test_silent_calls_outlive_a_short_proxy_read_timeout(tmp_path: Path) -> None:
    with behind_nginx(tmp_path, 2, MCP_KEEPALIVE_S="0.5") as url:
        answers = await silent_calls(url, 5, read_timeout_s=10)
    assert_every_call_returned(answers, 5)


@pytest.mark.skipif(not LONG, reason="over a minute: runs with MCP_TESTS_LONG=1 (.ci/run)")
@pytest.mark.timeout(600)  # a 70 s silent call by design
@pytest.mark.anyio
async def test_a_call_silent_for_70_s_outlives_a_60_s_proxy_read_timeout(tmp_path: Path) -> None:
    # The defaults: a keep-alive every 15 s (MCP_KEEPALIVE_S unset). The client waits longer
    # than the proxy, so that only the proxy's timeout can cut a call (a 504 without the fix).
    with behind_nginx(tmp_path, 60) as url:
        answers = await silent_calls(url, 70, read_timeout_s=90)
    assert_every_call_returned(answers, 70)
