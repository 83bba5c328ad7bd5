"""One large query over both cores: the later half of its hours read in a helper process.

A downsampled query whose buckets never straddle an hour row (``app.engine.staged.fusable``)
can be read in two parts by hours: each part's series downsampled (fill policy ``none``) give,
joined series by series, exactly the buckets one read gives. A process cannot run two Python
threads at once (the GIL), so each worker process keeps one helper *process*: the same code
over its own store connection and its own hour cache. While the worker reads the earlier hours,
the helper reads the later ones and sends back only the buckets (about 1/6 of the points for
``1m`` over 10-second data) through memory both map.

Whether a read is split is decided in its plan (``app.tsdb.read.split_choice``); this module
reads the two halves and joins them; the helper process and its pipes belong to the serving
layer (``app.server.split_helper``), which runs :func:`read_half` in the helper.

Each process always reads the same part of a repeated query (a dashboard's), so each hour cache
keeps its own part: together they keep what one cache would, and a warm query is split too.
When the helper fails, is stopped, or answers with an error (a limit, the deadline), the worker
reads that half itself, so a query never depends on the helper; a helper that died is started
again at most every ``RESTART_AFTER_S`` (``app.server.split_helper``).

The same memory of what a query read last time (``app.tsdb.read.seen``) keeps a part too large
for the hour cache out of it, decided in the read's plan (``app.tsdb.read.plan``): kept, it
would push out what the cache holds, then itself hour after hour, and its read would hold
every decoded point; read fused (``app.tsdb.read.fused``), it holds one chunk.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.engine.execute import stage_raw
from app.engine.model import Series
from app.engine.staged import StagedPart, joined_parts
from app.query.limits import Deadline
from app.tsdb import TSDB
from app.tsdb.read import seen, split_choice
from app.tsdb.read.plan import plan_read
from app.tsdb.read.rows import RowReader
from app.tsdb.read.series import read_rows
from app.tsdb.read.split_choice import Counts, HalfReader

HOUR_S = 3600


def read_split(reader: RowReader) -> list[Series]:
    """The series of the reader's plan (a fused read), downsampled as the read goes, in two
    parts over two processes when the plan says so and the helper is free."""
    plan = reader.plan
    assert plan.fuse is not None
    helper = split_choice.helper(reader.tsdb) if plan.split else None
    if helper is None:
        series = read_rows(reader, plan.first_s, plan.last_s, plan.fuse)
    else:
        try:
            series = _read_halves(reader, helper)
        finally:
            helper.release()
    hours = (plan.last_s - plan.first_s) // HOUR_S + 1
    seen.remember(reader.tsdb, plan.sub, hours, reader.stats.points)
    return series


def _read_halves(reader: RowReader, helper: HalfReader) -> list[Series]:
    """The earlier hours here while the helper reads the later ones, joined."""
    plan = reader.plan
    sub, first_s, last_s, window = plan.sub, plan.first_s, plan.last_s, plan.fuse
    assert window is not None and sub.downsample is not None
    hours = (last_s - first_s) // HOUR_S + 1
    middle_s = first_s + hours // 2 * HOUR_S  # the helper's first hour
    deadline = reader.deadline
    timeout_ms = deadline.timeout_ms
    if timeout_ms:
        timeout_ms = max(1, int(timeout_ms - deadline.elapsed_ms()))
    asked = helper.ask((sub, middle_s, last_s, window, reader.limits, timeout_ms, plan.cache))
    series_before = reader.stats.series
    try:
        head = stage_raw(sub, read_rows(reader, first_s, middle_s - HOUR_S, window),
                         window, deadline)
    finally:
        answer = helper.answer(deadline) if asked else None
    if answer is None:  # the helper failed or refused: this process reads its hours too
        later = stage_raw(sub, read_rows(reader, middle_s, last_s, window), window, deadline)
    else:
        later, (rows, stored_bytes, points) = answer
        reader.stats.rows += rows
        reader.stats.bytes += stored_bytes
        reader.stats.points += points
    joined = joined_parts(head, later, sub.downsample)  # a copy: the helper is free again
    reader.stats.series = series_before + len(joined)  # each series once
    reader.limits.check_read(sub, reader.stats.points, reader.stats.bytes)
    reader.limits.check_emitted(sub, plan.buckets, len(joined))
    return list(joined)


def read_half(tsdb: TSDB, request: tuple[Any, ...]) -> tuple[StagedPart, Counts]:
    """What the helper computes for one request of :func:`_read_halves`: its hours' series,
    downsampled as read, and its read counts. Its plan is the worker's (raw rows, the same
    window, the worker's cache policy), made again here from the sub-query."""
    sub, first_s, last_s, window, limits, timeout_ms, cache = request
    plan = plan_read(tsdb, sub, window.query_start_ms, window.query_end_ms, rollups=False)
    reader = RowReader(tsdb, limits, Deadline(timeout_ms),
                       plan=dataclasses.replace(plan, cache=cache))
    part = stage_raw(sub, read_rows(reader, first_s, last_s, window), window, reader.deadline)
    return part, (reader.stats.rows, reader.stats.bytes, reader.stats.points)
