"""server.report.html_assets: the policy that allows exactly the page's own script, and the
timeline chart drawn from numbers and times only."""

from __future__ import annotations

import base64
import hashlib
import re

from server.report.html_assets import SCRIPT, content_security_policy, svg_chart
from server.report.model import Timeline


def test_the_policy_allows_the_script_by_its_hash_and_connects_only_live() -> None:
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    static = content_security_policy(live=False)
    assert f"script-src 'sha256-{digest}'" in static
    assert static.startswith("default-src 'none'")
    assert "connect-src" not in static
    assert content_security_policy(live=True) == static + "; connect-src 'self'"


def test_the_chart_has_a_bar_per_busy_bucket_and_a_note_without_times() -> None:
    points = [("2026-11-30T06:00", 4, 1), ("2026-11-30T06:01", 0, 0), ("2026-11-30T06:02", 2, 0)]
    chart = svg_chart(Timeline(5, points))
    assert chart.startswith('<svg id="timeline"')
    assert "per 5 minutes" in chart
    assert len(re.findall(r"<g><title>", chart)) == 2  # the empty bucket draws nothing
    assert "2026-11-30T06:00: 4 requests, 1 failed" in chart
    assert "<script" not in chart
    assert "http" not in chart.replace("http://www.w3.org", "")
    assert (
        svg_chart(Timeline(1, []))
        == '<p class="note">No records with a time: nothing to chart.</p>'
    )
