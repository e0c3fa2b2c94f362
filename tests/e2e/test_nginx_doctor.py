"""``python -m server doctor`` through a real nginx: the shipped ``deploy/nginx/mcp.conf`` passes
(exit 0), and each way of getting the proxy wrong fails and names the setting to change.

The server runs with the doctor's tools on (``MCP_DOCTOR=true``), static tokens whose token
holds the admin scope, and no ``MCP_ROOT_PATH``: the prefix comes from nginx's
``X-Forwarded-Prefix``. Each broken variant is the shipped file with one thing changed:

- ``proxy_buffering on``: nginx 1.22 still passes each chunk on as it reads it (measured), so
  the doctor rightly finds nothing held back; its buffering check fails against a proxy that
  does buffer in tests/cli/test_doctor.py;
- ``proxy_read_timeout 5s`` with the server's keep-alive off (``MCP_KEEPALIVE_S=3600``): a call
  silent for 8 s is cut in both eras and over HTTP+SSE;
- no ``X-Forwarded-Prefix``: the 401's metadata URL and the HTTP+SSE endpoint miss ``/api``;
- ``client_max_body_size 1k``: a body the server takes is refused on the way.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.security.auth import token_digest
from tests.e2e.test_nginx import NGINX, SHIPPED, config_for_test, running_nginx
from tests.support.deploy_helpers import ROOT, ServerProcess, free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed"),
]

TOKEN = "doctor-e2e-token"


def server_settings(**extra: str) -> dict[str, str]:
    return {
        "MCP_AUTH": "tokens",
        "MCP_AUTH_TOKENS": token_digest(TOKEN),
        "MCP_AUTH_TOKEN_SCOPES": "mcp:admin",
        "MCP_AUTH_SERVERS": "https://as.example",
        "MCP_TRUSTED_PROXIES": "127.0.0.1",
        "MCP_DOCTOR": "true",
        **extra,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("doctor"), **server_settings()).start(
        timeout=30
    )
    yield process
    process.stop()


def doctor(workdir: Path, site: str, idle_s: float) -> tuple[int, list[dict[str, Any]]]:
    """nginx serving ``site``, and the doctor run against it; its exit code and checks."""
    port = free_port()
    site = re.sub(r"(?m)^(\s*listen\s+)[^;]+;", rf"\g<1>127.0.0.1:{port};", site, count=1)
    with running_nginx(workdir, site, port):
        ran = subprocess.run(
            [sys.executable, "-m", "server", "doctor", f"http://127.0.0.1:{port}/api/mcp",
             "--token", TOKEN, "--idle", str(idle_s), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert ran.stdout, ran.stderr
    return ran.returncode, json.loads(ran.stdout)


def shipped(server: ServerProcess) -> str:
    return config_for_test(SHIPPED.read_text(), f"127.0.0.1:{server.port}", "127.0.0.1:1")


def failed(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in checks if check["status"] == "FAIL"}


def test_the_shipped_config_passes(server: ServerProcess, tmp_path: Path) -> None:
    code, checks = doctor(tmp_path, shipped(server), 3)
    assert failed(checks) == {}, checks
    assert code == 0
    statuses = {check["name"]: check["status"] for check in checks}
    assert statuses == {name: "PASS" for name in statuses}, checks  # metadata too: auth is on
    assert {"slash", "request-id", "metadata", "tools", "sse", "buffering", "idle-modern",
            "idle-legacy", "idle-sse", "resume", "replicas", "body"} == set(statuses)  # fmt: skip


def test_proxy_buffering_on_alone_holds_nothing_back_and_is_not_blamed(
    server: ServerProcess, tmp_path: Path
) -> None:
    # nginx 1.22 passes each chunk of a chunked upstream answer on as it reads it even with
    # proxy_buffering on (and the app sends X-Accel-Buffering: no besides): no false alarm. The
    # buffering check failing on a proxy that does hold a stream back is in
    # tests/cli/test_doctor.py.
    site = shipped(server).replace("proxy_buffering off;", "proxy_buffering on;")
    assert "proxy_buffering on;" in site
    code, checks = doctor(tmp_path, site, 3)
    assert failed(checks) == {}, checks
    assert code == 0


def test_an_idle_timeout_below_a_silent_call_is_named(tmp_path: Path) -> None:
    quiet = ServerProcess(tmp_path, **server_settings(MCP_KEEPALIVE_S="3600")).start(timeout=30)
    try:
        site = shipped(quiet).replace("proxy_read_timeout    3600s;", "proxy_read_timeout 5s;")
        assert "proxy_read_timeout 5s;" in site
        code, checks = doctor(tmp_path, site, 8)
    finally:
        quiet.stop()
    assert code == 1
    assert {"idle-modern", "idle-legacy", "idle-sse"} <= set(failed(checks)), checks
    for name in ("idle-modern", "idle-legacy", "idle-sse"):
        assert "proxy_read_timeout" in failed(checks)[name]["fix"]
        assert "proxy-read-timeout" in failed(checks)[name]["fix"]


def test_a_prefix_not_forwarded_is_named(server: ServerProcess, tmp_path: Path) -> None:
    site = re.sub(r"(?m)^\s*proxy_set_header X-Forwarded-Prefix.*$", "", shipped(server))
    assert "X-Forwarded-Prefix" not in site
    code, checks = doctor(tmp_path, site, 3)
    assert code == 1
    assert {"metadata", "sse"} <= set(failed(checks)), checks
    for name in ("metadata", "sse"):
        assert "X-Forwarded-Prefix" in failed(checks)[name]["fix"]
        assert "x-forwarded-prefix" in failed(checks)[name]["fix"]


def test_a_body_limit_below_the_servers_is_named(server: ServerProcess, tmp_path: Path) -> None:
    site = shipped(server).replace("client_max_body_size  4m;", "client_max_body_size 1k;")
    assert "client_max_body_size 1k;" in site
    code, checks = doctor(tmp_path, site, 3)
    assert code == 1
    assert set(failed(checks)) == {"body"}, checks
    assert "client_max_body_size" in failed(checks)["body"]["fix"]
    assert "proxy-body-size" in failed(checks)["body"]["fix"]
