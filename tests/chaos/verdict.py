"""Whether a fault of the chaos run kept its promises (``tests/chaos/run.py``): the errors its
window saw by kind (allowed or not), quick requests slower than the fault allows, the time to
recover, whether every answered request has exactly one record, resource updates lost on
``initialize``-era GET streams, and for a drain or a rollout the listen streams' completions
and the p99 latency against steady state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.faults import Fault
from tests.chaos.ledger import QUICK, Ledger, Op, errors_by_kind, percentile

SIGKILL_RECORD_LOSS_S = 1.0  # records a SIGKILL may lose: the writer's last flush interval


@dataclass
class Window:
    fault: Fault
    start: float
    acted: float = 0.0  # when the fault's action returned
    end: float = 0.0
    missing: dict[str, int] = field(default_factory=dict)  # client -> updates lost (< 0: extra)
    get_resumes: int = 0

    @property
    def lost_events(self) -> int:
        return sum(n for n in self.missing.values() if n > 0)


@dataclass
class Verdict:
    name: str
    ops: int
    errors: Counter[str]
    breaches: list[str] = field(default_factory=list)
    recover_s: float = 0.0
    records: tuple[int, int] = (0, 0)  # (answered requests with exactly one record, answered)
    notes: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.breaches

    def line(self) -> str:
        errors = ", ".join(f"{kind} x{n}" for kind, n in sorted(self.errors.items())) or "none"
        exact, answered = self.records
        return (
            f"fault {self.name}: {self.ops} ops; errors: {errors}; recovered in "
            f"{self.recover_s:.1f} s; records exact: {'yes' if exact == answered else 'no'} "
            f"({exact}/{answered}); {'; '.join(self.notes)}; promise held: "
            f"{'yes' if self.held else 'NO (' + '; '.join(self.breaches) + ')'}"
        )


def record_counts(records: list[list[dict[str, Any]]]) -> Counter[str]:
    return Counter(r["request_id"] for rs in records for r in rs if r.get("kind") == "request")


def judge(
    window: Window,
    ledger: Ledger,
    counts: Counter[str],
    steady_p99: float | None = None,
) -> Verdict:
    fault = window.fault
    ops = ledger.in_window(window.start, window.end)
    verdict = Verdict(fault.name, len(ops), errors_by_kind(ops))
    bad: Counter[str] = Counter()
    last_error = window.start
    for op in ops:
        if op.error is not None:
            last_error = max(last_error, op.end)
            if not fault.allows(op.era, op.what, op.error):
                bad[f"{op.era}:{op.what}:{op.error}"] += 1
        elif op.what in QUICK and op.seconds > fault.slow_s:
            bad[f"{op.era}:{op.what}: slower than {fault.slow_s:g} s"] += 1
    verdict.recover_s = last_error - window.start
    for kind, n in bad.most_common(4):
        verdict.breaches.append(f"{kind} x{n}")
    slowest = max((op.seconds for op in ops if op.what in QUICK), default=0.0)
    verdict.notes.append(f"slowest quick request {slowest:.2f} s")
    answered = [(at, rid) for at, rid in ledger.answered if window.start <= at <= window.end]
    exact = sum(1 for _, rid in answered if counts[rid] == 1)
    excused = sum(
        1
        for at, rid in answered
        if counts[rid] == 0 and any(k - SIGKILL_RECORD_LOSS_S <= at <= k for k in fault.killed_at)
    )
    twice = sum(1 for _, rid in answered if counts[rid] > 1)
    verdict.records = (exact + excused, len(answered))
    if excused:
        verdict.notes.append(f"{excused} records lost to SIGKILL (documented)")
    if exact + excused < len(answered):
        verdict.breaches.append(
            f"{len(answered) - exact - excused} answered requests without exactly one record"
            f" ({twice} with more than one)"
        )
    lost = ", ".join(f"{name} {n}" for name, n in sorted(window.missing.items()) if n)
    verdict.notes.append(
        f"updates lost {window.lost_events}{f' ({lost})' if lost else ''},"
        f" {window.get_resumes} GET streams resumed"
    )
    if window.lost_events:
        verdict.breaches.append(f"{window.lost_events} resource updates lost on GET streams")
    marks = ledger.marks_in(window.start, window.end)
    if fault.readyz_within is not None:
        readyz(verdict, window, marks, fault.readyz_within)
    completed = sum(1 for m in marks if m.what == "listen completed")
    if fault.drains:
        verdict.notes.append(f"listen streams completed {completed}")
    if steady_p99 is not None:
        p99 = p99_of(ops)
        verdict.notes.append(f"p99 {p99 * 1000:.0f} ms (steady {steady_p99 * 1000:.0f} ms)")
        if p99 > 2 * steady_p99:
            verdict.breaches.append(f"p99 {p99 * 1000:.0f} ms > 2 x steady")
    return verdict


def readyz(verdict: Verdict, window: Window, marks: list[Any], within: float) -> None:
    """Every replica's /readyz turned 503 within ``within`` seconds of the fault."""
    replicas = sorted({m.what.split()[1] for m in marks if m.what.startswith("readyz ")})
    delays = []
    for index in replicas:
        down = [m.at for m in marks if m.what == f"readyz {index} 503"]
        delays.append(min(down) - window.start if down else None)
    shown = ", ".join("never" if d is None else f"{d:.1f} s" for d in delays)
    verdict.notes.append(f"/readyz 503 after {shown or 'no probe'}")
    if not delays or any(d is None or d > within for d in delays):
        verdict.breaches.append(f"/readyz not 503 within {within:g} s on every replica")


