"""The process's C heap: keep memory glibc's malloc has freed instead of handing it back.

glibc returns a heap's free top to the kernel past the trim threshold and gives large blocks
pages of their own, 128 KiB each by default; this server frees megabytes at once all the time
(a loop turn's answers, a batch of record lines), so the pages would go back and fault in
again on every request (docs/decisions.md#heap-thresholds). :func:`keep_freed_heap` sets both
thresholds to :data:`KEEP_BYTES` (16 MiB) with mallopt(3): each heap keeps up to that much
freed memory. Without glibc it does nothing.
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
