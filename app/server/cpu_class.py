"""Expensive queries as the OS's batch work, so light requests get a CPU first.

Linux's ``SCHED_BATCH`` keeps a thread's share of the CPU (the same weight as any other at its
nice value) but tells the scheduler it is CPU-bound: a thread that wakes up (the event loop
with a new request, a pool thread with ``/api/version`` or a one-series panel) is not queued
behind it for the rest of its time slice, it preempts it. A query of the expensive admission
lane (``app.tsdb.admission``) runs so in its thread, and the split helper process, which only
reads halves of large queries, runs so whole; everything else stays ordinary. Issue 25: with
two expensive queries per worker on a 2-core machine, light requests' tail was run-queue
waits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

LOG = logging.getLogger(__name__)


def as_batch() -> bool:
    """Make the calling thread ``SCHED_BATCH``; False where the OS has no such class."""
    return _set_policy(getattr(os, "SCHED_BATCH", None))  # Linux only


@contextmanager
def lane_class(lane: str) -> Iterator[None]:
    """Run the calling thread as batch work while it runs a query of the expensive lane."""
    if lane != "expensive" or not as_batch():
        yield
        return
    try:
        yield
    finally:
        _set_policy(os.SCHED_OTHER)


def _set_policy(policy: int | None) -> bool:
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))  # 0: this thread
    except OSError as exc:
        LOG.info("scheduling policy %d refused (%s): the thread stays as it is", policy, exc)
        return False
    return True
