"""Query threads as the OS's batch work, so light requests get a CPU first.

Linux's ``SCHED_BATCH`` keeps a thread's share of the CPU (same weight as any other at its
nice value) but tells the scheduler it is CPU-bound: a thread that wakes up (the event loop
with a new request, a pool thread with ``/api/version`` or a one-series panel) is not queued
behind it for the rest of its time slice, it preempts it. Queries run in these threads and in
the split helper; everything else of the worker stays ordinary. Issue 25: with two expensive
queries per worker on a 2-core machine, light requests' tail was run-queue waits.
"""

from __future__ import annotations

import logging
import os

LOG = logging.getLogger(__name__)


def as_batch() -> bool:
    """Make the calling thread ``SCHED_BATCH``; False where the OS has no such class."""
    policy = getattr(os, "SCHED_BATCH", None)  # Linux only
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))  # 0: this thread
    except OSError as exc:
        LOG.info("SCHED_BATCH refused (%s): query threads stay ordinary", exc)
        return False
    return True
