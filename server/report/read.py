"""Record files as batches of lines: plain or gzipped, from disk or stdin, bad bytes included.

A file is recognised as gzip by its magic bytes, not its name, so ``name.jsonl.1``,
``name.jsonl.1.gz`` and a gzipped stdin all just work. Reading is in large chunks split on
newlines (much faster than line by line); an absurdly long line is replaced by a marker that
is not JSON, so the reader counts it as malformed without holding it in memory. A corrupt or
truncated gzip raises one of :data:`READ_ERRORS` after everything before it was yielded.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import BinaryIO

CHUNK_BYTES = 1 << 22
# A record line is a few KB (params are capped by the writer); anything this long is junk.
MAX_LINE_BYTES = 1 << 24
OVERLONG = b"(line too long)"
GZIP_MAGIC = b"\x1f\x8b"
READ_ERRORS = (OSError, EOFError, ValueError, zlib.error)


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
