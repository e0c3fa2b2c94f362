"""What the HTML report's page is made of besides its tables: style, script, policy, chart.

The style and script are inline in every page, and the Content-Security-Policy allows exactly
them (the script by its hash; no other script, no URL to load from, ``connect-src 'self'`` only
on the live page). The page reads fine without the script, which sorts a table by its header,
filters rows by the filter box, opens every client's details before printing, and on the live
page (``data-refresh``) swaps in a fresh report every few seconds, keeping sort, filter and open
details. The chart of requests and failures over time is inline SVG, one bar per timeline
bucket (:func:`server.report.build.timeline`), drawn from the server's times and counts only,
without script, font or URL.
"""

from __future__ import annotations

import base64
import hashlib
import html

from server.report.model import Timeline

STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fff; }
main { max-width: 1400px; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.5rem; margin: .5rem 0; } h2 { font-size: 1.2rem; margin-top: 2rem; }
h3 { font-size: 1.05rem; }
code, .num, td { font-variant-numeric: tabular-nums; }
code { font-family: ui-monospace, monospace; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: .4rem 0; }
.data th, .data td { padding: .15rem .55rem; border-bottom: 1px solid #e4e4e4; }
.data td { text-align: right; white-space: nowrap; }
.data td.text, .data th { text-align: left; }
.data td.text { white-space: normal; min-width: 12rem; }
.data thead th { position: sticky; top: 0; background: #f7f7f7; cursor: pointer;
  white-space: nowrap; border-bottom: 2px solid #ccc; }
.data thead th[aria-sort=ascending]::after { content: " \\2191"; }
.data thead th[aria-sort=descending]::after { content: " \\2193"; }
.data tfoot td, .data tfoot th { font-weight: bold; border-top: 2px solid #ccc; }
.matrix th, .matrix td { border: 1px solid #d0d0d0; padding: .2rem .35rem; }
.matrix thead th.method { vertical-align: bottom; white-space: nowrap; }
.matrix thead th.method span { writing-mode: vertical-rl; transform: rotate(180deg); }
.matrix th.client { text-align: left; white-space: nowrap; max-width: 22rem; overflow: hidden; }
.matrix th.client small { display: block; color: #666; font-weight: normal; }
.matrix td { text-align: right; min-width: 3.2rem; font-family: ui-monospace, monospace; }
.requested { background: #c7ecc9; }
.unadvertised { background: #f8c9a0; }
.advertised { background: #fff3b0; color: #8a6d00; text-align: center; }
.absent { background: #f2f2f2; color: #aaa; }
.legend span { display: inline-block; min-width: 2.2rem; padding: 0 .4rem; margin: 0 .2rem 0 .8rem;
  border: 1px solid #d0d0d0; text-align: center; }
.chart { width: 100%; height: 220px; display: block; }
.chart .requests { fill: #9aa7b8; } .chart .failed { fill: #d33c3c; }
.chart .axis { stroke: #888; stroke-width: 1; }
.chart .label { font-size: 11px; fill: #555; } .chart .end { text-anchor: end; }
.chart .middle { text-anchor: middle; } .chart .start { text-anchor: start; }
.bad { color: #b3261e; font-weight: 600; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; }
dt { font-weight: bold; } dd { margin: 0; overflow-wrap: anywhere; }
details.client { border: 1px solid #ddd; border-radius: 4px; margin: .5rem 0;
  padding: .3rem .8rem; }
details.client > summary { cursor: pointer; font-weight: 600; }
details.client > summary small { font-weight: normal; color: #666; }
.note { color: #666; }
.controls { position: sticky; top: 0; background: #fff; padding: .4rem 0; z-index: 1;
  border-bottom: 1px solid #eee; }
.controls input { font: inherit; padding: .2rem .4rem; width: 18rem; max-width: 60%; }
nav a { margin-right: .8rem; }
@media print {
  body { font-size: 10px; } main { max-width: none; padding: 0; }
  .controls, nav { display: none; }
  .scroll { overflow: visible; }
  .data thead th { position: static; }
  h2 { break-after: avoid; } tr, details.client, svg { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""

SCRIPT = """
(function () {
  "use strict";
  var each = function (list, fn) { Array.prototype.forEach.call(list, fn); };
  function key(cell) {
    var v = cell ? cell.getAttribute("data-v") : null;
    if (v !== null && v !== "" && !isNaN(v)) { return parseFloat(v); }
    return cell ? cell.textContent.trim().toLowerCase() : "";
  }
  function sortBy(th, direction) {
    var table = th.closest("table"), body = table.tBodies[0];
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var dir = direction || (th.getAttribute("aria-sort") === "descending" ? 1 : -1);
    each(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[index]), y = key(b.cells[index]);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
    each(rows, function (row) { body.appendChild(row); });
  }
  function filter(root) {
    var box = document.getElementById("filter");
    var text = box ? box.value.trim().toLowerCase() : "";
    each(root.querySelectorAll("table.data tbody tr, table.matrix tbody tr"), function (row) {
      row.hidden = text !== "" && row.textContent.toLowerCase().indexOf(text) < 0;
    });
  }
  function wire(root) {
    each(root.querySelectorAll("table.data thead th"), function (th) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(th); });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th); }
      });
    });
    filter(root);
  }
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === "DETAILS") { target.open = true; }
  }
  var box = document.getElementById("filter");
  if (box) { box.addEventListener("input", function () { filter(document); }); }
  window.addEventListener("hashchange", openTarget);
  window.addEventListener("beforeprint", function () {
    each(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
  wire(document);
  openTarget();
  var every = parseFloat(document.body.getAttribute("data-refresh") || "");
  if (!(every > 0)) { return; }
  function refresh() {
    fetch(location.href, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) { return; }
        var next = new DOMParser().parseFromString(text, "text/html").getElementById("report");
        var current = document.getElementById("report");
        if (!next || !current) { return; }
        var open = {}, sorted = [];
        each(current.querySelectorAll("details[id]"), function (d) { open[d.id] = d.open; });
        each(current.querySelectorAll("table[id] th[aria-sort]"), function (th) {
          var index = Array.prototype.indexOf.call(th.parentNode.children, th);
          sorted.push([th.closest("table").id, index, th.getAttribute("aria-sort")]);
        });
        current.replaceWith(next);
        each(next.querySelectorAll("details[id]"), function (d) {
          if (open[d.id]) { d.open = true; }
        });
        wire(next);
        each(sorted, function (s) {
          var table = document.getElementById(s[0]);
          var th = table && table.tHead ? table.tHead.rows[0].cells[s[1]] : null;
          if (th) { sortBy(th, s[2] === "ascending" ? 1 : -1); }
        });
      })
      .catch(function () { /* the next refresh tries again */ })
      .then(function () { setTimeout(refresh, every * 1000); });
  }
  setTimeout(refresh, every * 1000);
})();
"""


def script_hash() -> str:
    """The CSP source that allows :data:`SCRIPT` (exactly as written in the page)."""
    digest = hashlib.sha256(SCRIPT.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def content_security_policy(live: bool) -> str:
    policy = f"default-src 'none'; style-src 'unsafe-inline'; script-src {script_hash()}"
    if live:
        policy += "; connect-src 'self'"
    return policy


WIDTH = 960
HEIGHT = 220
LEFT = 56
BOTTOM = 28
TOP = 12


def svg_chart(timeline: Timeline) -> str:
    points = timeline.points
    if not points:
        return '<p class="note">No records with a time: nothing to chart.</p>'
    plot_width = WIDTH - LEFT - 8
    plot_height = HEIGHT - BOTTOM - TOP
    peak = max(requests for _, requests, _ in points) or 1
    step = plot_width / len(points)
    bar = max(step * 0.85, 0.5)
    width = timeline.minutes
    unit = "minute" if width == 1 else f"{width} minutes"
    parts = [
        f'<svg id="timeline" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'preserveAspectRatio="none" aria-label="requests and failed requests per {unit}">',
        f"<title>Requests (grey) and failed requests (red) per {unit}</title>",
        f'<line x1="{LEFT}" y1="{TOP + plot_height}" x2="{WIDTH - 8}" y2="{TOP + plot_height}" '
        'class="axis"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_height}" class="axis"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 10}" class="label end">{peak:,}</text>',
        f'<text x="{LEFT - 6}" y="{TOP + plot_height}" class="label end">0</text>',
    ]
    for number, (moment, requests, failed) in enumerate(points):
        if not requests and not failed:
            continue
        x = LEFT + number * step
        high = requests / peak * plot_height
        low = min(failed, requests or failed) / peak * plot_height
        title = f"{moment}: {requests:,} requests, {failed:,} failed"
        parts.append(
            f"<g><title>{html.escape(title)}</title>"
            f'<rect class="requests" x="{x:.2f}" y="{TOP + plot_height - high:.2f}" '
            f'width="{bar:.2f}" height="{high:.2f}"/>'
        )
        if failed:
            parts.append(
                f'<rect class="failed" x="{x:.2f}" y="{TOP + plot_height - low:.2f}" '
                f'width="{bar:.2f}" height="{low:.2f}"/>'
            )
        parts.append("</g>")
    marks = {0: "start", len(points) // 2: "middle", len(points) - 1: "end"}
    for number, anchor in sorted(marks.items()):
        x = LEFT + number * step + bar / 2
        label = html.escape(points[number][0].replace("T", " "))
        parts.append(f'<text x="{x:.2f}" y="{HEIGHT - 8}" class="label {anchor}">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)
