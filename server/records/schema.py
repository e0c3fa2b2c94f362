"""What a record looks like, shared by everything that writes or reads one: the schema version,
the request id's form and the time format (``docs/records.md`` is the full schema).

The request path and the record writer both format ids and times, so both are cheap here:
an id is one integer formatted in one go, and the time of day is formatted once per second.
"""

from __future__ import annotations

import secrets
import time

SCHEMA_VERSION = 1

# A random per-process prefix above a 32-bit counter: one integer, formatted in one go.
_ID_PREFIX = int.from_bytes(secrets.token_bytes(4), "big") << 32


def request_id_of(serial: int) -> str:
    """16 hex digits: a random per-process prefix and a counter (unique per process run)."""
    return (_ID_PREFIX | serial & 0xFFFFFFFF).to_bytes(8).hex()


# ".000Z" to ".999Z" (and ".1000Z": ``timestamp % 1 * 1000`` can round up to 1000).
_MILLIS = tuple(f".{millis:03d}Z" for millis in range(1001))
# The start of the second last formatted and its text, replaced as one tuple so that the event
# loop (stream records) and the writer thread never see one's second with the other's text.
_LAST_SECOND: list[tuple[float, str]] = [(float("inf"), "")]


def iso_time(timestamp: float) -> str:
    """UTC, ISO 8601 with milliseconds; records of the same second share the date and time of
    day, which dominate the cost when formatted."""
    start, text = _LAST_SECOND[0]
    # Within the second, ``timestamp - start`` is exactly ``timestamp % 1``, for less.
    fraction = timestamp - start
    if 0.0 <= fraction < 1.0:
        return text + _MILLIS[int(fraction * 1000)]
    second = int(timestamp)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    if timestamp >= 0:  # before 1970, int() and % 1 round apart: nothing to share
        _LAST_SECOND[0] = (float(second), text)
    return text + _MILLIS[int(timestamp % 1 * 1000)]
