"""From the counters (:class:`~server.report.counters.Tally`) to the immutable
:class:`~server.report.model.Report`: clients in order with their ids, each judged against the
methods of its own eras, totals, errors by method, targets, features and the timeline.

A client is judged per era it used: against what its own ``initialize`` / ``server/discover``
records of that era advertised, else against every list of that era in the input. So a
2026-07-28 client is never told it skipped ``initialize`` or ``ping``, which its era does not
have, and a client with no era (every request refused before the era was known) is judged
against nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson

from server.report.counters import NO_FIRST, ClientStats, Tally, tally
from server.report.model import (
    ClientReport,
    ErrorRow,
    InputSummary,
    MethodTotal,
    MethodUse,
    Report,
    TargetReport,
    TargetUse,
    Timeline,
    Totals,
    features,
)
from server.report.tally import OUTCOMES, error_name, latency, merge, merged

K = TypeVar("K", str, int)
# The timeline has at most this many points; longer spans get wider buckets.
MAX_POINTS = 1_440
BUCKET_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)


def by_count(counts: dict[K, int]) -> dict[K, int]:
    """Most frequent first, ties in key order, so every rendering is stable."""
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def encodable(value: Any) -> Any:
    """``value`` if it can be written back as JSON (a record may nest deeper than orjson
    writes), else a marker saying it could not."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return {"_unrenderable": True}
    return value


def build_report(aggregator: Tally) -> Report:
    everyone = list(aggregator.clients.values())
    if aggregator.overflow is not None:
        everyone.append(aggregator.overflow)
    everyone.sort(
        key=lambda stats: (
            -stats.requests,
            -stats.streams,
            stats.key[0] is None,
            stats.key[0] or "",
            stats.key[1] or "",
            stats.key[2] or "",
        )
    )
    ids = {stats: f"c{number}" for number, stats in enumerate(everyone, 1)}
    clients = [client_report(stats, ids[stats], aggregator) for stats in everyone]
    method_totals = totals_by_method(everyone, clients, aggregator)
    firsts = [c.first_seen for c in clients if c.first_seen is not None]
    lasts = [c.last_seen for c in clients if c.last_seen is not None]
    requests = sum(client.requests for client in clients)
    streams = sum(client.streams for client in clients)
    summary = InputSummary(
        files=list(aggregator.files),
        lines=aggregator.lines,
        records=requests + streams,
        requests=requests,
        streams=streams,
        malformed=aggregator.malformed,
        unknown_version=aggregator.unknown_version,
        unknown_kind=aggregator.unknown_kind,
        folded_clients=len(aggregator.folded),
        errors=list(aggregator.errors),
        filtered_out=aggregator.filtered_out,
        filters=aggregator.filter.describe(),
    )
    advertised_by_era = {era: sorted(methods) for era, methods in aggregator.advertised.items()}
    union = set().union(*aggregator.advertised.values()) if aggregator.advertised else set()
    return Report(
        input=summary,
        first_seen=min(firsts, default=None),
        last_seen=max(lasts, default=None),
        advertised=sorted(union),
        methods=sorted(
            method_totals,
            key=lambda m: (-method_totals[m].requests - method_totals[m].notifications, m),
        ),
        clients=clients,
        advertised_by_era=dict(sorted(advertised_by_era.items())),
        totals=Totals(
            requests=requests,
            streams=streams,
            failed=sum(client.failed for client in clients),
            clients=len(clients),
            latency=latency(merged(hist for stats in everyone for hist in stats.latency.values())),
            methods=method_totals,
        ),
        errors=error_rows(everyone, ids),
        targets=target_reports(aggregator, ids),
        features=features(everyone, ids, aggregator),
        timeline=timeline(aggregator.minutes),
    )


def judged_against(stats: ClientStats, aggregator: Tally) -> tuple[set[str], str]:
    """The methods a client is judged against, and where they came from (see the module
    docstring): per era it used, its own advertised list, else the input's for that era."""
    methods: set[str] = set()
    sources: set[str] = set()
    for era in stats.eras:
        own = stats.advertised.get(era)
        if own:
            methods |= own
            sources.add("client")
        elif aggregator.advertised.get(era):
            methods |= aggregator.advertised[era]
            sources.add("input")
    if not sources:
        return methods, "none"
    return methods, "mixed" if len(sources) > 1 else sources.pop()


def client_report(stats: ClientStats, client_id: str, aggregator: Tally) -> ClientReport:
    methods = {
        method: MethodUse(stats.calls.get(method, 0), stats.notes.get(method, 0))
        for method in stats.calls.keys() | stats.notes.keys()
    }
    advertised, source = judged_against(stats, aggregator)
    name, version, agent = stats.key
    codes: dict[int, int] = {}
    by_method: dict[str, dict[int, int]] = {}
    for (method, code), count in stats.errors.items():
        codes[code] = codes.get(code, 0) + count
        per = by_method.setdefault(method or "(no method)", {})
        per[code] = per.get(code, 0) + count
    return ClientReport(
        id=client_id,
        name=name,
        version=version,
        user_agent=agent,
        requests=stats.requests,
        failed=stats.failed,
        first_seen=None if stats.first == NO_FIRST else stats.first,
        last_seen=stats.last or None,
        eras=by_count(stats.eras),
        transports=by_count(stats.transports),
        header_versions=by_count(stats.header_versions),
        body_versions=by_count(stats.body_versions),
        capability_names=sorted(stats.capability_names),
        capabilities=encodable(stats.capabilities),
        methods=dict(sorted(methods.items(), key=lambda item: (-item[1].total, item[0]))),
        pseudo_methods=by_count(stats.pseudo),
        no_method=stats.no_method,
        verbs=by_count(stats.verbs),
        advertised=sorted(advertised),
        advertised_source=source,
        never_requested=sorted(advertised - methods.keys()),
        # Notifications are not offered, so only requests can be unadvertised.
        not_advertised=sorted(
            method for method, use in methods.items() if use.requests and method not in advertised
        )
        if advertised
        else [],
        jsonrpc_errors=by_count(codes),
        errors_by_method={method: by_count(per) for method, per in sorted(by_method.items())},
        latency=quantiles(stats.latency),
        ttfb=quantiles(stats.ttfb),
        http_statuses=by_count(stats.http_statuses),
        sessions=len(stats.sessions),
        streams=stats.streams,
        stream_events=stats.stream_events,
        stream_ends=by_count(stats.stream_ends),
        tasks=by_count(tally(stats.tasks)),
    )


