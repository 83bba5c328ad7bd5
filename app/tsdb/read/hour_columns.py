"""Closed raw hours from the columns the embedded store keeps beside their cells: a fresh
process reads an hour of a metric (every series of it) as one blob, decoded in a few numpy
steps, instead of a SQL row, a dict and a decode pass per row (docs/performance.md, "Cold raw
reads from hour columns").

``closed_hours`` walks the hours of a read's closed range in key order: an hour whose blob is
kept comes decoded from it (``hour_blob``); another is read from its cells (with their stamp),
decoded by the one decoder every read uses and, when it holds nothing its cells are needed
for (a note, two cells with one timestamp, an integer beyond 2**53), made into a blob that is
read the same way and, once the hour is over and settled, kept (``HourColumn.put_hour_columns``,
which keeps it only if the hour's cells are still those read). An hour that cannot be a blob
gives its stored rows, which the caller reads as it reads any. What a read makes of the
hours (fused buckets, or assembled series kept as a range entry) is ``hour_reads``'.

Only reads of a metric's whole key ranges use them (no tsuids, exact keys or narrowed
ranges: a blob holds every series of its hour), and only the raw data table's hour rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.errors import StorageError
from app.storage import hour_blob
from app.storage.base import HOUR_COLUMN, SCAN_STAMPED, HourColumn, HourPut, Row, able
from app.storage.hour_blob import HourRows
from app.tsdb import hour_cache
from app.tsdb.read.decode import decode_pass
from app.tsdb.read.keys import MAX_TIMESPAN_S
from app.tsdb.read.rows import RowReader

log = logging.getLogger(__name__)

# Blobs made by a read are put in batches of about this many bytes (one write transaction
# each), so a cold read of many hours does not hold them all.
PUT_BATCH_BYTES = 16 << 20
# Whether blobs are deflated at rest (hour_blob.FLAG_ZLIB): see docs/performance.md.
COMPRESS = False

StampedRow = tuple[bytes, Row, int, int, int]
"""``(key, cells, cell count, newest write time, stored bytes)`` as ``scan_stamped`` gives."""


@dataclass(frozen=True, slots=True)
class Hour:
    """One closed hour of a read: decoded from columns, or its stored rows."""

    decoded: HourRows | None
    rows: list[tuple[bytes, Row]]


def source(reader: RowReader) -> HourColumn | None:
    """The table's hour columns when this read may use them."""
    table = reader.table()
    columns = able(table, HOUR_COLUMN)
    selection = reader.plan.selection
    if (columns is None or able(table, SCAN_STAMPED) is None
            or reader.row_span_s != MAX_TIMESPAN_S
            or table.name != reader.tsdb.data_table().name
            or selection.tsuids or selection.narrow is not None
            or (selection.by_key and selection.exact is not None)):
        return None
    return columns


