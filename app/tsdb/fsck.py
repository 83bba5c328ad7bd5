"""``pytsd fsck``: OpenTSDB 2.4's ``Fsck`` over the data table (a full scan).

Per row, in OpenTSDB's order and with its counters:

* a row key of the wrong length (``bad_key``; ``--delete-bad-rows`` deletes the row);
* a metric or tag UID without a name (``orphans``; ``--delete-orphans`` deletes the row);
* a column whose qualifier is no data point, annotation or append (``unknown``;
  ``--delete-unknown-columns`` deletes it);
* a compacted column that cannot be decoded or whose last byte is not 0 or 1
  (``bad_compacted_columns``; ``--delete-bad-compacts`` deletes the undecodable ones), or whose
  points are out of order (``fixable_compacted_columns``: the row is rewritten with ``--fix``);
* two or more points at one timestamp (``duplicates``; ``--resolve-duplicates`` keeps the
  oldest write, ``--last-write-wins`` the newest);
* a value its qualifier's flags do not describe (``fsckFloat``/``fsckInteger``,
  :mod:`app.tsdb.fsck_values`): a float stored on 8 bytes but flagged 4 (``value_encoding``,
  rewritten on 4 with ``--fix``), a value of the wrong length (``bad_values``;
  ``--delete-bad-values`` deletes the cell), an 8-byte integer that fits in fewer bytes (not an
  error; re-encoded with ``--fix``);
* an odd qualifier of 3 or 5 bytes that is no annotation or append (``future``: not an error).

With ``--fix`` a row holding a compacted column (or every row, with ``--compact``) is rewritten
as one compacted column of the points kept, then its other data columns are deleted, as
OpenTSDB does; a row of single cells only loses its duplicate cells. Global annotation rows
(metric 0) are skipped, as OpenTSDB's full scan starts at metric 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.errors import NoSuchUniqueId
from app.storage.base import Row
from app.storage.codec_cells import (
    ANNOTATION_PREFIX,
    APPEND_COLUMN_PREFIX,
    COMPACTED,
    MS_BYTE_FLAG,
    MS_MIXED_COMPACT,
    IllegalDataError,
    cell_kind,
    cell_points,
)
from app.tsdb import TSDB
from app.tsdb.fsck_values import BAD, ENCODING, OK, VLE, Verdict, check_value
from app.tsdb.tsuid import tsuid_tags

DATA_FAMILY = b"t:"
PROGRESS_ROWS = 100_000


@dataclass
class FsckOptions:
    fix: bool = False
    compact: bool = False
    resolve_duplicates: bool = False
    last_write_wins: bool = False
    delete_orphans: bool = False
    delete_unknown_columns: bool = False
    delete_bad_rows: bool = False
    delete_bad_compacts: bool = False
    delete_bad_values: bool = False

    @classmethod
    def fix_all(cls) -> FsckOptions:
        return cls(True, True, True, False, True, True, True, True, True)


@dataclass
class FsckReport:
    rows: int = 0
    cells: int = 0
    valid_datapoints: int = 0
    annotations: int = 0
    append_dps: int = 0
    bad_key: int = 0
    bad_key_fixed: int = 0
    orphans: int = 0
    orphans_fixed: int = 0
    future: int = 0
    unknown: int = 0
    unknown_fixed: int = 0
    bad_values: int = 0
    bad_values_deleted: int = 0
    value_encoding: int = 0
    value_encoding_fixed: int = 0
    bad_compacted_columns: int = 0
    bad_compacted_columns_deleted: int = 0
    fixable_compacted_columns: int = 0
    duplicates: int = 0
    duplicates_fixed: int = 0
    vle: int = 0
    vle_bytes: int = 0
    vle_fixed: int = 0
    rows_rewritten: int = 0
    messages: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """``Fsck#totalErrors``."""
        return (self.bad_key + self.duplicates + self.orphans + self.unknown + self.bad_values
                + self.bad_compacted_columns + self.fixable_compacted_columns
                + self.value_encoding)

    @property
    def fixed(self) -> int:
        """``Fsck#totalFixed`` (deleted bad compacted columns are not counted there)."""
        return (self.bad_key_fixed + self.duplicates_fixed + self.orphans_fixed
                + self.unknown_fixed + self.value_encoding_fixed + self.bad_values_deleted)

    def summary(self) -> list[str]:
        """``Fsck#logResults``, the counters pytsd keeps."""
        return [f"Key Values Processed: {self.cells}", f"Rows Processed: {self.rows}",
                f"Valid Datapoints: {self.valid_datapoints}", f"Annotations: {self.annotations}",
                f"Invalid Row Keys Found: {self.bad_key}",
                f"Invalid Rows Deleted: {self.bad_key_fixed}",
                f"Duplicate Datapoints: {self.duplicates}",
                f"Duplicate Datapoints Resolved: {self.duplicates_fixed}",
                f"Orphaned UID Rows: {self.orphans}",
                f"Orphaned UID Rows Deleted: {self.orphans_fixed}",
                f"Possible Future Objects: {self.future}",
                f"Unknown Objects: {self.unknown}",
                f"Unknown Objects Deleted: {self.unknown_fixed}",
                f"Unparseable Datapoint Values: {self.bad_values}",
                f"Unparseable Datapoint Values Deleted: {self.bad_values_deleted}",
                f"Improperly Encoded Floating Point Values: {self.value_encoding}",
                "Improperly Encoded Floating Point Values Fixed: "
                f"{self.value_encoding_fixed}",
                f"Unparseable Compacted Columns: {self.bad_compacted_columns}",
                f"Unparseable Compacted Columns Deleted: {self.bad_compacted_columns_deleted}",
                f"Datapoints Qualified for VLE : {self.vle}",
                f"Datapoints Compressed with VLE: {self.vle_fixed}",
                f"Bytes Saved with VLE: {self.vle_bytes}",
                f"Total Errors: {self.errors}", f"Total Correctable Errors: {self.errors}",
                f"Total Errors Fixed: {self.fixed}"]


