"""Response header lines, each distinct (name, value) checked, encoded and classified once.

uvicorn checks every response header against two patterns and lower-cases it on every
response; the lines repeat from response to response, so :class:`HeaderLines` does that work
once per distinct pair and remembers the result, bounded
(docs/decisions.md#own-http-protocol). What a line means to the response framing
(Content-Length, chunked, Connection: close) follows uvicorn's rules; the protocol that writes
the head is :mod:`server.serving.uvicorn_protocol`.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

from server.memo import BoundedMemo

# What a header line means to the response framing (uvicorn's rules).
PLAIN, LENGTH, CHUNKED, CLOSE = 0, 1, 2, 3
_LINES_KEPT = 1024

# Headers whose value is new in every response (this server's request id): checked and
# encoded every time, never kept.
_NEW_EACH_RESPONSE = frozenset({b"x-request-id"})


class HeaderLines:
    """Response header lines, each (name, value) checked and encoded once.

    A value per pair: (the line as written, what it means to the framing, the length for a
    Content-Length). The server's date header is one of them, a new line each second.
    Bounded: past ``_LINES_KEPT`` pairs (many distinct lengths, say) it starts over, and a
    pair larger than :data:`~server.memo.SMALL_KEY_BYTES` (a value an app echoes from a
    request) is checked every time, never kept."""

    def __init__(self) -> None:
        self.known: BoundedMemo[tuple[bytes, bytes], tuple[bytes, int, int]] = BoundedMemo(
            _LINES_KEPT
        )

    def line(self, pair: tuple[bytes, bytes]) -> tuple[bytes, int, int]:
        try:
            known = self.known.get(pair)
        except TypeError:  # a two-item list (ASGI allows any iterable pair): as a tuple
            pair = (pair[0], pair[1])
            known = self.known.get(pair)
        if known is None:
            known = self._learn(pair)
        return known

    def _learn(self, pair: tuple[bytes, bytes]) -> tuple[bytes, int, int]:
        name, value = pair
        if name == b"x-request-id" and value.isalnum():
            # New in every response, never kept; ASCII letters and digits need no check.
            return b"x-request-id: " + value + b"\r\n", PLAIN, 0
        if HEADER_RE.search(name):
            raise RuntimeError("Invalid HTTP header name.")
        if HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header value.")
        name = name.lower()
        meaning, length = PLAIN, 0
        if name == b"content-length":
            meaning, length = LENGTH, int(value.decode())
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            meaning = CHUNKED
        elif name == b"connection" and b"close" in [
            token.lower().strip() for token in value.split(b",")
        ]:
            meaning = CLOSE
        known = (b"".join((name, b": ", value, b"\r\n")), meaning, length)
        if name in _NEW_EACH_RESPONSE:
            # Never seen again: keeping it would only push the lines that repeat out.
            return known
        return self.known.remember(pair, known, len(name) + len(value))
