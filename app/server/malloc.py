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

A first query finds no freed heap yet: the headline read (1,000 series over a day) faulted
~13,000 pages in (~50 MB) in each process. So :func:`keep_freed` also starts the process with
``WARM_HEAP_BYTES`` of heap touched and free, at boot (before the worker reports ready): the
first query's arrays take pages already there.
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
# Heap touched at start for the first query, in blocks the heap serves (under KEEP_MMAP_BYTES).
WARM_HEAP_BYTES = 64 << 20
WARM_BLOCK_BYTES = 16 << 20


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
    query (``KEEP_MMAP_BYTES``, ``KEEP_TRIM_BYTES``), starting with ``WARM_HEAP_BYTES`` of it;
    False where malloc is not glibc's."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_BYTES) != 1 \
            or mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_BYTES) != 1:
        LOG.warning("mallopt of the mmap and trim thresholds failed: arrays are faulted in "
                    "again by every query")
        return False
    _warm_heap(libc)
    return True


def _warm_heap(libc: ctypes.CDLL) -> None:
    """Grow the heap by ``WARM_HEAP_BYTES``, every page touched, then free it: kept (the trim
    threshold is above it) for the first query."""
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    blocks = [malloc(WARM_BLOCK_BYTES) for _ in range(WARM_HEAP_BYTES // WARM_BLOCK_BYTES)]
    for block in blocks:
        if block:
            ctypes.memset(block, 0, WARM_BLOCK_BYTES)
    for block in blocks:
        free(block)  # free(NULL) does nothing
