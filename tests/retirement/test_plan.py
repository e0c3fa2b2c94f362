"""MCP_RETIRE read and checked: items, sunsets, brownout windows, and what start-up refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from server.errors import ConfigurationError
from server.retirement.plan import Item, PlanError, parse_item, parse_plan
from server.settings import load_settings

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)  # a Tuesday


def plan_of(*entries: dict) -> str:
    return json.dumps(list(entries))


def test_nothing_configured_is_an_empty_plan() -> None:
    assert not parse_plan("")
    assert not parse_plan("  ")


@pytest.mark.parametrize(
    ("text", "item"),
    [
        ("sse", Item("sse")),
        ("initialize", Item("initialize")),
        ("era:initialize", Item("initialize")),
        ("version:2024-11-05", Item("version", "2024-11-05")),
        ("method:logging/setLevel", Item("method", "logging/setLevel")),
        ("method:sampling/createMessage", Item("method", "sampling/createMessage")),
    ],
)
def test_every_kind_of_item_is_read(text: str, item: Item) -> None:
    assert parse_item(text) == item


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("version:1999-01-01", "unknown protocol version '1999-01-01'"),
        ("method:tools/destroy", "unknown method 'tools/destroy'"),
        ("websocket", "unknown item 'websocket'"),
    ],
)
def test_an_unknown_item_is_named(text: str, says: str) -> None:
    with pytest.raises(PlanError, match=says):
        parse_item(text)


def test_before_the_sunset_an_item_is_deprecated_and_after_it_retired() -> None:
    plan = parse_plan(plan_of({"item": "sse", "sunset": "2027-03-01"}), NOW)
    assert plan.phase(Item("sse"), NOW) == "deprecated"
    assert plan.phase(Item("sse"), datetime(2027, 3, 1, tzinfo=UTC)) == "retired"
    assert plan.phase(Item("initialize"), NOW) is None


def test_a_weekly_brownout_retires_the_item_inside_its_window_only() -> None:
    plan = parse_plan(
        plan_of({"item": "sse", "sunset": "2027-03-01", "brownouts": ["Tue 10:00-10:15"]}), NOW
    )
    tuesday = datetime(2026, 12, 15, 10, 0, tzinfo=UTC)
    assert plan.phase(Item("sse"), tuesday) == "retired"
    assert plan.phase(Item("sse"), tuesday + timedelta(minutes=15)) == "deprecated"
    assert plan.phase(Item("sse"), tuesday - timedelta(minutes=1)) == "deprecated"
    assert plan.phase(Item("sse"), tuesday + timedelta(days=1)) == "deprecated"


def test_a_one_off_brownout_holds_between_its_ends() -> None:
    window = "2026-12-10T10:00Z/2026-12-10T11:00Z"
    plan = parse_plan(plan_of({"item": "sse", "sunset": "2027-03-01", "brownouts": [window]}), NOW)
    assert plan.phase(Item("sse"), datetime(2026, 12, 10, 10, 30, tzinfo=UTC)) == "retired"
    assert plan.phase(Item("sse"), datetime(2026, 12, 10, 11, 0, tzinfo=UTC)) == "deprecated"


def test_supported_versions_leave_out_the_retired_ones_and_a_retired_era() -> None:
    plan = parse_plan(plan_of({"item": "version:2024-11-05", "sunset": "2026-12-01"}), NOW)
    assert "2024-11-05" not in plan.supported_versions(NOW)
    assert "2025-11-25" in plan.supported_versions(NOW)
    era = parse_plan(plan_of({"item": "initialize", "sunset": "2026-12-01"}), NOW)
    assert era.supported_versions(NOW) == ("2026-07-28",)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"item": "sse", "sunset": "March"}, "sunset is not an ISO date: 'March'"),
        (
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "brownouts": ["2026-01-01T10:00Z/2026-01-01T11:00Z"],
            },
            "is in the past",
        ),
        (
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "brownouts": ["Tue 10:00-10:15", "Tue 10:10-10:20"],
            },
            "'Tue 10:00-10:15' and 'Tue 10:10-10:20' overlap",
        ),
        (
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "brownouts": ["daily 09:00-09:30", "Wed 09:20-09:40"],
            },
            "overlap",
        ),
        (
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "brownouts": ["Tue 10:00-10:15", "Tue 10:00-10:15"],
            },
            "overlap",
        ),
        (
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "brownouts": ["2027-04-01T10:00Z/2027-04-01T11:00Z"],
            },
            "starts after the sunset",
        ),
        (
            {"item": "sse", "sunset": "2027-03-01", "brownouts": ["Tue 10:15-10:00"]},
            "must end after",
        ),
        (
            {"item": "sse", "sunset": "2027-03-01", "brownouts": ["at lunch"]},
            "use 'Tue 10:00-10:15'",
        ),
        ({"item": "sse", "sunset": "2027-03-01", "successor": "/mcp"}, "absolute http(s) URL"),
        ({"item": "sse", "sunset": "2027-03-01", "link": "ftp://x/y"}, "absolute http(s) URL"),
        ({"item": "sse", "sunset": "2027-03-01", "notify": "yes"}, "notify must be true or false"),
        ({"item": "sse", "sunset": "2027-03-01", "when": "soon"}, "unknown key 'when'"),
        ({"item": "version:9", "sunset": "2027-03-01"}, "unknown protocol version '9'"),
        ({"sunset": "2027-03-01"}, 'at least "item" and "sunset"'),
    ],
)
def test_what_cannot_be_kept_is_refused_with_one_line(entry: dict, says: str) -> None:
    with pytest.raises(PlanError, match=says.replace("(", r"\(").replace(")", r"\)")) as refused:
        parse_plan(plan_of(entry), NOW)
    assert "\n" not in str(refused.value)


def test_the_same_item_twice_and_bad_json_are_refused() -> None:
    with pytest.raises(PlanError, match="sse is retired twice"):
        parse_plan(
            plan_of(
                {"item": "sse", "sunset": "2027-03-01"}, {"item": "sse", "sunset": "2028-01-01"}
            ),
            NOW,
        )
    with pytest.raises(PlanError, match="not JSON"):
        parse_plan("[{", NOW)


def test_start_up_names_the_variable_in_one_line() -> None:
    bad = plan_of({"item": "method:tools/destroy", "sunset": "2027-03-01"})
    with pytest.raises(ConfigurationError) as refused:
        load_settings(retire=bad)
    message = str(refused.value)
    assert "MCP_RETIRE" in message
    assert "unknown method 'tools/destroy'" in message
    assert "\n" not in message