@dataclass
class _Point:
    column: bytes  # the cell holding it
    qualifier: bytes  # the point's own qualifier
    value: bytes
    write_ms: int
    compacted: bool


def fsck(tsdb: TSDB, options: FsckOptions,
         progress: Callable[[int, bytes], None] | None = None,
         start_row: bytes | None = None) -> FsckReport:
    """Check every row from ``start_row`` (a previous run's progress line) to the end;
    ``progress(rows, last_row)`` every 100,000 rows."""
    report = FsckReport()
    checker = _RowChecker(tsdb, options, report)
    for row, cells in tsdb.data_table().scan(row_start=start_row, batch_size=1000):
        report.rows += 1
        if progress is not None and report.rows % PROGRESS_ROWS == 0:
            progress(report.rows, row)
        checker.check(row, cells)
    return report


class _RowChecker:
    def __init__(self, tsdb: TSDB, options: FsckOptions, report: FsckReport) -> None:
        self.tsdb, self.options, self.report = tsdb, options, report
        layout = tsdb.layout
        self.metric_start = layout.salt_width
        self.metric_end = layout.salt_width + layout.metric_width
        self.prefix_bytes = self.metric_end + 4
        self.pair_bytes = layout.tagk_width + layout.tagv_width
        self.good_tsuids: set[bytes] = set()
        self.table = tsdb.data_table()

    def check(self, row: bytes, cells: Row) -> None:
        if not any(row[self.metric_start:self.metric_end]):
            return  # global annotations
        if not self._key_ok(row):
            return
        write_times = self.table.row_write_times(row)
        points: dict[int, list[_Point]] = {}
        compact_row = False
        for column, value in sorted(cells.items()):
            self.report.cells += 1
            compact_row |= self._cell(row, column, value, write_times.get(column, 0), points)
        self._points(row, cells, points, compact_row)

    def _key_ok(self, row: bytes) -> bool:
        """``fsckKey``: the key's length, then its UIDs' names (once per series)."""
        report, options = self.report, self.options
        if len(row) < self.prefix_bytes or (len(row) - self.prefix_bytes) % self.pair_bytes:
            report.bad_key += 1
            report.messages.append(f"Invalid row key. Key: {row.hex().upper()}")
            if options.fix and options.delete_bad_rows:
                self.table.delete(row)
                report.bad_key_fixed += 1
            return False
        tsuid = row[self.metric_start:self.metric_end] + row[self.prefix_bytes:]
        if tsuid in self.good_tsuids:
            return True
        try:
            self.tsdb.metrics.get_name(tsuid[:self.tsdb.layout.metric_width])
            tsuid_tags(self.tsdb, tsuid)
        except NoSuchUniqueId as exc:
            report.orphans += 1
            report.messages.append(f"Unable to resolve a UID of the row key. Key: "
                                   f"{row.hex().upper()} ({exc.message})")
            if options.fix and options.delete_orphans:
                self.table.delete(row)
                report.orphans_fixed += 1
            return False
        self.good_tsuids.add(tsuid)
        return True

    def _cell(self, row: bytes, column: bytes, value: bytes, write_ms: int,
              points: dict[int, list[_Point]]) -> bool:
        """One column; True when it is a compacted column (the row gets rewritten)."""
        report = self.report
        qualifier = column[len(DATA_FAMILY):]
        if len(qualifier) < 2 or (len(qualifier) % 2 and len(qualifier) not in (3, 5)):
            self._unknown(row, column, "Unknown qualifier, must be 2, 3, 5 or an even number "
                                       "of bytes")
            return False
        if len(qualifier) % 2:
            if qualifier[0] == ANNOTATION_PREFIX:
                report.annotations += 1
            elif qualifier[0] == APPEND_COLUMN_PREFIX:
                report.append_dps += 1  # counted, not checked for duplicates (as in 2.4)
            else:  # maybe a later version's object: OpenTSDB leaves it alone
                report.future += 1
            return False
        kind = cell_kind(qualifier)
        if kind != COMPACTED:
            # a single point, judged on its stored bytes (no read-time fixups)
            point = _Point(column, qualifier, value, write_ms, False)
            points.setdefault(_offset(point), []).append(point)
            return False
        if value and value[-1] > MS_MIXED_COMPACT:
            report.bad_compacted_columns += 1
            report.messages.append(f"The last byte of a compacted should be 0 or 1: "
                                   f"{row.hex().upper()} {qualifier.hex().upper()}")
            return False
        try:
            added = self._add(points, column, value, write_ms, True)
        except IllegalDataError as exc:
            report.bad_compacted_columns += 1
            report.messages.append(exc.message)
            if self.options.fix and self.options.delete_bad_compacts:
                self.table.delete(row, [column])
                report.bad_compacted_columns_deleted += 1
            return False
        if b"".join(p.qualifier for p in sorted(added, key=_offset)) != qualifier:
            report.fixable_compacted_columns += 1
            report.messages.append(f"Compacted column was out of order or requires a fixup: "
                                   f"{row.hex().upper()} {qualifier.hex().upper()}")
        return True

    def _unknown(self, row: bytes, column: bytes, message: str) -> None:
        self.report.unknown += 1
        self.report.messages.append(f"{message}: {row.hex().upper()} "
                                    f"{column[len(DATA_FAMILY):].hex().upper()}")
        if self.options.fix and self.options.delete_unknown_columns:
            self.table.delete(row, [column])
            self.report.unknown_fixed += 1

    @staticmethod
    def _add(points: dict[int, list[_Point]], column: bytes, value: bytes, write_ms: int,
             compacted: bool) -> list[_Point]:
        qualifier = column[len(DATA_FAMILY):]
        kind = cell_kind(qualifier)
        assert kind is not None
        added = [_Point(column, pq, pv, write_ms, compacted)
                 for _, pq, pv in cell_points(kind, qualifier, value)]
        for point in added:
            points.setdefault(_offset(point), []).append(point)
        return added

    def _points(self, row: bytes, cells: Row, points: dict[int, list[_Point]],
                compact_row: bool) -> None:
        """``fsckDataPoints``: duplicates and each kept point's value, then the rewrite of a
        compacted row."""
        report, options = self.report, self.options
        compacting = compact_row or options.compact
        kept: dict[int, _Point] = {}
        doomed: set[bytes] = set()
        uncorrected = False
        for offset, group in sorted(points.items()):
            report.valid_datapoints += 1
            group.sort(key=lambda p: p.write_ms)  # stable: storage order among equal times
            keep = group[-1] if options.last_write_wins else group[0]
            if len(group) > 1:
                report.duplicates += len(group) - 1
                report.messages.append(f"More than one column had a value for the same "
                                       f"timestamp: row {row.hex().upper()} offset {offset} ms")
                doomed.update(p.column for p in group if p is not keep and not p.compacted)
            fixed, corrected = self._value(row, keep, compacting)
            uncorrected |= not corrected
            if fixed is not None:
                kept[offset] = fixed
        duplicates = sum(len(g) - 1 for g in points.values())
        if not options.fix or (duplicates and not options.resolve_duplicates) or (
                uncorrected and not options.delete_bad_values):
            return  # OpenTSDB leaves a row with unresolved errors alone
        if compacting:
            sources = {p.column for group in points.values() for p in group}
            self._rewrite(row, cells, kept, sources)
            report.duplicates_fixed += duplicates
        elif doomed and options.resolve_duplicates:
            self.table.delete(row, sorted(doomed))
            report.duplicates_fixed += duplicates

    def _value(self, row: bytes, point: _Point, compacting: bool) -> tuple[_Point | None, bool]:
        """``fsckFloat``/``fsckInteger`` on a kept point: (the point as the rewrite takes it,
        None when deleted; False when an error was left uncorrected). A single cell is fixed
        in place unless the row is rewritten."""
        report, options = self.report, self.options
        verdict = check_value(point.qualifier, point.value)
        if verdict.kind == OK:
            return point, True
        where = f"{row.hex().upper()} {point.qualifier.hex().upper()}"
        if verdict.kind == VLE:
            report.vle += 1
            report.vle_bytes += len(point.value) - len(verdict.value)
            if not options.fix:
                return point, True
            report.vle_fixed += 1
            if not compacting:  # the new column, then the old one goes
                self.table.put(row, {DATA_FAMILY + verdict.qualifier: verdict.value})
                self.table.delete(row, [point.column])
            return _fixed(point, verdict), True
        report.messages.append(f"{verdict.message}: {where}")
        if verdict.kind == ENCODING:
            report.value_encoding += 1
            if not options.fix or (point.compacted and not verdict.fixable_compacted):
                return point, False
            report.value_encoding_fixed += 1
            if not compacting:
                self.table.put(row, {point.column: verdict.value})
            return _fixed(point, verdict), True
        assert verdict.kind == BAD
        report.bad_values += 1
        if options.fix and options.delete_bad_values and not point.compacted:
            self.table.delete(row, [point.column])
            report.bad_values_deleted += 1
            return None, True
        if point.compacted:
            report.bad_compacted_columns += 1
        return point, False

    def _rewrite(self, row: bytes, cells: Row, kept: dict[int, _Point],
                 sources: set[bytes]) -> None:
        """One compacted column of the points kept; the columns they came from go (a column
        fsck could not read stays)."""
        ordered = [kept[offset] for offset in sorted(kept)]
        if not ordered:
            return
        if len(ordered) == 1:
            qualifier, value = ordered[0].qualifier, ordered[0].value
        else:
            mixed = len({len(p.qualifier) for p in ordered}) > 1
            qualifier = b"".join(p.qualifier for p in ordered)
            value = b"".join(p.value for p in ordered) + bytes((MS_MIXED_COMPACT if mixed
                                                                else 0,))
        column = DATA_FAMILY + qualifier
        if cells.get(column) != value:
            self.table.put(row, {column: value})
        stale = sorted(c for c in sources if c != column)
        if stale:
            self.table.delete(row, stale)
        self.report.rows_rewritten += 1


def _fixed(point: _Point, verdict: Verdict) -> _Point:
    return _Point(point.column, verdict.qualifier, verdict.value, point.write_ms,
                  point.compacted)


def _offset(point: _Point) -> int:
    q = point.qualifier
    if q[0] >= MS_BYTE_FLAG:
        return (int.from_bytes(q[:4], "big") & 0x0FFFFFC0) >> 6
    return (int.from_bytes(q[:2], "big") >> 4) * 1000

