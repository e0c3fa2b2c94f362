"""The report's chart of requests and failed requests over time, as inline SVG.

One bar per timeline bucket (a minute, or wider for long spans, see
:func:`server.report.build.timeline`): the bar's height is its requests, its red part the
failed ones. Axis labels are the first, middle and last bucket times and the largest count.
Nothing in it comes from a client (times are the server's, counts are numbers), and it draws
without any script, font or URL, so it prints and opens offline like the rest of the page.
"""

from __future__ import annotations

import html

from server.report.model import Timeline

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
