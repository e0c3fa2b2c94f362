"""What a record looks like, shared by everything that writes or reads one: the schema version,
the request id's form and the time format (``docs/records.md`` is the full schema).

The request path and the record writer both format ids and times, so both are cheap here:
an id is one integer formatted in one go, and the time of day is formatted once per second.

Every string a client chose (a header, a method, an id, a name) is kept in a record up to
:data:`MAX_CLIENT_STRING` characters and then marked (:func:`clip`), so that no client can
make its records megabytes long and rotate everyone else's out of the files.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

SCHEMA_VERSION = 1

# Client-chosen strings in a record: user agents run to ~200 characters, methods, versions,
# ids and names to a few dozen. Error messages (which may quote the client) get a little more.
MAX_CLIENT_STRING = 256
# A body past this many bytes keeps neither its params nor its declared capabilities for the
# record: they become {"_truncated": true, "bytes": <body size>} when the draft is described,
# so a queued record never holds a huge parsed body and the writer never walks one (a 3.7 MB
# initialize cost the writer seconds and held hundreds of MiB while queued).
MAX_KEPT_BODY = 256 * 1024
MAX_ERROR_MESSAGE = 300
_CLIPPED_TAIL = re.compile(r"…\[truncated, [1-9][0-9]{0,15} chars\]")
_LONGEST_TAIL = len("…[truncated, 9999999999999999 chars]")


def clip(value: Any, limit: int = MAX_CLIENT_STRING) -> Any:
    """A string past ``limit`` characters as its first ``limit`` and the marker
    ``…[truncated, N chars]`` (N: its whole length); anything else as it is.

    A string clipped already is left as it is, so clipping twice (when the draft is made, and
    again when the record is) gives what clipping once does."""
    if type(value) is not str or len(value) <= limit:
        return value
    if len(value) <= limit + _LONGEST_TAIL and _CLIPPED_TAIL.fullmatch(value, limit):
        return value
    return f"{value[:limit]}…[truncated, {len(value)} chars]"


# A random per-process prefix above a 32-bit counter: one integer, formatted in one go.
_ID_PREFIX = int.from_bytes(secrets.token_bytes(4), "big") << 32


ID_PREFIX_HEX = (_ID_PREFIX >> 32).to_bytes(4).hex()


# Two hex digits per byte value: the request path and the record writer write an id as a head
# (the prefix and six digits, which change once per 256 serials: each remembers its last one)
# and the two digits of the serial's last byte, for less than formatting it whole.
HEX_PAIRS = tuple(f"{byte:02x}" for byte in range(256))
HEX_PAIRS_BYTES = tuple(pair.encode() for pair in HEX_PAIRS)
# The last head made: (serial >> 8, as text, as bytes), replaced as one tuple (the event loop's
# X-Request-Id and the writer thread's record line both read it).
ID_HEAD: list[tuple[int, str, bytes]] = [(-1, "", b"")]


def id_head(serial: int) -> tuple[int, str, bytes]:
    """The head of ``serial``'s id (:data:`ID_HEAD`'s form), made and remembered: callers read
    ID_HEAD themselves and call this only when its serial's high part moved."""
    high = serial >> 8
    text = ID_PREFIX_HEX + "%06x" % (high & 0xFFFFFF)
    made = (high, text, text.encode())
    ID_HEAD[0] = made
    return made


def request_id_of(serial: int) -> str:
    """16 hex digits: a random per-process prefix and a counter (unique per process run)."""
    return ID_PREFIX_HEX + "%08x" % (serial & 0xFFFFFFFF)


# ".000Z" to ".999Z" (and ".1000Z": ``timestamp % 1 * 1000`` can round up to 1000).
MILLIS = tuple(f".{millis:03d}Z" for millis in range(1001))
# The start of the second last formatted and its text, replaced as one tuple so that the event
# loop (stream records) and the writer thread never see one's second with the other's text.
LAST_SECOND: list[tuple[float, str]] = [(float("inf"), "")]


def iso_time(timestamp: float) -> str:
    """UTC, ISO 8601 with milliseconds; records of the same second share the date and time of
    day, which dominate the cost when formatted."""
    start, text = LAST_SECOND[0]
    # Within the second, ``timestamp - start`` is exactly ``timestamp % 1``, for less.
    fraction = timestamp - start
    if 0.0 <= fraction < 1.0:
        return text + MILLIS[int(fraction * 1000)]
    second = int(timestamp)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    if timestamp >= 0:  # before 1970, int() and % 1 round apart: nothing to share
        LAST_SECOND[0] = (float(second), text)
    return text + MILLIS[int(timestamp % 1 * 1000)]
