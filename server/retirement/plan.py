"""What the operator retires, and when: items, sunsets and brownout windows, checked at start.

``MCP_RETIRE`` is a JSON list of retirements. Each names one item (``sse``, the HTTP+SSE
transport; ``initialize``, the whole ``initialize`` era; ``version:<protocol version>``;
``method:<name>``, a method a client sends or a feature the server asks a client for, such as
``sampling/createMessage``), its ``sunset``, and optionally when it was ``deprecated``, a
migration ``link``, the ``successor`` URL, brownout windows (``"Tue 10:00-10:15"`` every week,
UTC, or ``"2027-01-05T10:00Z/2027-01-05T11:00Z"`` once) and ``notify`` (tell clients in a log
message too). :func:`parse_plan` refuses anything it cannot keep with one line naming the
entry; :meth:`Plan.phase` says, for a moment, whether an item is ``deprecated`` or ``retired``.
Standard library only: the settings call it to check the variable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from typing import Any, Literal
from urllib.parse import urlsplit

from server.protocol import LEGACY_VERSIONS, METHOD_NAMES, MODERN_VERSIONS
from server.settings_checks import json_list

Phase = Literal["deprecated", "retired"]
Kind = Literal["sse", "initialize", "version", "method"]

# What the server asks a client for, and the capability a client declares for it: retiring
# one turns the feature off for every client.
FEATURE_CAPABILITY = {
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
    "elicitation/create": "elicitation",
}
CLIENT_FEATURES = tuple(FEATURE_CAPABILITY)
# Every method a client may send: the method table's (both eras, tasks), and the skills
# extension's, which its catalog declares.
KNOWN_METHODS = METHOD_NAMES | {"skills/list", "skills/get", "resources/directory/read"}
KNOWN_VERSIONS = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
MAX_RETIREMENTS = 32
MAX_WINDOWS = 64
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WEEKLY = re.compile(r"(?i)(mon|tue|wed|thu|fri|sat|sun|daily)\s+(\d\d):(\d\d)-(\d\d):(\d\d)")
WEEK = timedelta(days=7)
KEYS = frozenset({"item", "sunset", "deprecated", "link", "successor", "brownouts", "notify"})


class PlanError(ValueError):
    """A retirement the server cannot keep; its message is the one line start-up prints."""


@dataclass(frozen=True, slots=True)
class Item:
    """One thing to retire: ``kind`` and, for a version or method, which."""

    kind: Kind
    value: str = ""

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.value}" if self.value else self.kind

    @property
    def client_feature(self) -> bool:
        return self.kind == "method" and self.value in CLIENT_FEATURES


@dataclass(frozen=True, slots=True)
class Window:
    """A brownout: every week on ``days`` (0 is Monday) from ``start`` to ``end`` minutes
    after midnight UTC, or once, from ``once[0]`` to ``once[1]``."""

    text: str
    days: tuple[int, ...] = ()
    start: int = 0
    end: int = 0
    once: tuple[datetime, datetime] | None = None

    def holds(self, now: datetime) -> bool:
        if self.once is not None:
            return self.once[0] <= now < self.once[1]
        minute = now.hour * 60 + now.minute
        return now.weekday() in self.days and self.start <= minute < self.end

    def spans(self, first: datetime, last: datetime) -> list[tuple[datetime, datetime]]:
        """Its occurrences that start before ``last`` and end after ``first``."""
        if self.once is not None:
            begin, end = self.once
            return [(begin, end)] if begin < last and end > first else []
        found = []
        day = datetime.combine(first.date() - timedelta(days=1), datetime.min.time(), UTC)
        while day < last:
            if day.weekday() in self.days:
                begin = day + timedelta(minutes=self.start)
                end = day + timedelta(minutes=self.end)
                if begin < last and end > first:
                    found.append((begin, end))
            day += timedelta(days=1)
        return found


@dataclass(frozen=True, slots=True)
class Retirement:
    item: Item
    sunset: datetime
    deprecated: datetime
    link: str | None = None
    successor: str | None = None
    brownouts: tuple[Window, ...] = ()
    notify: bool = False

    def phase(self, now: datetime) -> Phase:
        if now >= self.sunset or any(window.holds(now) for window in self.brownouts):
            return "retired"
        return "deprecated"


@dataclass(frozen=True, slots=True)
class Plan:
    """Every retirement, by item, as read from ``MCP_RETIRE``."""

    retirements: tuple[Retirement, ...] = ()
    by_name: dict[str, Retirement] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.retirements)

    def phase(self, item: Item, now: datetime) -> Phase | None:
        retirement = self.by_name.get(item.name)
        return None if retirement is None else retirement.phase(now)

    def supported_versions(self, now: datetime) -> tuple[str, ...]:
        """The protocol versions not retired at ``now`` (the whole era counts too)."""
        initialize = self.by_name.get("initialize")
        era_gone = initialize is not None and initialize.phase(now) == "retired"
        return tuple(
            version
            for version in KNOWN_VERSIONS
            if self.phase(Item("version", version), now) != "retired"
            and not (era_gone and version in LEGACY_VERSIONS)
        )


def parse_item(text: str) -> Item:
    """``sse``, ``initialize`` (or ``era:initialize``), ``version:V`` or ``method:M``."""
    text = text.strip()
    if text in ("sse", "initialize", "era:initialize"):
        return Item("sse" if text == "sse" else "initialize")
    kind, _, value = text.partition(":")
    if kind == "version" and value in KNOWN_VERSIONS:
        return Item("version", value)
    if kind == "method" and (value in KNOWN_METHODS or value in CLIENT_FEATURES):
        return Item("method", value)
    if kind == "version":
        raise PlanError(f"unknown protocol version {value!r}; known: {', '.join(KNOWN_VERSIONS)}")
    if kind == "method":
        raise PlanError(f"unknown method {value!r}")
    raise PlanError(
        f"unknown item {text!r}: use sse, initialize, version:<version> or method:<name>"
    )


def parse_moment(text: Any, what: str) -> datetime:
    """An ISO date (midnight UTC) or date and time (UTC unless it says otherwise)."""
    if not isinstance(text, str):
        raise PlanError(f"{what} must be an ISO date such as 2027-03-01, got {text!r}")
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PlanError(f"{what} is not an ISO date: {text!r}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_window(text: Any) -> Window:
    if not isinstance(text, str):
        raise PlanError(f"a brownout is a string, got {text!r}")
    weekly = WEEKLY.fullmatch(text.strip())
    if weekly:
        day, h1, m1, h2, m2 = weekly.groups()
        start, end = int(h1) * 60 + int(m1), int(h2) * 60 + int(m2)
        if int(h1) > 23 or int(h2) > 24 or int(m1) > 59 or int(m2) > 59 or end > 24 * 60:
            raise PlanError(f"brownout {text!r}: not a time of day")
        if end <= start:
            raise PlanError(f"brownout {text!r} must end after it starts, on the same day")
        days = tuple(range(7)) if day.lower() == "daily" else (DAYS.index(day.lower()),)
        return Window(text, days, start, end)
    begin_text, slash, end_text = text.partition("/")
    if not slash:
        raise PlanError(
            f"brownout {text!r}: use 'Tue 10:00-10:15' (weekly, UTC) or 'START/END' (ISO)"
        )
    begins = parse_moment(begin_text.strip(), f"brownout {text!r}")
    ends = parse_moment(end_text.strip(), f"brownout {text!r}")
    if ends <= begins:
        raise PlanError(f"brownout {text!r} must end after it starts")
    return Window(text, once=(begins, ends))


def absolute_url(value: Any, what: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise PlanError(f"{what} must be an absolute http(s) URL, got {value!r}")
    if any(ch in value for ch in '<>" \r\n'):
        raise PlanError(f"{what} holds a character a Link header cannot carry: {value!r}")
    return str(value)


def parse_retirement(entry: Any, now: datetime) -> Retirement:
    if not isinstance(entry, dict) or "item" not in entry or "sunset" not in entry:
        raise PlanError('each retirement is an object with at least "item" and "sunset"')
    unknown = sorted(set(entry) - KEYS)
    if unknown:
        raise PlanError(f"unknown key {unknown[0]!r}; keys: {', '.join(sorted(KEYS))}")
    if not isinstance(entry["item"], str):
        raise PlanError(f"item must be a string, got {entry['item']!r}")
    item = parse_item(entry["item"])
    where = f"retirement of {item.name}: "
    try:
        sunset = parse_moment(entry["sunset"], "sunset")
        deprecated = (
            parse_moment(entry["deprecated"], "deprecated")
            if "deprecated" in entry
            else datetime.combine(now.date(), datetime.min.time(), UTC)
        )
        brownouts = entry.get("brownouts", [])
        if not isinstance(brownouts, list) or len(brownouts) > MAX_WINDOWS:
            raise PlanError(f"brownouts must be a list of at most {MAX_WINDOWS} windows")
        windows = tuple(parse_window(text) for text in brownouts)
        check_windows(windows, now, sunset)
        notify = entry.get("notify", False)
        if not isinstance(notify, bool):
            raise PlanError(f"notify must be true or false, got {notify!r}")
        return Retirement(
            item,
            sunset,
            min(deprecated, sunset),
            absolute_url(entry.get("link"), "link"),
            absolute_url(entry.get("successor"), "successor"),
            windows,
            notify,
        )
    except PlanError as error:
        raise PlanError(where + str(error)) from None


def check_windows(windows: tuple[Window, ...], now: datetime, sunset: datetime) -> None:
    """No window wholly in the past or after the sunset, and no two that overlap."""
    for window in windows:
        if window.once is not None:
            if window.once[1] <= now:
                raise PlanError(f"brownout {window.text!r} is in the past")
            if window.once[0] >= sunset:
                raise PlanError(f"brownout {window.text!r} starts after the sunset")
    # Two weekly windows meet within a week if at all; a one-off within its own span.
    horizon_end = (
        now
        + WEEK
        + max((w.once[1] - now for w in windows if w.once is not None), default=timedelta(0))
    )
    spans = sorted(
        (begin, end, index)
        for index, window in enumerate(windows)
        for begin, end in window.spans(now - WEEK, horizon_end)
    )
    # Sorted by start, two spans overlap only if some neighbours do.
    for (_, end, one), (begin, _, other) in pairwise(spans):
        if begin < end:
            raise PlanError(f"brownouts {windows[one].text!r} and {windows[other].text!r} overlap")


def parse_plan(text: str, now: datetime | None = None) -> Plan:
    """``MCP_RETIRE`` read and checked; an empty value retires nothing."""
    if not text.strip():
        return Plan()
    now = now or datetime.now(UTC)
    try:
        entries = json_list(text, MAX_RETIREMENTS, "retirements")
    except ValueError as error:
        raise PlanError(str(error)) from None
    retirements = tuple(parse_retirement(entry, now) for entry in entries)
    by_name: dict[str, Retirement] = {}
    for retirement in retirements:
        if retirement.item.name in by_name:
            raise PlanError(f"{retirement.item.name} is retired twice")
        by_name[retirement.item.name] = retirement
    return Plan(retirements, by_name)
