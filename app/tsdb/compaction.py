"""Compaction: merge a finished hour row's cells into one column, as OpenTSDB's CompactionQueue.

The compacted column is written first and the merged cells deleted after, so a reader never
sees fewer points than were written; a point that lands in the row meanwhile stays a single
cell and is merged by the next pass. Rows written in append mode are left alone (they are
already one column), as in OpenTSDB.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.storage import codec
from app.storage.base import Row, Table
from app.tsdb.background import run_every

log = logging.getLogger(__name__)

MAX_TIMESPAN_S = codec.MAX_TIMESPAN
DATA_PREFIX = codec.DATA_PREFIX
NEWEST_MS = 2**63 - 1


@dataclass
class CompactionStats:
    rows_scanned: int = 0
    rows_compacted: int = 0
    cells_merged: int = 0


def data_cells(cells: Row) -> dict[bytes, bytes]:
    """The data-point cells of a row by qualifier (no annotations, appends or other columns)."""
    out = {}
    for column, value in cells.items():
        if not column.startswith(DATA_PREFIX):
            continue
        qualifier = column[len(DATA_PREFIX):]
        if codec.is_annotation_qualifier(qualifier) or qualifier == codec.APPEND_QUALIFIER:
            continue
        if len(qualifier) % 2 == 0:
            out[qualifier] = value
    return out


def compact_row(table: Table, row: bytes, cells: Row) -> int:
    """Compact one row; return how many cells were merged (0 when nothing to do)."""
    if len(data_cells(cells)) < 2:
        return 0
    # The write times first, then the cells again: a point written meanwhile is newer than
    # every time read, so the delete below (only what was written up to then) keeps it. A
    # plain delete would drop it, or on HBase hide it behind a marker of the same millisecond.
    times = table.row_write_times(row)
    merge = data_cells(table.row(row, [b"t"]))
    # Of two cells holding one timestamp the newest write wins, as on the read path (the
    # embedded store's merge leaves several compacted cells in a row, a point sent again in
    # a later one); a cell written since the times were read is the newest.
    write_ts = {q: times.get(DATA_PREFIX + q, NEWEST_MS) for q in merge}
    compacted = codec.compact_cells(merge.items(), write_ts) if len(merge) >= 2 else None
    if compacted is None:
        return 0
    qualifier, value = compacted
    table.put(row, {DATA_PREFIX + qualifier: value})
    stale = [DATA_PREFIX + q for q in merge if q != qualifier and DATA_PREFIX + q in times]
    if stale:
        table.delete(row, stale, up_to_ms=max(times[column] for column in stale))
    return len(merge)


def compact_table(table: Table, layout: codec.RowKeyLayout,
                  row_start: bytes | None = None, row_stop: bytes | None = None,
                  now_s: int | None = None) -> CompactionStats:
    """Compact every row in ``[row_start, row_stop)`` whose hour is over."""
    now_s = int(time.time()) if now_s is None else now_s
    stats = CompactionStats()
    for row, cells in table.scan(row_start=row_start, row_stop=row_stop, columns=[b"t"]):
        stats.rows_scanned += 1
        parts = layout.parse_row_key(row)
        if parts.base_time_s + MAX_TIMESPAN_S > now_s or not any(parts.metric_uid):
            continue
        merged = compact_row(table, row, cells)
        if merged:
            stats.rows_compacted += 1
            stats.cells_merged += merged
    return stats


class CompactionQueue:
    """Rows written since the last pass, compacted once their hour is over (OpenTSDB's
    ``CompactionQueue``): the background pass touches only those rows, never the whole table.

    One queue per process; with several gunicorn workers each compacts the rows it wrote.
    """

    def __init__(self, table: Callable[[], Table], layout: codec.RowKeyLayout) -> None:
        self._table = table
        self._layout = layout
        self._rows: set[bytes] = set()
        self._lock = threading.Lock()

    def add(self, rows: Iterable[bytes]) -> None:
        with self._lock:
            self._rows.update(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def flush(self, now_s: int | None = None) -> CompactionStats:
        """Compact the queued rows whose hour is over; keep the others queued."""
        now_s = int(time.time()) if now_s is None else now_s
        with self._lock:
            due = {row for row in self._rows
                   if self._layout.parse_row_key(row).base_time_s + MAX_TIMESPAN_S <= now_s}
            self._rows -= due
        stats = CompactionStats()
        table = self._table()
        for row in sorted(due):
            stats.rows_scanned += 1
            merged = compact_row(table, row, table.row(row, [b"t"]))
            if merged:
                stats.rows_compacted += 1
                stats.cells_merged += merged
        return stats


def run_in_background(queue: CompactionQueue, interval_s: int) -> threading.Thread:
    """Flush ``queue`` every ``interval_s`` seconds, the first time after one interval (a
    worker's queue starts empty)."""
    def flush() -> str | None:
        stats = queue.flush()
        if not stats.rows_compacted:
            return None
        return f"compacted {stats.rows_compacted} rows ({stats.cells_merged} cells)"

    return run_every("compaction", interval_s, flush, wait_first=True)
