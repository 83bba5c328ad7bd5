"""One glibc malloc arena for all of a worker's threads.

A request runs in a pool thread, and glibc gives such a thread an arena of its own: a heap it
shrinks (returns to the kernel) as soon as a query frees its arrays, so the next query faults
the same pages in again. A rollup read of 1,000 series took ~2,300 page faults and ~5 ms more
in a thread than on the main thread (40 against 35 ms). In the main arena the freed memory
stays for the next query, as it does for a single-threaded process. The GIL already
serialises most allocation, so one arena costs little contention.
"""

from __future__ import annotations

import ctypes
import logging

LOG = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's malloc.h


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
