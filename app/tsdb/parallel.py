"""One large query on both cores: its decode passes run ahead on worker threads.

A cold read decodes its rows in passes of a few thousand rows (``reader.DECODE_CHUNK_ROWS``).
Most of a pass is numpy work over ~1M points (joins, gathers, cumulative sums, the shift back),
which releases the GIL, so passes decoded on other threads overlap each other and the query
thread's own Python work (grouping the next pass's results, keeping rows in the hour cache).
Results are consumed in order, so limits, stats and the cache see the passes exactly as a
sequential read would: the answer is the same bytes.

Threads, not processes: the decoded arrays stay in this process (the hour cache keeps them),
and handing ~17 bytes per point back from another process would cost more than the decode.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Worker threads per process: one per core, two at most (a pass is ~20 ms of work: more
# threads only add contention for the GIL's Python parts). 1 turns the overlap off.
THREADS = max(1, min(2, os.cpu_count() or 1))

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's pool, made again after a fork (gunicorn: threads do not survive one)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(THREADS, thread_name_prefix="decode"))
        return _pool[1]


def ahead(work: Callable[[Item], Result],
          items: Sequence[Item]) -> Generator[Result, None, None]:
    """``work(item)`` for each item, in order, with up to ``THREADS`` items started ahead on
    worker threads. Closing the iterator early (a limit, the deadline) cancels what has not
    started; an item's exception is raised when its turn comes."""
    if THREADS < 2 or len(items) < 2:
        yield from map(work, items)
        return
    pool = _executor()
    pending: deque[Future[Result]] = deque()
    upcoming = iter(items)
    try:
        for item in upcoming:
            pending.append(pool.submit(work, item))
            if len(pending) > THREADS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
