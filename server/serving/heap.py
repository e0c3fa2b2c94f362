"""The process's C heap: keep memory glibc's malloc has freed instead of handing it back.

glibc gives the free top of a heap back to the kernel (``brk``) once it grows past the trim
threshold, 128 KiB by default, and gives blocks above the mmap threshold (also 128 KiB at
first) pages of their own, unmapped when freed. This server frees large amounts at once all the
time: the answers written in one loop turn (64 connections of 45 KB ``tools/list`` answers are
2.9 MB), a batch of record lines in the records writer. By default the pages go back each time
and the next turn faults them in again, page faults on every request
(docs/decisions.md#heap-thresholds).

:func:`keep_freed_heap` sets both thresholds to :data:`KEEP_BYTES` (16 MiB) with mallopt(3):
each heap then keeps up to that much freed memory for the next allocations, and blocks below
it come from the heap. The cost is memory a busy process keeps after a burst, at most that
much per heap (the main one and one per thread that allocates). Without glibc (musl, another
allocator) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from collections.abc import Callable

KEEP_BYTES = 16 << 20

# mallopt(3) parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_heap() -> bool:
    """Raise glibc's trim and mmap thresholds to :data:`KEEP_BYTES`, for the whole process;
    False where there is no glibc mallopt to call. Idempotent."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)) and bool(
        mallopt(_M_MMAP_THRESHOLD, KEEP_BYTES)
    )


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function
