"""The process's C heap: keep memory glibc's malloc has freed instead of handing it back.

glibc gives the free top of a heap back to the kernel (``brk``) once it grows past the trim
threshold, 128 KiB by default, and gives blocks above the mmap threshold (also 128 KiB at
first) pages of their own, unmapped when freed. This server frees large amounts at once all the
time: the answers written in one loop turn (64 connections of 45 KB ``tools/list`` answers are
2.9 MB), a batch of record lines in the records writer. Each time, the pages went back and the
next turn faulted them in again. Measured under wrk, ``tools/list`` with 100 tools at 64
connections: some server processes (not all: it depends on how the heap happens to lie) took
1-6 page faults and 4-10 us more CPU per request, with 1,325 ``brk`` calls in 3 s; the records
writer took one page fault per record.

:func:`keep_freed_heap` sets both thresholds to :data:`KEEP_BYTES` (16 MiB) with mallopt(3):
each heap then keeps up to that much freed memory for the next allocations, and blocks below
it come from the heap. The cost is memory a busy process keeps after a burst, at most that
much per heap (the main one and one per thread that allocates). A synthetic check (100 KB
blocks, 4 MB freed at once, in a loop): 946 page faults per round by default, 0 with it.
Without glibc (musl, another allocator) it does nothing.
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
