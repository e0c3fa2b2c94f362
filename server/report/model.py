"""What ``python -m server report`` found: the immutable result the renderers draw.

:class:`Report` holds a summary of the input (files, lines, what was skipped and why), the
methods seen or advertised, and one :class:`ClientReport` per client, where a client is (client
name, client version, user agent) and records without a name are ``(unidentified)``. Every
mapping is ordered most frequent first, so every rendering of one input is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

UNIDENTIFIED = "(unidentified)"


@dataclass(frozen=True, slots=True)
class MethodUse:
    """How often one client sent one method, as requests and as notifications."""

    requests: int
    notifications: int

    @property
    def total(self) -> int:
        return self.requests + self.notifications


@dataclass(frozen=True, slots=True)
class ClientReport:
    """Everything the report says about one client."""

    name: str | None
    version: str | None
    user_agent: str | None
    requests: int
    first_seen: str | None
    last_seen: str | None
    eras: dict[str, int]
    header_versions: dict[str, int]
    body_versions: dict[str, int]
    capability_names: list[str]
    capabilities: Any
    methods: dict[str, MethodUse]
    pseudo_methods: dict[str, int]
    no_method: int
    verbs: dict[str, int]
    advertised: list[str]
    # "client": its own initialize/discover records; "input": none, so every advertised list
    # in the input; "none": the input has no advertised list at all.
    advertised_source: str
    never_requested: list[str]
    not_advertised: list[str]
    jsonrpc_errors: dict[int, int]
    http_statuses: dict[int, int]
    sessions: int
    streams: int
    stream_events: int
    stream_ends: dict[str, int]
    # Tasks by the last status their records showed (created: "working", then what polls saw).
    tasks: dict[str, int]

    @property
    def label(self) -> str:
        return self.name if self.name is not None else UNIDENTIFIED

    def cell(self, method: str) -> tuple[str, int]:
        """This client's standing on ``method`` and its count: ``requested``,
        ``unadvertised`` (requested though not advertised to it), ``advertised`` (but never
        requested) or ``absent`` (neither)."""
        use = self.methods.get(method)
        if use is not None:
            return ("unadvertised" if method in self.not_advertised else "requested"), use.total
        return ("advertised" if method in self.never_requested else "absent"), 0


@dataclass(frozen=True, slots=True)
class InputSummary:
    """What was read: ``records`` = ``requests`` + ``streams``; the rest were skipped."""

    files: list[str]
    lines: int
    records: int
    requests: int
    streams: int
    malformed: int
    unknown_version: int
    unknown_kind: int
    folded_clients: int
    errors: list[str]


@dataclass(frozen=True, slots=True)
class Report:
    """The whole report: clients ordered by requests, most first."""

    input: InputSummary
    first_seen: str | None
    last_seen: str | None
    advertised: list[str]
    # Every method some client requested or the server advertised, most used first.
    methods: list[str]
    clients: list[ClientReport]
