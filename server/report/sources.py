"""Where the report's records come from and which it keeps: record files, and the filters.

Files are read as batches of lines, plain or gzipped (known by its magic bytes, not its name),
from disk or stdin, in large chunks split on newlines; an absurdly long line becomes a
malformed marker, never held whole; a corrupt or truncated gzip raises one of
:data:`READ_ERRORS` after what came before it. The filters: ``--since`` and ``--until`` (an ISO
date or time, UTC unless it says otherwise, or a duration before now such as ``15m``, ``7d``),
compared as the records write times (they sort as strings); ``--client`` (a text in the name or
user agent, any case); ``--method`` (``tools/call``, ``tools/*``). A client's and a method's
verdict is remembered, so filtering costs a dictionary lookup per record.
"""

from __future__ import annotations

import fnmatch
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO

import orjson

CHUNK_BYTES = 1 << 22
# A record line is a few KB (params are capped by the writer); anything this long is junk.
MAX_LINE_BYTES = 1 << 24
OVERLONG = b"(line too long)"
GZIP_MAGIC = b"\x1f\x8b"
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error)


def request_in_period(line: bytes, since: str | None, until: str | None) -> dict[str, Any] | None:
    """The request record a line holds when it was written in ``[since, until)`` (either may
    be None); None for a malformed line, a record of another kind, or one outside the period."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return request_of(record, since, until)


def request_of(record: Any, since: str | None, until: str | None) -> dict[str, Any] | None:
    """:func:`request_in_period` for a line already decoded (the live report's aggregator
    decoded it)."""
    if not isinstance(record, dict) or record.get("kind") != "request":
        return None
    when = record.get("time")
    if not isinstance(when, str) or not in_period(when, since, until):
        return None
    return record


def in_period(when: str, since: str | None, until: str | None) -> bool:
    """A record of this time is in ``[since, until)`` (either may be None); one without a
    time (``""``) only without bounds."""
    if since is not None and not (when and when >= since):
        return False
    return until is None or bool(when and when < until)


class RequestScan:
    """What the ``--retire`` and ``--by-tenant`` views share: the request records written in
    ``[since, until)``, from lines (a file) or from records decoded already (the live report's
    aggregator decoded them), each handed to :meth:`count`."""

    since: str | None
    until: str | None
    # A line without these bytes holds nothing to count: it is not decoded.
    needle = b'"request"'

    def read_batches(self, batches: Iterable[Sequence[bytes]]) -> None:
        needle, since, until = self.needle, self.since, self.until
        for batch in batches:
            for line in batch:
                # find(), not ``in``: bytes' ``in`` tries the needle as an integer first.
                if line.find(needle) >= 0 and (record := request_in_period(line, since, until)):
                    self.count(record)

    def read_record(self, record: dict[str, Any]) -> None:
        """One record line already decoded."""
        kept = request_of(record, self.since, self.until)
        if kept is not None:
            self.count(kept)

    def count(self, record: dict[str, Any]) -> None:
        raise NotImplementedError


def line_batches(stream: BinaryIO) -> Iterator[list[bytes]]:
    """The stream's lines, a chunk's worth at a time, without their newlines."""
    carry = b""
    skipping = False  # inside a line too long to keep: drop bytes until its newline
    try:
        for chunk in chunks(stream):
            lines = (carry + chunk if carry else chunk).split(b"\n")
            carry = lines.pop()
            if skipping and lines:
                del lines[0]
                skipping = False
            if len(carry) > MAX_LINE_BYTES:
                if not skipping:
                    lines.append(OVERLONG)
                carry, skipping = b"", True
            yield lines
    except READ_ERRORS:
        if carry and not skipping:
            yield [carry]
        raise
    if carry and not skipping:
        yield [carry]


def chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The stream's bytes in large pieces, gunzipped when it starts like a gzip file."""
    first = stream.read(CHUNK_BYTES)
    if first.startswith(GZIP_MAGIC):
        yield from _gunzip(first, stream)
        return
    while first:
        yield first
        first = stream.read(CHUNK_BYTES)


def _gunzip(data: bytes, stream: BinaryIO) -> Iterator[bytes]:
    # zlib directly rather than GzipFile: faster, and max_length bounds the memory a small
    # compressed file can claim (a rotated file could be a decompression bomb). Members are
    # read one after another, as gzip allows.
    inflater = zlib.decompressobj(wbits=31)
    pending = False  # a member has started and not yet ended
    while data:
        while data:
            out = inflater.decompress(data, CHUNK_BYTES)
            pending = True
            if out:
                yield out
            if inflater.eof:
                data, pending = inflater.unused_data, False
                inflater = zlib.decompressobj(wbits=31)
            else:
                data = inflater.unconsumed_tail
        data = stream.read(CHUNK_BYTES)
    if pending:
        rest = inflater.flush()
        if rest:
            yield rest
        raise EOFError("gzip data ends early (truncated file?)")


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# Verdicts remembered per client or method, at most this many (then computed every time).
MAX_REMEMBERED = 100_000


def parse_time(text: str, now: float | None = None) -> str:
    """``text`` as a record time (``YYYY-MM-DDTHH:MM:SS.mmmZ``); ValueError if it is neither
    an ISO date or time nor a duration."""
    cleaned = text.strip()
    duration = _DURATION.match(cleaned.lower())
    if duration:
        seconds = float(duration.group(1)) * _SECONDS[duration.group(2)]
        moment = datetime.fromtimestamp((time.time() if now is None else now) - seconds, UTC)
    else:
        try:
            moment = datetime.fromisoformat(cleaned.replace("z", "Z"))
        except ValueError:
            raise ValueError(
                f"{text!r} is not an ISO 8601 date or time, nor a duration like 15m, 2h or 7d"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(slots=True)
class RecordFilter:
    """What to keep; an empty filter keeps everything (and :attr:`active` is False)."""

    since: str | None = None
    until: str | None = None
    clients: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    _client_verdicts: dict[tuple[str | None, str | None, str | None], bool] = field(
        default_factory=dict, repr=False
    )
    _method_verdicts: dict[str | None, bool] = field(default_factory=dict, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.since or self.until or self.clients or self.methods)

    def describe(self) -> dict[str, object]:
        return {
            "since": self.since,
            "until": self.until,
            "clients": list(self.clients),
            "methods": list(self.methods),
        }

    def keeps_time(self, when: str) -> bool:
        """A record of this time is in range (a record without a time only without bounds)."""
        return in_period(when, self.since, self.until)

    def keeps_client(self, key: tuple[str | None, str | None, str | None]) -> bool:
        if not self.clients:
            return True
        verdict = self._client_verdicts.get(key)
        if verdict is None:
            name, _, agent = key
            haystack = f"{name or ''}\n{agent or ''}".lower()
            verdict = any(text.lower() in haystack for text in self.clients)
            if len(self._client_verdicts) < MAX_REMEMBERED:
                self._client_verdicts[key] = verdict
        return verdict

    def keeps_method(self, method: str | None) -> bool:
        if not self.methods:
            return True
        verdict = self._method_verdicts.get(method)
        if verdict is None:
            verdict = method is not None and any(
                fnmatch.fnmatchcase(method, pattern) for pattern in self.methods
            )
            if len(self._method_verdicts) < MAX_REMEMBERED:
                self._method_verdicts[method] = verdict
        return verdict
