"""One server behind two nginx server blocks that say how the client reached them differently.

- ``localhost``: the public prefix ``/api`` (stripped), told with ``X-Forwarded-Host``,
  ``-Proto`` and ``-Prefix``;
- ``127.0.0.1``: no prefix, told with RFC 7239 ``Forwarded`` only (the upstream Host nginx
  sends is its upstream's name, ``mcp_app``, so only the forwarded host can be right).

The server has no MCP_ROOT_PATH and no MCP_AUTH_RESOURCE: through each block the 401's
``resource_metadata`` resolves (200) and names the URL the client used as its ``resource``, the
HTTP+SSE ``endpoint`` event names a path that works through that block, and the official SDK
client and mcp-remote connect through both, over Streamable HTTP and HTTP+SSE. A client that
talks to the server directly (an untrusted peer) changes no URL with its forwarding headers,
and a Host nginx forwards that is not allowed is refused. nginx and the server are stopped by
their PIDs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from server.security.auth import token_digest
from tests.e2e.test_nginx import NGINX, client_from, running_nginx
from tests.e2e.test_sse_clients import CLIENTS_HOME, mcp_remote
from tests.support.deploy_helpers import ServerProcess, free_port
from tests.support.http_sse import endpoint_of_blocking
from tests.support.mcp_client import initialize

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed"),
]

TOKEN = "forwarded-e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACCEPT = "application/json, text/event-stream"
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
COMMON = """
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering off;
        proxy_redirect off;
        proxy_read_timeout 60s;"""


def site(upstream: int, port: int) -> str:
    return f"""