def quantiles(histograms: dict[str, dict[int, int]]) -> dict[str, Any]:
    found = {method: latency(histogram) for method, histogram in sorted(histograms.items())}
    return {method: value for method, value in found.items() if value is not None}


def totals_by_method(
    everyone: list[ClientStats], clients: list[ClientReport], aggregator: Tally
) -> dict[str, MethodTotal]:
    names = set().union(*aggregator.advertised.values()) if aggregator.advertised else set()
    for stats in everyone:
        names |= stats.calls.keys() | stats.notes.keys()
    failed: dict[str, int] = {}
    for stats in everyone:
        for (method, _), count in stats.errors.items():
            if method is not None:
                failed[method] = failed.get(method, 0) + count
    totals: dict[str, MethodTotal] = {}
    for method in names:
        histogram: dict[int, int] = {}
        for stats in everyone:
            found = stats.latency.get(method)
            if found:
                merge(histogram, found)
        totals[method] = MethodTotal(
            requests=sum(stats.calls.get(method, 0) for stats in everyone),
            notifications=sum(stats.notes.get(method, 0) for stats in everyone),
            failed=failed.get(method, 0),
            clients=sum(1 for c in clients if method in c.methods),
            latency=latency(histogram),
        )
    return totals


def error_rows(everyone: list[ClientStats], ids: dict[Any, str]) -> list[ErrorRow]:
    rows: dict[tuple[str | None, int], dict[str, int]] = {}
    for stats in everyone:
        for key, count in stats.errors.items():
            per = rows.setdefault(key, {})
            per[ids[stats]] = per.get(ids[stats], 0) + count
    built = [
        ErrorRow(method, code, error_name(code), sum(per.values()), by_count(per))
        for (method, code), per in rows.items()
    ]
    return sorted(built, key=lambda row: (-row.count, row.method or "", row.code))


def target_reports(aggregator: Tally, ids: dict[Any, str]) -> list[TargetReport]:
    reports = []
    for (kind, name), stats in aggregator.targets.stats.items():
        uses = []
        total = [0] * (len(OUTCOMES) + 1)
        for client, counters in stats.by_client.items():
            for index, value in enumerate(counters):
                total[index] += value
            uses.append(TargetUse(ids[client], counters[0], outcomes_of(counters)))
        uses.sort(key=lambda use: (-use.calls, int(use.client[1:])))
        reports.append(
            TargetReport(
                kind=kind,
                name=name,
                calls=total[0],
                outcomes=outcomes_of(total),
                error_codes=by_count(stats.codes),
                latency=latency(stats.latency),
                clients=uses,
            )
        )
    order = {"tool": 0, "prompt": 1, "resource": 2, "template": 3}
    return sorted(reports, key=lambda t: (order.get(t.kind, 9), -t.calls, t.name))


def outcomes_of(counters: list[int]) -> dict[str, int]:
    return {outcome: counters[index] for index, outcome in enumerate(OUTCOMES, 1)}


def timeline(minutes: dict[str, list[int]]) -> Timeline:
    """Requests and failures per bucket, every bucket from the first to the last (gaps are
    zeros), the bucket as wide as it must be to stay within :data:`MAX_POINTS`."""
    parsed = sorted(
        (moment, counts) for moment, counts in _parse_minutes(minutes.items()) if moment is not None
    )
    if not parsed:
        return Timeline(1, [])
    first, last = parsed[0][0], parsed[-1][0]
    span = int((last - first).total_seconds() // 60) + 1
    width = next((w for w in BUCKET_MINUTES if span / w <= MAX_POINTS), BUCKET_MINUTES[-1])
    start = first - timedelta(minutes=(first.hour * 60 + first.minute) % width)
    count = int((last - start).total_seconds() // 60) // width + 1
    points = [[0, 0] for _ in range(count)]
    for moment, (requests, failed) in parsed:
        slot = int((moment - start).total_seconds() // 60) // width
        points[slot][0] += requests
        points[slot][1] += failed
    return Timeline(
        width,
        [
            ((start + timedelta(minutes=i * width)).strftime("%Y-%m-%dT%H:%M"), r, f)
            for i, (r, f) in enumerate(points)
        ],
    )


def _parse_minutes(
    items: Iterable[tuple[str, list[int]]],
) -> Iterable[tuple[datetime | None, list[int]]]:
    for text, counts in items:
        try:
            moment = datetime.strptime(text, "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
        except ValueError:
            moment = None  # a time a client or a bad line made up: not on the chart
        yield moment, counts
