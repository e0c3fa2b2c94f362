"""A real Prometheus (Debian's ``prometheus`` package) scraping a real server.

The test starts uvicorn on 127.0.0.1 and Prometheus on 127.0.0.1 (a free port, its data in
``tmp_path``, scraping every second), makes a known mix of requests with one listen stream held
open, and asks Prometheus's query API for the counts; Prometheus is stopped by its PID. Skipped
where no ``prometheus`` binary is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server import Catalog
from server.app import create_app
from server.settings import Settings
from tests.support.deploy_helpers import free_port, stop_process
from tests.support.live_server import ServerThread
from tests.support.mcp_client import modern, modern_headers

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
INFO = {"name": "prometheus-test", "version": "1"}

pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).exists(), reason="no prometheus binary (apt-get install prometheus)"
)


def catalog() -> Catalog:
    tools = Catalog("prometheus-test", "0.0.1")

    @tools.tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    return tools


def message(method: str, params: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = modern(method, params, client_info=INFO)
    headers = modern_headers(body)
    return json.dumps(body).encode(), headers


@pytest.fixture
def server() -> Iterator[ServerThread]:
    settings = Settings(_env_file=None, records=[])
    live = ServerThread(create_app(settings, catalog())).start()
    yield live
    live.stop()


@pytest.fixture
def prometheus(server: ServerThread, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    target = server.url.removeprefix("http://")
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: mcp\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


def query(prometheus: str, expression: str) -> float | None:
    try:
        response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expression})
    except httpx.HTTPError:
        return None  # not listening yet
    if response.status_code == 503:
        return None  # listening, its storage not ready yet ("Service Unavailable")
    results = response.json()["data"]["result"]
    return float(results[0]["value"][1]) if results else None


def test_prometheus_sees_the_requests_tool_outcomes_and_open_streams(
    server: ServerThread, prometheus: str
) -> None:
    with httpx.Client(base_url=server.url) as client:
        for _ in range(3):
            body, headers = message("tools/list", {})
            assert client.post("/mcp", content=body, headers=headers).status_code == 200
        for _ in range(2):
            body, headers = message("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            assert client.post("/mcp", content=body, headers=headers).status_code == 200
        body, headers = message("tools/call", {"name": "nope", "arguments": {}})
        client.post("/mcp", content=body, headers=headers)
    # One listen stream, held open while Prometheus scrapes.
    opened, release = threading.Event(), threading.Event()

    def hold_stream() -> None:
        body, headers = message("subscriptions/listen", {"notifications": {}})
        headers["Accept"] = "text/event-stream"
        with (
            httpx.Client(base_url=server.url, timeout=60) as client,
            client.stream("POST", "/mcp", content=body, headers=headers) as response,
        ):
            assert response.status_code == 200
            opened.set()
            release.wait(60)

    holder = threading.Thread(target=hold_stream, daemon=True)
    holder.start()
    assert opened.wait(10)
    expected = {
        'sum(mcp_requests_total{method="tools/list",era="modern",status="200",outcome="ok"})': 3,
        'sum(mcp_requests_total{method="tools/call",outcome="ok"})': 2,
        'sum(mcp_tool_calls_total{tool="echo",outcome="ok"})': 2,
        'sum(mcp_tool_calls_total{tool="other"})': 1,
        'sum(mcp_requests_total{method="subscriptions/listen"})': 1,
        'mcp_open_streams{kind="listen"}': 1,
    }
    found: dict[str, float | None] = {}
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            found = {expression: query(prometheus, expression) for expression in expected}
            if found == expected:
                break
            time.sleep(0.5)
    finally:
        release.set()
        holder.join(10)
    assert found == expected