def p99_of(ops: list[Op]) -> float:
    """p99 of the quick requests that succeeded (what a rollout must not slow past 2x)."""
    return percentile([op.seconds for op in ops if op.what in QUICK and op.error is None], 0.99)


def per_client(
    ledger: Ledger, window: Window, records: list[list[dict[str, Any]]], wall: float
) -> list[str]:
    """One line per client for the window: its requests and errors as it saw them, and what its
    records say (requests, those answered >= 400, stream ends by reason)."""
    lines = []
    start_wall, end_wall = wall + window.start, wall + window.end
    by_client: dict[str, list[dict[str, Any]]] = {}
    for rs in records:
        for record in rs:
            name = (record.get("client") or {}).get("name")
            stamp = record.get("epoch")
            if name is None or stamp is None or not start_wall <= stamp <= end_wall:
                continue
            by_client.setdefault(name, []).append(record)
    ops = ledger.in_window(window.start, window.end)
    for name in sorted({op.client for op in ops}):
        mine = [op for op in ops if op.client == name]
        errors = Counter(op.error for op in mine if op.error is not None)
        recs = by_client.get(name, [])
        requests = [r for r in recs if r["kind"] == "request"]
        failed = sum(1 for r in requests if (r.get("status") or 0) >= 400)
        ends = Counter(r.get("end") for r in recs if r["kind"] == "stream")
        marks = Counter(
            m.what for m in ledger.marks_in(window.start, window.end) if m.client == name
        )
        lines.append(
            f"  {name} ({mine[0].era}): {len(mine)} ops, errors {dict(errors) or 0}; "
            f"records {len(requests)} requests, {failed} >= 400, streams {dict(ends) or 0}; "
            f"{dict(marks) or ''}"
        )
    return lines


def orphans(
    window: Window, ledger: Ledger, records: list[list[dict[str, Any]]], wall: float
) -> list[str]:
    """A line per answered request of the window without exactly one request record: what the
    client sent and got, when (from the window's start and from the fault's action), and every
    record of any kind with its id (replica, kind, method, status, end)."""
    by_id: dict[str, list[str]] = {}
    for index, rs in enumerate(records):
        for record in rs:
            stamp = record.get("epoch")
            when = f"{stamp - wall - window.start:+.2f} s" if stamp is not None else "?"
            by_id.setdefault(str(record.get("request_id")), []).append(
                f"replica {index} {record.get('kind')} {record.get('method')} "
                f"status {record.get('status')} end {record.get('end')} at {when}"
            )
    lines = []
    for at, rid in ledger.answered:
        if not window.start <= at <= window.end:
            continue
        found = by_id.get(rid, [])
        if sum(1 for f in found if " request " in f) == 1:
            continue
        lines.append(
            f"  {rid}: {ledger.described.get(rid, '?')} answered at {at - window.start:+.2f} s"
            f" ({at - window.acted:+.2f} s from the fault's end); records: "
            f"{'; '.join(found) or 'none'}"
        )
    return lines


def timeline(window: Window, ledger: Ledger, slowest: int = 8) -> list[str]:
    """The fault's steps and its slowest quick requests, in seconds from the window's start:
    what a p99 past the bound was waiting for (a replica starting, stopping, ...)."""
    steps = ", ".join(f"{what} {at - window.start:+.1f}" for at, what in window.fault.steps)
    quick = [
        op
        for op in ledger.in_window(window.start, window.end)
        if op.what in QUICK and op.error is None
    ]
    quick.sort(key=lambda op: op.seconds, reverse=True)
    slow = ", ".join(
        f"{op.client} {op.what} {op.seconds * 1000:.0f} ms {op.start - window.start:+.1f}"
        for op in quick[:slowest]
    )
    stalls = ", ".join(
        f"{late * 1000:.0f} ms {at - window.start:+.1f}"
        for at, late in ledger.stalls
        if window.start <= at <= window.end
    )
    return [
        f"  steps: {steps or 'none'}",
        f"  slowest: {slow or 'none'}",
        f"  the clients' own loop late: {stalls or 'never'}",
    ]
