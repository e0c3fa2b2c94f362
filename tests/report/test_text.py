"""server.report.text: the terminal table and Markdown, hostile names neutralised."""

from __future__ import annotations

import re

from server.report.text import render_markdown, render_table
from tests.report.test_report import (
    HOSTILE,
    MIXED,
    aggregate,
)


def test_table_has_a_block_per_client_within_100_columns() -> None:
    text = render_table(aggregate(MIXED))
    assert len(re.findall(r"^== .* \[c\d+\] =+$", text, re.MULTILINE)) == 4
    assert max(len(line) for line in text.splitlines()) <= 100
    block = text.split("== alpha")[1].split("\n== ")[0]
    assert re.search(r"tools/call\s+2\s+0", block)
    assert "never requested  ping, prompts/list" in block


def test_text_formats_neutralise_control_characters() -> None:
    report = aggregate(HOSTILE)
    for text in (render_table(report), render_markdown(report)):
        assert "\x1b" not in text
        assert "\u202e" not in text
        assert "\\x1b" in text


def test_markdown_escapes_markup() -> None:
    text = render_markdown(aggregate(HOSTILE))
    assert "<script>" not in text
    assert "<b>" not in text
    assert "\\<script\\>" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| ")]
    # Every row of a table keeps its column count: no unescaped pipe from a value.
    header_cells = table_rows[0].count(" | ")
    assert all(re.sub(r"\\\|", "", row).count(" | ") == header_cells for row in table_rows[:4])