def closed_hours(reader: RowReader, columns: HourColumn, first_s: int, last_s: int
                 ) -> Iterator[Hour]:
    """The hours ``[first_s, last_s]`` (all closed) of the plan's metric, salt bucket after
    salt bucket, each in time order; blobs made on the way are kept as they come."""
    layout = reader.layout
    metric = reader.plan.selection.metric_uid
    span_s = reader.row_span_s
    prefix_bytes = layout.salt_width + layout.metric_width + 4
    time_at = layout.salt_width + layout.metric_width
    stamped_scan = able(reader.table(), SCAN_STAMPED)
    assert stamped_scan is not None  # source() asked
    salts = layout.salt_prefixes()
    try:
        kept = set(columns.hour_prefixes(
            [(salt + metric + first_s.to_bytes(4, "big"),
              salt + metric + (last_s + span_s).to_bytes(4, "big")) for salt in salts]))
    except StorageError as exc:  # e.g. an older file opened read-only: the cells alone
        log.warning("hour columns unavailable, reading cells: %s", exc.message)
        kept = set()
        columns = None  # type: ignore[assignment]
    puts: list[HourPut] = []
    for salt in salts:
        # The kept hours one by one; the key ranges between them in one scan each, its rows
        # grouped by hour (a range of years with few hours of data costs a few statements).
        at = salt + metric + first_s.to_bytes(4, "big")
        stop = salt + metric + (last_s + span_s).to_bytes(4, "big")
        for prefix in [p for p in sorted(kept) if at <= p < stop] + [None]:
            if at < (prefix or stop):
                rows = stamped_scan.scan_stamped(at, prefix or stop, "t")
                for hour_rows in _by_hour(rows, prefix_bytes):
                    yield _from_cells(hour_rows, time_at, span_s, columns is not None, puts)
                    if sum(len(put.data) for put in puts) >= PUT_BATCH_BYTES:
                        _put(columns, prefix_bytes, puts)
                        puts = []
            if prefix is None:
                break
            blob = columns.hour_column(prefix)
            decoded = _decoded(blob) if blob is not None else None
            at = prefix[:-4] + (int.from_bytes(prefix[-4:], "big") + span_s).to_bytes(4, "big")
            if decoded is not None:
                yield Hour(decoded, [])
            else:  # dropped since listed, or unreadable: its cells
                for hour_rows in _by_hour(stamped_scan.scan_stamped(prefix, at, "t"),
                                          prefix_bytes):
                    yield _from_cells(hour_rows, time_at, span_s, columns is not None, puts)
    if puts and columns is not None:
        _put(columns, prefix_bytes, puts)


def _by_hour(rows: Iterator[StampedRow], prefix_bytes: int) -> Iterator[list[StampedRow]]:
    """Stamped rows in key order, grouped by hour (their key's first ``prefix_bytes``)."""
    hour: list[StampedRow] = []
    for row in rows:
        if hour and row[0][:prefix_bytes] != hour[0][0][:prefix_bytes]:
            yield hour
            hour = []
        hour.append(row)
    if hour:
        yield hour


def _from_cells(stamped: list[StampedRow], time_at: int, span_s: int, keeping: bool,
                puts: list[HourPut]) -> Hour:
    """One hour read from its cells: decoded through a blob made of them (queued in
    ``puts`` when the hour is over and settled), or its rows when it cannot be one."""
    base_s = int.from_bytes(stamped[0][0][time_at:time_at + 4], "big")
    made = _made(stamped, base_s, time_at)
    if made is None:
        return Hour(None, [(row[0], row[1]) for row in stamped])
    stamp = (sum(row[2] for row in stamped), max(row[3] for row in stamped))
    if keeping and hour_cache.keepable(base_s, span_s, stamp, hour_cache.clock_ms()):
        puts.append(HourPut(stamped[0][0][:time_at + 4], stamp, made))
    return Hour(hour_blob.decode(made), [])


def _decoded(blob: bytes) -> HourRows | None:
    try:
        return hour_blob.decode(blob)
    except ValueError as exc:  # a blob of another version: its cells, and a new blob
        log.warning("hour column not read (%s): reading its cells", exc)
        return None


def _put(columns: HourColumn, prefix_bytes: int, puts: list[HourPut]) -> None:
    try:
        columns.put_hour_columns(prefix_bytes, puts)
    except StorageError as exc:  # e.g. a read-only file: read from cells next time too
        log.warning("hour columns not kept: %s", exc.message)


def _made(stamped: list[StampedRow], base_s: int, time_at: int) -> bytes | None:
    """The blob of an hour's stored rows, None when they hold what needs their cells."""
    for row in stamped:
        for column in row[1]:  # a note's (or an append's) qualifier has an odd length
            if len(column) & 1:
                return None
    done = decode_pass([(row[0], row[1]) for row in stamped], time_at)
    if done is None:
        return None
    merged, cuts, big = done
    if merged.has_duplicates or big.size:
        return None
    points = np.diff(np.concatenate(([0], cuts, [merged.ts_ms.size]))).astype(np.int64)
    return hour_blob.encode(base_s, [row[0] for row in stamped], points,
                            [row[4] for row in stamped], [(row[2], row[3]) for row in stamped],
                            merged.ts_ms, merged.values, merged.is_int, compress=COMPRESS)