upstream mcp_app {{
    server 127.0.0.1:{upstream};
    keepalive 8;
}}
server {{
    listen 127.0.0.1:{port};
    server_name localhost;
    location /api/ {{
        proxy_pass http://mcp_app/;{COMMON}
        proxy_set_header Host               $http_host;
        proxy_set_header X-Forwarded-Host   $http_host;
        proxy_set_header X-Forwarded-Proto  $scheme;
        proxy_set_header X-Forwarded-Prefix /api;
        proxy_set_header X-Forwarded-For    $remote_addr;
    }}
}}
server {{
    listen 127.0.0.1:{port};
    server_name 127.0.0.1;
    location / {{
        proxy_pass http://mcp_app;{COMMON}
        proxy_set_header Forwarded "for=$remote_addr;proto=$scheme;host=\\"$http_host\\"";
    }}
}}
"""


@dataclass
class Blocks:
    server: ServerProcess
    port: int

    def base(self, block: str) -> str:
        """The public URL below which the app answers through ``block``."""
        return {
            "x-forwarded": f"http://localhost:{self.port}/api",
            "rfc7239": f"http://127.0.0.1:{self.port}",
        }[block]


BLOCKS = ("x-forwarded", "rfc7239")


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Blocks]:
    workdir = tmp_path_factory.mktemp("nginx-forwarded")
    server = ServerProcess(
        workdir,
        MCP_AUTH="tokens",
        MCP_AUTH_TOKENS=token_digest(TOKEN),
        MCP_AUTH_SERVERS="https://as.example",
        MCP_TRUSTED_PROXIES="127.0.0.1",
        MCP_ALLOWED_HOSTS="localhost,127.0.0.1",
    ).start()
    try:
        port = free_port()
        with running_nginx(workdir, site(server.port, port), port):
            yield Blocks(server, port)
    finally:
        server.stop()


@pytest.mark.parametrize("block", BLOCKS)
def test_the_metadata_named_by_the_401_resolves_and_names_the_url_used(
    blocks: Blocks, block: str
) -> None:
    base = blocks.base(block)
    refused = httpx.post(f"{base}/mcp", json=TOOLS_LIST, headers={"Accept": ACCEPT}, timeout=10)
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    meta = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
    assert meta == f"{base}/.well-known/oauth-protected-resource/mcp"
    document = httpx.get(meta, timeout=10)
    assert document.status_code == 200
    assert document.json()["resource"] == f"{base}/mcp"


@pytest.mark.parametrize("block", BLOCKS)
def test_the_sse_endpoint_event_works_through_the_block(blocks: Blocks, block: str) -> None:
    base = blocks.base(block)
    origin = base.split("/api")[0]
    prefix = base.removeprefix(origin)
    with httpx.stream(
        "GET", f"{base}/sse", headers={"Accept": "text/event-stream", **AUTH}, timeout=10
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        endpoint = endpoint_of_blocking(lines)
        assert endpoint.startswith(f"{prefix}/messages?session_id=")
        opening = initialize("2024-11-05", client_info={"name": "t", "version": "1"}, id=1)
        posted = httpx.post(f"{origin}{endpoint}", json=opening, headers=AUTH, timeout=10)
        assert posted.status_code == 202, posted.text
        answer = next(line for line in lines if line.startswith("data:"))
        assert '"serverInfo"' in answer


@pytest.mark.anyio
async def test_an_untrusted_peers_forwarded_host_changes_no_url(blocks: Blocks) -> None:
    spoof = {"X-Forwarded-Host": "evil.example", "Forwarded": "host=evil.example;proto=https"}
    direct = blocks.server.url
    async with client_from("127.0.0.5", direct) as client:
        refused = await client.post(
            "/mcp", json=TOOLS_LIST, headers={"Accept": ACCEPT, "Host": "127.0.0.1", **spoof}
        )
        document = await client.get(
            "/.well-known/oauth-protected-resource/mcp", headers={"Host": "127.0.0.1", **spoof}
        )
    assert refused.status_code == 401
    assert "evil" not in refused.headers["www-authenticate"]
    assert document.json()["resource"] == "http://127.0.0.1/mcp"


def test_a_client_chosen_host_forwarded_by_nginx_is_refused(blocks: Blocks) -> None:
    # No server block names evil.example: nginx's default (the first) forwards it as
    # X-Forwarded-Host, and the app refuses a host outside MCP_ALLOWED_HOSTS.
    url = f"http://127.0.0.1:{blocks.port}/api/.well-known/oauth-protected-resource/mcp"
    refused = httpx.get(url, headers={"Host": "evil.example"}, timeout=10)
    assert refused.status_code == 403
    posted = httpx.post(
        f"http://127.0.0.1:{blocks.port}/api/mcp",
        json=TOOLS_LIST,
        headers={"Host": "evil.example", "Accept": ACCEPT, **AUTH},
        timeout=10,
    )
    assert posted.status_code == 403


async def list_tools(transport: object, mode: str) -> set[str]:
    async with Client(transport, mode=mode, read_timeout_seconds=20) as client:  # type: ignore[arg-type]
        return {tool.name for tool in (await client.list_tools()).tools}


@pytest.mark.anyio
@pytest.mark.parametrize("block", BLOCKS)
async def test_the_sdk_client_connects_through_the_block(blocks: Blocks, block: str) -> None:
    base = blocks.base(block)
    async with httpx2.AsyncClient(headers=AUTH, timeout=httpx2.Timeout(10, read=30)) as http:
        for mode in ("auto", "legacy"):
            transport = streamable_http_client(f"{base}/mcp", http_client=http)
            assert "count_slowly" in await list_tools(transport, mode)
    assert "count_slowly" in await list_tools(sse_client(f"{base}/sse", headers=AUTH), "legacy")


@pytest.mark.anyio
@pytest.mark.parametrize("block", BLOCKS)
async def test_mcp_remote_connects_through_the_block(blocks: Blocks, block: str) -> None:
    node, script = mcp_remote()
    base = blocks.base(block)
    config = Path(CLIENTS_HOME) / "auth"
    for path, transport in (("/mcp", "http-only"), ("/sse", "sse-only")):
        bridge = stdio_client(
            StdioServerParameters(
                command=node,
                args=[script, f"{base}{path}", "--transport", transport,
                      "--header", f"Authorization: Bearer {TOKEN}"],
                env={**os.environ, "MCP_REMOTE_CONFIG_DIR": str(config)},
            )
        )  # fmt: skip
        assert "count_slowly" in await list_tools(bridge, "legacy"), transport
