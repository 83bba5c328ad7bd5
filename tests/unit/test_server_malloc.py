"""``one_arena``: a pool thread allocates from glibc's main arena, not from an arena of its
own (whose heap glibc would shrink after every query, faulting the pages in again)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import ctypes, sys, threading
import numpy as np
from app.server.malloc import one_arena
if sys.argv[1] == "one":
    assert one_arena()
def work():
    held = [np.ones(8_000) for _ in range(200)]  # 200 x 64 KB, under the mmap threshold
    ctypes.CDLL(None).malloc_stats()  # glibc: each arena's figures, on stderr
thread = threading.Thread(target=work)
thread.start()
thread.join()
"""


def arenas_after_a_thread_allocates(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          check=True, timeout=60)
    return [line for line in done.stderr.splitlines() if line.startswith("Arena ")]


def test_a_pool_thread_allocates_from_the_main_arena() -> None:
    assert arenas_after_a_thread_allocates("default") == ["Arena 0:", "Arena 1:"]
    assert arenas_after_a_thread_allocates("one") == ["Arena 0:"]
