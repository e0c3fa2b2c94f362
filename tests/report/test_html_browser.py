"""The HTML report in a real browser: Debian's ``chromium``, headless, driven by
``chromium-driver`` through selenium.

The page is opened from a file, as a mailed or archived report is. The rendered DOM must have
the grid, the chart and the per-feature table; the page's own script must run (the
Content-Security-Policy allows it by hash: a wrong hash would block it) and sort a table; and the
page must make no network request at all. The browser's log of the page's requests (the
DevTools ``Network`` events, which cover only this page, not the browser's own background
traffic) is read, and a canary HTTP server, whose address hostile client names put in the
page, must never be asked for anything. Skipped where chromium, its driver or selenium is
missing, unless ``MCP_TESTS_REQUIRE_BROWSER`` is set (``.ci/run`` installs them and sets it).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from server.report.html import render_html
from tests.report.test_report import (
    aggregate,
    jsonl,
    legacy_session_records,
    modern_record,
    request_record,
)

# A real headless browser: outside the inner loop (pytest -m 'not slow').
pytestmark = pytest.mark.slow


def need(what: str) -> NoReturn:
    if os.environ.get("MCP_TESTS_REQUIRE_BROWSER"):
        pytest.fail(f"{what} is missing (apt-get install chromium chromium-driver)")
    pytest.skip(f"{what} is missing (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need("selenium")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        need("chromium or chromium-driver")
    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # never let selenium fetch a driver or a browser
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    finally:
        if offline is None:
            del os.environ["SE_OFFLINE"]
        else:
            os.environ["SE_OFFLINE"] = offline
    try:
        yield driver
    finally:
        driver.quit()


class Canary(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []  # noqa: RUF012 - one list for the test, read after the page loaded

    def do_GET(self) -> None:
        Canary.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def canary() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canary)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Canary.hits = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def page_requests(driver: Any) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_report_renders_offline_in_a_browser(browser: Any, canary: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    hostile = f'"><img src="{canary}/img"><link rel=stylesheet href="{canary}/css">'
    records = [
        *legacy_session_records("alpha", "alpha/1", "s1", ["tools/list", "tools/call", "ping"], {}),
        request_record("tools/call", name=hostile, agent=f"<script src={canary}/js></script>"),
        modern_record("tools/call", time="2026-11-30T06:03:00.000Z")
        | {"target": "echo", "outcome": "ok"},
        modern_record("tools/call", time="2026-11-30T06:05:00.000Z", error=(-32602, "Unknown tool"))
        | {"target": "nope", "outcome": "error"},
    ]
    path = tmp_path / "report.html"
    path.write_text(render_html(aggregate(jsonl(*records))), encoding="utf-8")
    browser.get_log("performance")  # start from an empty log
    browser.get(path.as_uri())

    grid = browser.find_element(By.ID, "grid")
    assert len(grid.find_elements(By.CSS_SELECTOR, "tbody tr")) == 3  # alpha, hostile, inspector
    chart = browser.find_element(By.ID, "timeline")
    assert chart.tag_name == "svg"
    assert chart.find_elements(By.CSS_SELECTOR, "rect.requests")
    assert chart.find_elements(By.CSS_SELECTOR, "rect.failed")
    features = browser.find_element(By.ID, "features-table")
    assert "tool:echo" in features.text
    # The hostile name is text in the page, not markup.
    assert hostile in browser.find_element(By.ID, "clients-table").text

    # The script ran (the policy's hash matches it): headers are focusable and sort on click.
    clients = browser.find_element(By.ID, "clients-table")
    header = clients.find_element(By.XPATH, ".//thead/tr/th[3]")  # requests
    assert header.get_attribute("tabindex") == "0"
    header.click()
    header.click()  # the second click sorts ascending
    assert header.get_attribute("aria-sort") == "ascending"
    counts = [
        int(cell.get_attribute("data-v"))
        for cell in clients.find_elements(By.XPATH, ".//tbody/tr/td[2]")
    ]
    assert counts == sorted(counts)

    requested = page_requests(browser)
    assert requested == [path.as_uri()]
    assert Canary.hits == []
