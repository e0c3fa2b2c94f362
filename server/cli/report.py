"""``python -m server report SOURCE...``: its arguments, reading the sources, writing the report.

``--since``, ``--until``, ``--client`` and ``--method`` choose the records counted (see
:mod:`server.report.sources`); a bad time is a usage error.

Sources are read in the order given: files, ``-`` for stdin, or a Redis stream
(``redis://host:port/db#key``, see :mod:`server.report.redis`, imported only then, so the
``redis`` package stays optional). A source that cannot be opened is a usage error (exit 2,
nothing written), since a report silently missing a file would mislead; bad content inside a
source is counted in the report and summed up on stderr, and the exit status stays 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

import orjson

from server.report.aggregate import Aggregator
from server.report.html import render_html
from server.report.json import render_json
from server.report.model import Report
from server.report.retire import (
    RetireScan,
    render_retire_markdown,
    render_retire_text,
    with_retire_section,
)
from server.report.sources import RecordFilter, line_batches, parse_time
from server.report.tenants import TENANT_FORMS, TenantScan, render_tenants_text
from server.report.text import render_markdown, render_table
from server.retirement.plan import PlanError

REDIS_SCHEMES = ("redis://", "rediss://")
DEFAULT_REDIS_KEY = "mcp:records"
RENDERERS: dict[str, Callable[[Report], str]] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="+",
        metavar="SOURCE",
        help="record files: .jsonl, rotated .jsonl.N, gzipped .gz; - for stdin; a Redis "
        "stream: redis://[:password@]host:port/db[#key] (rediss:// for TLS)",
    )
    parser.add_argument("--format", choices=list(RENDERERS), default="table")
    parser.add_argument(
        "--redis-key",
        default=DEFAULT_REDIS_KEY,
        metavar="KEY",
        help=f"stream key of redis:// sources without #key (default {DEFAULT_REDIS_KEY})",
    )
    parser.add_argument("--output", metavar="PATH", help="write here instead of stdout")
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="only records at or after TIME: ISO 8601 (2026-11-30, 2026-11-30T06:00, UTC "
        "unless an offset is given) or a duration before now (15m, 2h, 7d)",
    )
    parser.add_argument("--until", metavar="TIME", help="only records before TIME (as --since)")
    parser.add_argument(
        "--client",
        action="append",
        default=[],
        metavar="TEXT",
        help="only clients whose name or user agent contains TEXT (any case; repeatable)",
    )
    parser.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only records of methods matching PATTERN (tools/call, tools/*; repeatable)",
    )
    parser.add_argument(
        "--by-tenant",
        action="store_true",
        help="the traffic split by tenant (requests, errors, latency, callers, tools)",
    )
    parser.add_argument(
        "--tenant",
        metavar="TENANT",
        help="with --by-tenant: only this tenant ((none) for callers without one)",
    )
    parser.add_argument(
        "--retire",
        metavar="ITEM",
        help="who still uses ITEM (sse, initialize, version:V, method:M), with advice for each; "
        "exit 1 while anyone did (in the period of --since/--until)",
    )


def record_filter(args: argparse.Namespace) -> RecordFilter:
    """The filters asked for; ValueError naming a bad time."""
    since = getattr(args, "since", None)
    until = getattr(args, "until", None)
    return RecordFilter(
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        clients=tuple(getattr(args, "client", None) or ()),
        methods=tuple(getattr(args, "method", None) or ()),
    )


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    try:
        chosen = record_filter(args)  # --since/--until read once: the scans share the bounds
        aggregator = Aggregator(chosen)
        scan = retire_scan(args, chosen) or tenant_scan(args, chosen)
    except ValueError as bad_argument:
        return complain(str(bad_argument))
    if scan is not None and scan.with_report:
        aggregator.also = scan.read_record
    for name in args.files:
        if name == "-":
            source = stdin if stdin is not None else sys.stdin.buffer
            aggregator.read_batches(teed(line_batches(source), scan), "(stdin)")
            continue
        if name.startswith(REDIS_SCHEMES):
            problem = read_redis(aggregator, name, args.redis_key, scan)
            if problem:
                return complain(problem)
            continue
        try:
            with open(name, "rb") as stream:
                aggregator.read_batches(teed(line_batches(stream), scan), name)
        except OSError as failure:
            return complain(f"cannot read {name}: {failure.strerror or failure}")
    report = aggregator.report()
    if isinstance(scan, TenantScan):
        return write_tenants(args, scan)
    if scan is not None:
        return write_retire(args, scan, report)
    written = write_text(args, RENDERERS[args.format](report))
    if not written:
        warn_about_input(report)
    return written


def retire_scan(args: argparse.Namespace, chosen: RecordFilter) -> RetireScan | None:
    """The ``--retire`` scan asked for, over the period of ``--since``/``--until``."""
    item = getattr(args, "retire", None)
    if item is None:
        return None
    try:
        scan = RetireScan(item, chosen.since, chosen.until)
    except PlanError as unknown:
        raise ValueError(f"--retire: {unknown}") from None
    scan.with_report = args.format == "html"  # the section goes into the whole report
    return scan


def tenant_scan(args: argparse.Namespace, chosen: RecordFilter) -> TenantScan | None:
    """The ``--by-tenant`` view asked for, over the period of ``--since``/``--until``."""
    if not getattr(args, "by_tenant", False):
        if getattr(args, "tenant", None) is not None:
            raise ValueError("--tenant goes with --by-tenant")
        return None
    return TenantScan(args.tenant, chosen.since, chosen.until)


def scan_json(scan: RetireScan) -> str:
    return orjson.dumps(scan.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n"


def write_tenants(args: argparse.Namespace, scan: TenantScan) -> int:
    return write_text(args, TENANT_FORMS.get(args.format, render_tenants_text)(scan))


def write_text(args: argparse.Namespace, text: str) -> int:
    data = text.encode("utf-8", "replace")
    if args.output:
        try:
            with open(args.output, "wb") as out:
                out.write(data)
        except OSError as failure:
            return complain(f"cannot write {args.output}: {failure.strerror or failure}")
    else:
        write_stdout(data)
    return 0


def teed(
    batches: Iterable[list[bytes]], scan: RetireScan | TenantScan | None
) -> Iterator[list[bytes]]:
    """The batches, each shown to the ``--retire`` or ``--by-tenant`` scan on its way (one read
    of the input). With no HTML page to draw the report proper gets none of them; with one, the
    scan reads the records the aggregator decodes (``Aggregator.also``, set by :func:`run`)
    rather than decoding every line again."""
    for batch in batches:
        if scan is None or scan.with_report:
            yield batch
        else:
            scan.read_batches((batch,))


def write_retire(args: argparse.Namespace, scan: RetireScan, report: Report) -> int:
    """The ``--retire`` answer in the format asked for; 1 while anyone used the item."""
    if args.format == "json":
        text = scan_json(scan)
    elif args.format == "markdown":
        text = render_retire_markdown(scan)
    elif args.format == "html":  # the whole report, with the section at its top
        text = with_retire_section(render_html(report), scan)
    else:
        text = render_retire_text(scan)
    written = write_text(args, text)
    if written:
        return written
    return 1 if scan.clients or scan.other_clients else 0


def read_redis(
    aggregator: Aggregator,
    source: str,
    default_key: str,
    scan: RetireScan | TenantScan | None = None,
) -> str | None:
    """Add a Redis stream to the report; what went wrong if it could not be read at all."""
    try:
        from server.report import redis as report_redis
    except ImportError:
        return (
            "reading a Redis stream needs the redis package: "
            "pip install redis (from a checkout: pip install -e '.[redis]')"
        )
    try:
        url, key, name = report_redis.parse_source(source, default_key)
    except ValueError as failure:
        return f"cannot read a Redis source: {failure}"
    try:
        batches = report_redis.open_stream(url, key)
    except (OSError, ValueError) as failure:  # ValueError: a URL redis cannot parse
        return f"cannot read {name}: {failure}"
    aggregator.read_batches(teed(batches, scan), name)
    return None


def complain(message: str) -> int:
    print(f"python -m server report: {message}", file=sys.stderr)
    return 2


def warn_about_input(report: Report) -> None:
    """What was skipped, on stderr, where a report written to a file cannot hide it."""
    summary = report.input
    skipped = {
        "malformed lines": summary.malformed,
        "records of an unknown version": summary.unknown_version,
        "records of an unknown kind": summary.unknown_kind,
    }
    said = [f"{count:,} {what}" for what, count in skipped.items() if count]
    if said:
        print(f"python -m server report: skipped {', '.join(said)}", file=sys.stderr)
    for error in summary.errors:
        print(f"python -m server report: {error}", file=sys.stderr)


def write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (say, head) left: not an error. Point stdout at /dev/null so the
        # interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
