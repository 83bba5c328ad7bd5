"""One large query over both cores: the later half of its hours read in a helper process.

A downsampled query whose buckets never straddle an hour row (``app.engine.staged.fusable``)
can be read in two parts by hours: each part's series downsampled (fill policy ``none``) give,
joined series by series, exactly the buckets one read gives. A process cannot run two Python
threads at once (the GIL), so each worker process keeps one helper *process*: the same code
over its own store connection and its own hour cache. While the worker reads the earlier hours,
the helper reads the later ones and sends back only the buckets (about 1/6 of the points for
``1m`` over 10-second data) through memory both map.

This module decides and joins; the helper process and its pipes belong to the serving layer
(``app.server.split_helper``), which registers them here (:func:`use_helpers`) and runs
:func:`read_half` in the helper.

Each process always reads the same part of a repeated query (a dashboard's), so each hour cache
keeps its own part: together they keep what one cache would, and a warm query is split too.

A query is split only when it is worth it and will run faster: its hours are two or more, it
read at least ``tsd.query.split.min_points`` raw points the last time it ran (same metric and
filters, scaled to its hours), the helper is free (one query at a time) and a core is idle now
(fewer runnable threads on the machine than cores for this process: ``/proc/loadavg``). When
the helper fails, is stopped, or answers with an error (a limit, the deadline), the worker reads
that half itself, so a query never depends on the helper; a helper that died is started again
at most every ``RESTART_AFTER_S`` (``app.server.split_helper``).

The same memory of what a query read last time keeps a part too large for the hour cache out
of it: kept, it would push out what the cache holds, then itself hour after hour, and its read
would hold every decoded point; read fused (``app.tsdb.read.fused``), it holds one chunk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from app.engine.downsample import Window
from app.engine.execute import stage_raw
from app.engine.model import Series
from app.engine.staged import StagedPart, joined_parts
from app.query.ast import SubQuery
from app.query.limits import Deadline, filled_buckets
from app.tsdb import TSDB
from app.tsdb.read.rows import RowReader
from app.tsdb.read.series import read_hours, read_rows

log = logging.getLogger(__name__)

HOUR_S = 3600
# Looks at the runnable threads before a core counts as busy (see core_idle).
IDLE_SAMPLES = 3
# What a point the hour cache keeps costs it: 17 bytes of arrays, ~2.5 of bookkeeping.
KEPT_BYTES_PER_POINT = 20
# Raw points per hour each query shape read last time, for the split and keep decisions.
_SEEN: OrderedDict[tuple[Any, ...], float] = OrderedDict()
MAX_REMEMBERED = 1024
_SEEN_LOCK = threading.Lock()

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

def read_split(reader: RowReader, sub: SubQuery, first_s: int, last_s: int,
               window: Window) -> list[Series]:
    """The series of ``sub`` from rows with base times in ``[first_s, last_s]``, downsampled
    as the read goes (``window``), in two parts over two processes when it pays."""
    hours = (last_s - first_s) // HOUR_S + 1
    shape = (reader.tsdb.data_table_name, sub.metric, repr(sub.filters), sub.explicit_tags)
    with _SEEN_LOCK:
        expected = _SEEN.get(shape, 0.0) * hours
    helper = _free_helper(reader, sub, hours, expected)
    if expected / (1 if helper is None else 2) * KEPT_BYTES_PER_POINT > _budget(reader):
        # Its part would not fit the hour cache: kept, it would only push out what the cache
        # holds (and then itself, hour after hour); read fused, its memory is the chunk's.
        reader.cacheable = False
    if helper is None:
        series = read_rows(reader, sub, first_s, last_s, window)
    else:
        try:
            series = _read_halves(reader, helper, sub, first_s, last_s, window)
        finally:
            helper.release()
    with _SEEN_LOCK:
        _SEEN[shape] = reader.stats.points / hours
        _SEEN.move_to_end(shape)
        while len(_SEEN) > MAX_REMEMBERED:
            _SEEN.popitem(last=False)
    return series


def _budget(reader: RowReader) -> int:
    return int(reader.tsdb.config["tsd.query.cache.max_bytes"])


def _free_helper(reader: RowReader, sub: SubQuery, hours: int, expected: float
                 ) -> HalfReader | None:
    """The worker's helper, claimed, when this read is to be split."""
    config = reader.tsdb.config
    # The helper reads raw hour rows as a SeriesReader does (not a rollup, pre-aggregate or
    # histogram reader's rows).
    if (hours < 2 or sub.tsuids or not config["tsd.query.split.enable"]
            or not reader.splittable):
        return None
    if expected < config["tsd.query.split.min_points"] or not core_idle():
        return None
    if _helper_for is None:
        return None
    helper = _helper_for(reader.tsdb)
    return helper if helper.claim() else None


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


def _read_halves(reader: RowReader, helper: HalfReader, sub: SubQuery, first_s: int,
                 last_s: int, window: Window) -> list[Series]:
    """The earlier hours here while the helper reads the later ones, joined."""
    hours = (last_s - first_s) // HOUR_S + 1
    middle_s = first_s + hours // 2 * HOUR_S  # the helper's first hour
    deadline = reader.deadline
    timeout_ms = deadline.timeout_ms
    if timeout_ms:
        timeout_ms = max(1, int(timeout_ms - deadline.elapsed_ms()))
    asked = helper.ask((sub, middle_s, last_s, window, reader.limits, timeout_ms,
                        reader.cacheable))
    series_before = reader.stats.series
    try:
        head = stage_raw(sub, read_rows(reader, sub, first_s, middle_s - HOUR_S, window),
                         window, deadline)
    finally:
        answer = helper.answer(deadline) if asked else None
    if answer is None:  # the helper failed or refused: this process reads its hours too
        later = stage_raw(sub, read_rows(reader, sub, middle_s, last_s, window), window,
                          deadline)
    else:
        later, (rows, stored_bytes, points) = answer
        reader.stats.rows += rows
        reader.stats.bytes += stored_bytes
        reader.stats.points += points
    assert sub.downsample is not None
    joined = joined_parts(head, later, sub.downsample)  # a copy: the helper is free again
    reader.stats.series = series_before + len(joined)  # each series once
    reader.limits.check_read(sub, reader.stats.points, reader.stats.bytes)
    reader.limits.check_emitted(
        sub, filled_buckets(sub, window.query_start_ms, window.query_end_ms), len(joined))
    return list(joined)


def read_half(tsdb: TSDB, request: tuple[Any, ...]) -> tuple[StagedPart, Counts]:
    """What the helper computes for one request of :func:`_read_halves`: its hours' series,
    downsampled as read, and its read counts."""
    sub, first_s, last_s, window, limits, timeout_ms, cacheable = request
    reader = RowReader(tsdb, limits, Deadline(timeout_ms))
    reader.cacheable = cacheable
    part = stage_raw(sub, read_hours(reader, sub, window, first_s, last_s), window,
                     reader.deadline)
    return part, (reader.stats.rows, reader.stats.bytes, reader.stats.points)
