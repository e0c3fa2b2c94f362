"""The tenant label of /metrics: the top N tenants by requests with a series each, the rest as
``other``, never more than N + 1 series whatever tenants come, in one process and summed over
workers' files (prometheus-client's multiprocess mode); the scrape parses as Prometheus text."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server import Catalog
from server.app import create_app
from server.observe.metrics import Metrics
from server.observe.tenants import MAX_COUNTED
from server.records.draft import Draft
from server.settings import Settings
from tests.support.mcp_client import modern, modern_headers

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def draft(tenant: str | None, status: int = 200) -> Draft:
    made = Draft("POST", "/mcp", None, "127.0.0.1", None)
    made.era, made.method, made.status, made.tenant = "modern", "tools/list", status, tenant
    made.ended_clock = made.clock
    return made


def tenant_series(text: str) -> dict[str, dict[str, float]]:
    """{metric sample name: {tenant: value}} of a scrape, parsed as Prometheus text."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("mcp_tenant_"):
                found.setdefault(sample.name, {})[sample.labels["tenant"]] = sample.value
    return found


def test_the_top_n_tenants_have_a_series_each_and_the_rest_are_other() -> None:
    metrics = Metrics(lambda name: False, tenants=3)
    for n in range(6):  # tenant-0 makes 7 requests, tenant-5 makes 2
        for _ in range(7 - n):
            metrics.observe(draft(f"tenant-{n}"))
    metrics.observe(draft("tenant-5", status=429))  # an error
    metrics.observe(draft(None))  # no tenant: not counted by tenant
    series = tenant_series(metrics.scrape().decode())
    assert series["mcp_tenant_requests_total"] == {
        "tenant-0": 7,
        "tenant-1": 6,
        "tenant-2": 5,
        "other": 4 + 3 + 3,
    }
    assert series["mcp_tenant_errors_total"] == {
        "tenant-0": 0,
        "tenant-1": 0,
        "tenant-2": 0,
        "other": 1,
    }


def test_callers_cannot_grow_the_series_past_n_plus_one_nor_the_counts_past_a_bound() -> None:
    metrics = Metrics(lambda name: False, tenants=20)
    for n in range(MAX_COUNTED + 500):
        metrics.observe(draft(f"t{n}"))
    series = tenant_series(metrics.scrape().decode())
    assert len(series["mcp_tenant_requests_total"]) == 21
    assert sum(series["mcp_tenant_requests_total"].values()) == MAX_COUNTED + 500
    assert metrics.tenants is not None
    assert len(metrics.tenants.counts) <= MAX_COUNTED + 1


def test_with_no_tenant_and_with_zero_there_is_no_tenant_metric() -> None:
    quiet = Metrics(lambda name: False)
    quiet.observe(draft(None))
    assert "mcp_tenant" not in quiet.scrape().decode()
    off = Metrics(lambda name: False, tenants=0)
    off.observe(draft("acme"))
    assert off.tenants is None
    assert "mcp_tenant" not in off.scrape().decode()


WORKER = """
import sys
from server.observe.metrics import Metrics
from tests.observe.test_tenants import draft
metrics = Metrics(lambda name: False, tenants=2)
for spec in sys.argv[1:]:
    tenant, count = spec.split("=")
    for _ in range(int(count)):
        metrics.observe(draft(tenant, status=500 if tenant == "bad" else 200))
if sys.argv[1] == "scrape=0":
    print(metrics.scrape().decode())
"""


def test_workers_files_are_summed_then_folded_to_the_top_n(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}

    def worker(*specs: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, *specs],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
        return done.stdout

    # Alone, neither worker has "b" in its top 2; summed, "b" is second.
    worker("a=5", "b=3", "c=4")
    worker("a=1", "b=3", "bad=2", "d=1")
    series = tenant_series(worker("scrape=0"))
    assert series["mcp_tenant_requests_total"] == {"a": 6, "b": 6, "other": 4 + 2 + 1}
    assert series["mcp_tenant_errors_total"] == {"a": 0, "b": 0, "other": 2}


async def test_the_apps_metrics_name_the_callers_tenant() -> None:
    token = "tenant-metrics-token-0123456789"
    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    settings = Settings(
        auth="tokens", auth_tokens=[f"{digest};tenant=acme"], records=[], metrics_tenants=5
    )
    catalog = Catalog("tenants", "1.0.0")

    @catalog.tool
    async def echo(text: str) -> str:
        return text

    app = create_app(settings, catalog)
    async with app.lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            message = modern("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            headers = {**modern_headers(message), "Authorization": f"Bearer {token}"}
            for _ in range(3):
                answer = await client.post("/mcp", content=json.dumps(message), headers=headers)
                assert answer.status_code == 200
            scraped = await client.get("/metrics")
    series = tenant_series(scraped.text)
    assert series["mcp_tenant_requests_total"] == {"acme": 3}
