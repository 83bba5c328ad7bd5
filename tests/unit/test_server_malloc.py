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


FAULTS_SCRIPT = """
import resource, sys
import numpy as np
from app.server.malloc import keep_freed
if sys.argv[1] == "keep":
    assert keep_freed()
def query():  # a query's arrays: 4 x 6 MB, written, then freed
    arrays = [np.empty(750_000) for _ in range(4)]
    for array in arrays:
        array.fill(1.0)
np.ones(1)
query()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
query()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_printed(script: str, mode: str) -> int:
    """The page faults ``script`` prints, run in a fresh interpreter with ``mode``."""
    done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                          text=True, check=True, timeout=60)
    return int(done.stdout.strip())


def test_a_second_query_reuses_the_pages_the_first_freed() -> None:
    """24 MB of arrays is ~5,900 pages of 4 KB: by default glibc gives much of it back to the
    kernel at ``free`` (blocks mapped and unmapped, a heap top over the trim threshold) and
    the next query faults it in again (~2,300 faults here); once ``keep_freed`` keeps them,
    none."""
    assert faults_printed(FAULTS_SCRIPT, "default") > 1_000
    assert faults_printed(FAULTS_SCRIPT, "keep") < 200


FIRST_QUERY_SCRIPT = """
import resource, sys
import numpy as np
from app.server import malloc
if sys.argv[1] == "cold":
    malloc.WARM_HEAP_BYTES = 0
assert malloc.keep_freed()
np.ones(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
arrays = [np.empty(750_000) for _ in range(4)]  # the first query's arrays: 4 x 6 MB, written
for array in arrays:
    array.fill(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_a_first_query_finds_the_heap_keep_freed_warmed() -> None:
    """``keep_freed`` starts the process with ``WARM_HEAP_BYTES`` of heap touched and free:
    a first query's 24 MB of arrays takes them without a fault (without it, ~2,300 faults
    here: the heap grows as they are written)."""
    assert faults_printed(FIRST_QUERY_SCRIPT, "cold") > 1_000
    assert faults_printed(FIRST_QUERY_SCRIPT, "warm") < 200
