"""/metrics under gunicorn with two uvicorn workers in prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``): whichever worker answers the scrape, the request counts are
those of both workers. The server is stopped by its PID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_any_server import _gunicorn_worker
from tests.support.deploy_helpers import free_port, stop_process
from tests.support.mcp_client import modern, modern_headers

ROOT = Path(__file__).resolve().parents[2]
INFO = {"name": "workers-test", "version": "1"}
REQUESTS = 40


def tools_list_count(text: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mcp_requests_total" and sample.labels["method"] == "tools/list":
                total += sample.value
    return total


def test_counts_are_summed_over_the_workers(tmp_path: Path) -> None:
    pytest.importorskip("gunicorn")
    worker = _gunicorn_worker()
    if worker is None:
        pytest.skip("no uvicorn worker for gunicorn")
    port = free_port()
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(
        {
            "MCP_LOG_LEVEL": "warning",
            "MCP_RECORDS": "none",
            "MCP_STATE_SECRET": "a" * 64,
            "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
            "PYTHONPATH": str(ROOT),
        }
    )
    command = [sys.executable, "-m", "gunicorn", "-k", worker, "-w", "2"]
    command += ["-b", f"127.0.0.1:{port}", "tests.e2e.embedding_apps:app"]
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        message = modern("tools/list", client_info=INFO)
        body = json.dumps(message)
        # Connection: close, a new connection each: both workers get some.
        headers = modern_headers(message, Connection="close")
        for _ in range(REQUESTS):
            assert httpx.post(f"{url}/mcp", content=body, headers=headers).status_code == 200
        files = {path.name.split("_")[-1] for path in multiproc.glob("counter_*.db")}
        assert len(files) == 2, f"one worker served everything: {files}"
        for _ in range(6):  # scrapes answered by either worker
            scrape = httpx.get(f"{url}/metrics", headers={"Connection": "close"})
            assert scrape.status_code == 200
            assert tools_list_count(scrape.text) == REQUESTS
    finally:
        stop_process(process)
        log.close()
