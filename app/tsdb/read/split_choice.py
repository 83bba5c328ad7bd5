"""Whether a fused read is split with the worker's helper process, decided in its plan
(``plan``); reading the halves and joining them is ``app.tsdb.read.split``'s, the helper process
the serving layer's (``app.server.split_helper``, registered here by :func:`use_helpers`).

A read is split only when it is worth it and will run faster: its hours are two or more
(``splittable``), it read at least ``tsd.query.split.min_points`` raw points the last time it
ran (same metric and filters, scaled to its hours: ``seen``) or has not run in this process
yet (its size unknown: a fresh process's first read of a dashboard's large query is the one
that most needs both cores, and a small one pays the helper's round trip once), a helper is
registered, and a core is idle now (fewer runnable threads on the machine than cores for
this process: ``/proc/loadavg``). The helper is claimed as the read starts (one query at a
time): when another read holds it, this one is read whole.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from app.engine.staged import StagedPart
from app.query.ast import SubQuery
from app.query.limits import Deadline
from app.tsdb import TSDB
from app.tsdb.read import seen

# Looks at the runnable threads before a core counts as busy (see core_idle).
IDLE_SAMPLES = 3

Counts = tuple[int, int, int]
"""What a half read: rows, stored bytes, points."""


class HalfReader(Protocol):
    """The helper process, as the read sees it: claimed for one query, asked one request,
    answering the part it read (None: failed or refused, the worker reads it itself)."""

    def claim(self) -> bool: ...

    def release(self) -> None: ...

    def ask(self, request: tuple[Any, ...]) -> bool: ...

    def answer(self, deadline: Deadline) -> tuple[StagedPart, Counts] | None: ...


_helper_for: Callable[[TSDB], HalfReader] | None = None


def use_helpers(helper_for: Callable[[TSDB], HalfReader] | None) -> None:
    """Where reads find a store's helper (the serving layer's); None: reads are not split."""
    global _helper_for
    _helper_for = helper_for


def helper(tsdb: TSDB) -> HalfReader | None:
    """The helper of ``tsdb``'s store in this process, claimed; None when busy or none."""
    if _helper_for is None:
        return None
    found = _helper_for(tsdb)
    return found if found.claim() else None


def split_pays(tsdb: TSDB, sub: SubQuery, hours: int) -> bool:
    """Whether a splittable read of ``sub`` over ``hours`` is split now (see above)."""
    if _helper_for is None:
        return False
    expected = seen.expected_points(tsdb, sub, hours)
    return (expected is None or expected >= tsdb.config["tsd.query.split.min_points"]) \
        and core_idle()


def core_idle() -> bool:
    """Whether a core is idle now: fewer runnable threads on the machine (the caller's
    included) than cores this process may run on, in one of ``IDLE_SAMPLES`` looks a
    millisecond apart (a thread that runs for a moment, a JVM's timer, is not a busy core).
    False where ``/proc`` does not say."""
    cores = len(os.sched_getaffinity(0))
    for sample in range(IDLE_SAMPLES):
        if sample:
            time.sleep(0.001)
        try:
            with open("/proc/loadavg", "rb") as file:
                running = int(file.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return False
        if running < cores:
            return True
    return False
