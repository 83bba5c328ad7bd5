"""One glibc malloc arena for all of a worker's threads, and freed memory kept for the next query.

A request runs in a pool thread, and glibc gives such a thread an arena of its own: a heap it
shrinks (returns to the kernel) as soon as a query frees its arrays, so the next query faults
the same pages in again. A rollup read of 1,000 series took ~2,300 page faults and ~5 ms more
in a thread than on the main thread (40 against 35 ms). In the main arena the freed memory
stays for the next query, as it does for a single-threaded process. The GIL already
serialises most allocation, so one arena costs little contention.

A query's arrays are megabytes each (a 30-day rollup read of 1,000 series: 720,000 cells, 6 MB
a column); glibc serves such blocks from their own mappings (``mmap``) and hands them back at
``free``, and shrinks the heap whenever its top has more free than the trim threshold, so every
query faulted its pages in afresh (~25 % of that read's CPU). :func:`keep_freed` serves blocks
under ``KEEP_MMAP_BYTES`` from the heap and keeps up to ``KEEP_TRIM_BYTES`` of free heap for the
next query: a process's peak memory is unchanged, its resident memory between queries stays
up to that much higher (docs/performance.md, "A fresh server's first query").
"""

from __future__ import annotations

import ctypes
import logging

LOG = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks under this size come from the heap (glibc's own dynamic threshold stops at 32 MiB).
KEEP_MMAP_BYTES = 32 << 20
# Free heap kept (not given back to the kernel) for the next query's arrays.
KEEP_TRIM_BYTES = 128 << 20


def one_arena() -> bool:
    """Make every thread allocate from the main arena; False where malloc is not glibc's."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if mallopt(M_ARENA_MAX, 1) != 1:
        LOG.warning("mallopt(M_ARENA_MAX, 1) failed: threads keep arenas of their own")
        return False
    return True


def keep_freed() -> bool:
    """Serve a query's arrays from the heap and keep the heap's freed memory for the next
    query (``KEEP_MMAP_BYTES``, ``KEEP_TRIM_BYTES``); False where malloc is not glibc's."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_BYTES) != 1 \
            or mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_BYTES) != 1:
        LOG.warning("mallopt of the mmap and trim thresholds failed: arrays are faulted in "
                    "again by every query")
        return False
    return True
