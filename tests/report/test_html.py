"""server.report.html: the report as one self-contained page."""

from __future__ import annotations

import re

from server.report.html import render_html
from server.report.html_assets import SCRIPT, script_hash
from tests.report.test_report import (
    HOSTILE,
    MIXED,
    aggregate,
)


def test_html_is_one_page_with_the_grid_and_escapes_everything() -> None:
    page = render_html(aggregate(HOSTILE))
    assert page.startswith("<!DOCTYPE html>")
    assert '<table class="matrix" id="grid">' in page
    # One script, the page's own, allowed by its hash and nothing else.
    assert page.lower().count("<script") == 1
    assert f"<script>{SCRIPT}</script>" in page
    assert script_hash() in page
    assert "unsafe-inline'; script-src 'sha256-" in page
    assert "connect-src" not in page  # only the live page fetches (itself)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page
    assert "&quot;&gt;&lt;img src=x&gt;" in page
    assert "<b>m</b>" not in page
    assert "http://" not in page
    assert "https://" not in page
    tags = " ".join(re.findall(r"<[^>]*>", page))  # real tags: escaped text has no "<"
    links = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", tags)
    assert links
    assert all(link.startswith("#") for link in links)
    assert "@import" not in page
    assert "url(" not in page
    for state in ("requested", "unadvertised", "advertised", "absent"):
        assert f'<td class="{state}"' in page


def test_html_has_the_operators_sections() -> None:
    report = aggregate(MIXED)
    page = render_html(report)
    for table_id in ("totals", "grid", "features-table", "targets-table", "clients-table"):
        assert f'id="{table_id}"' in page
    assert '<svg id="timeline"' in page
    assert page.count('<details class="client"') == len(report.clients)
    totals = page.split('id="totals"')[1].split("</table>")[0]
    assert "<tfoot>" in totals
    assert f'data-v="{report.totals.requests}"' in totals.split("<tfoot>")[1]
    live = render_html(report, refresh_s=2)
    assert '<body data-refresh="2">' in live
    assert "connect-src 'self'" in live
