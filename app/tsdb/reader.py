"""The read path: from a sub-query to decoded series, as ``TsdbQuery`` and ``SaltScanner`` do.

1. Resolve the metric and the filters' tag keys and literal values to UIDs (unknown names are
   OpenTSDB's 400s).
2. Scan each salt bucket over the hour rows of the scan range (wider than the query range:
   ``scan_hours_s``), or, with explicitTags and only literal filters, fetch the exact row keys.
3. Keep the rows whose tag UIDs pass the per-key constraints, in bulk on bytes; resolve the
   surviving tag UIDs to names and run the remaining (wildcard, regexp, ...) filters once per
   series, not per row.
4. Decode each series' rows into numpy arrays in one pass.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.execute import scan_bounds_ms
from app.engine.model import Int64Array, Series
from app.errors import BadRequestError, NoSuchUniqueId
from app.query.ast import Downsample, SubQuery
from app.query.filters import KeyConstraint, TagFilter, build_filter, merge_filters, series_matches
from app.query.limits import NO_DEADLINE, Deadline, QueryLimits, filled_buckets
from app.storage import codec
from app.storage.base import Row, Table, prefix_stop, scan_ranges
from app.storage.codec_cells import cell_kind, cell_points
from app.tsdb import TSDB
from app.tsdb.annotations import query_note
from app.tsdb.planner import planned_read
from app.tsdb.tsuid import parse_tsuid

log = logging.getLogger(__name__)

# Integers at or beyond 2**53 lose digits as float64; their exact values are re-read.
EXACT_DOUBLE_LIMIT = 2.0**53

MAX_TIMESPAN_S = 3600
# Wider than any timestamp in ms (2**43 ms is the year 2248) and a whole number of seconds.
SERIES_SHIFT_S = 2**43 // 1000
# Rows decoded per vectorised pass (about 1M points of 10-second data).
DECODE_CHUNK_ROWS = 3000
# Past this many hour rows per salt, one wide scan beats two narrow range scans per hour.
MAX_NARROWED_HOURS = 24 * 8
# Rows fetched between checks of the byte limit and the deadline.
CHECK_EVERY_ROWS = 256
DATA_PREFIX = b"t:"


def scan_hours_s(start_ms: int, end_ms: int, spec: Downsample | None) -> tuple[int, int]:
    """First and last base time (inclusive) of the hour rows OpenTSDB scans for a query."""
    scan_start_ms, scan_end_ms = scan_bounds_ms(start_ms, end_ms, spec)
    last_s = (scan_end_ms - 1) // 1000
    return scan_start_ms // 1000, last_s - last_s % MAX_TIMESPAN_S


@dataclass
class _SeriesRows:
    row_order: bytes
    tag_uids: tuple[tuple[bytes, bytes], ...]
    rows: list[tuple[bytes, Row]] = field(default_factory=list)


@dataclass
class ReadStats:
    rows: int = 0
    points: int = 0
    series: int = 0
    bytes: int = 0


class SeriesReader:
    """Reads the series of one sub-query."""

    def __init__(self, tsdb: TSDB, limits: QueryLimits | None = None,
                 deadline: Deadline = NO_DEADLINE) -> None:
        self.tsdb = tsdb
        self.layout = tsdb.layout
        self.limits = limits or QueryLimits()
        self.deadline = deadline
        self.stats = ReadStats()
        self.matched_rows: list[tuple[bytes, Row]] = []
        self._sub = SubQuery("none")
        self._buckets = 0

    # Seconds between two row base times (rollup tables may use longer rows).
    row_span_s = MAX_TIMESPAN_S

    def read(self, sub: SubQuery, start_ms: int, end_ms: int) -> list[Series]:
        """Every series of ``sub`` with data in the scan range, in row-key order.

        The limits apply as the work goes: filled buckets before any read, bytes and the
        deadline every ``CHECK_EVERY_ROWS`` rows, buckets x series before decoding, points
        after each decoded chunk.
        """
        self._sub = sub
        self.limits.check_buckets(sub, start_ms, end_ms)
        self._buckets = filled_buckets(sub, start_ms, end_ms)
        planned = planned_read(self, sub, start_ms, end_ms)  # from rollups, when they answer
        if planned is not None:
            return planned
        first_s, last_s = scan_hours_s(start_ms, end_ms, sub.downsample)
        return self.read_rows(sub, first_s, last_s)

    def table(self) -> Table:
        return self.tsdb.data_table()

    def read_rows(self, sub: SubQuery, first_s: int, last_s: int) -> list[Series]:
        """The series of ``sub`` from the rows with base times in ``[first_s, last_s]``."""
        filters = [build_filter(f) for f in sub.filters]
        return self._decode(self._row_groups(sub, filters, first_s, last_s), filters,
                            sub.explicit_tags)

    def _row_groups(self, sub: SubQuery, filters: Sequence[TagFilter], first_s: int,
                    last_s: int) -> Iterable[_SeriesRows]:
        """The rows of each series ``sub`` may match (the name filters not yet run)."""
        if sub.tsuids:
            self._check_tsuids(sub.tsuids)
            return self._tsuid_rows(sub.tsuids, first_s, last_s)
        assert sub.metric is not None
        metric_uid = self.tsdb.metrics.get_id(sub.metric)
        constraints = self._resolve(merge_filters(filters))
        return self._metric_rows(metric_uid, constraints, sub.explicit_tags, filters,
                                 first_s, last_s)

    def _check_tsuids(self, tsuids: Sequence[str]) -> None:
        """Whole UIDs, one metric (``TsdbQuery#setTimeSeries``; OpenTSDB answers 500)."""
        metric_hex = 2 * self.layout.metric_width
        for tsuid in tsuids:
            if len(parse_tsuid(self.layout, tsuid)) == self.layout.metric_width:
                # OpenTSDB parses the missing tag pairs as an empty UID (a 400)
                raise BadRequestError("UID was empty", "A TSUID needs at least one tag pair")
            if tsuid[:metric_hex].upper() != tsuids[0][:metric_hex].upper():
                raise BadRequestError("One or more TSUIDs did not share the same metric "
                                      f"[{tsuids[0][:metric_hex]}] [{tsuid[:metric_hex]}]")

    def _resolve(self, constraints: list[KeyConstraint]) -> list[_UidConstraint]:
        resolved = []
        for constraint in constraints:
            tagk_uid = self.tsdb.tagk.get_id(constraint.tagk)
            literal_uids = None
            if constraint.literals is not None:
                literal_uids = self._literal_uids(constraint.literals)
            resolved.append(_UidConstraint(tagk_uid, constraint.excluded, literal_uids))
        return resolved

    def _literal_uids(self, literals: frozenset[str]) -> frozenset[bytes]:
        """UIDs of literal tag values; an unknown one is a 400 unless
        ``tsd.query.skip_unresolved_tagvs`` says to drop it (then nothing may match)."""
        if not self.tsdb.config["tsd.query.skip_unresolved_tagvs"]:
            return frozenset(self.tsdb.tagv.get_id(v) for v in sorted(literals))
        found = (self.tsdb.tagv.find_id(v) for v in sorted(literals))
        return frozenset(uid for uid in found if uid is not None)

    def _metric_rows(self, metric_uid: bytes, constraints: list[_UidConstraint],
                     explicit_tags: bool, filters: Sequence[TagFilter], first_s: int,
                     last_s: int) -> Iterable[_SeriesRows]:
        exact = _exact_tag_sets(constraints) if explicit_tags and filters else None
        if exact is not None:
            rows = self._exact_rows(metric_uid, exact, first_s, last_s)
        else:
            rows = self._scan_rows(metric_uid, first_s, last_s, _narrowing(constraints))
        return self._group(row for row in rows if _passes(self.layout, row[0], constraints))

    def _scan_rows(self, metric_uid: bytes, first_s: int, last_s: int,
                   narrow: _UidConstraint | None) -> Iterator[tuple[bytes, Row]]:
        ranges = [key_range for salt in self.layout.salt_prefixes()
                  for key_range in self._ranges(salt, metric_uid, first_s, last_s, narrow)]
        # Salt buckets (and narrowed ranges) are independent: HBase scans them concurrently.
        yield from scan_ranges(self.table(), ranges, columns=[b"t"])

    def _ranges(self, salt: bytes, metric_uid: bytes, first_s: int, last_s: int,
                narrow: _UidConstraint | None) -> list[tuple[bytes, bytes | None]]:
        """Key ranges to scan: one per salt, or per hour narrowed by a literal filter.

        Tags in a key are sorted by tagk UID, so a row holding ``tagk=v`` either starts its
        tags with that pair or with a tagk of a lower UID: each hour needs only
        ``[hour, hour+tagk)`` and ``[hour+tagk+v, next(hour+tagk+v))`` for every literal v.
        """
        start, stop = self.layout.metric_scan_range(salt, metric_uid, first_s, last_s)
        hours = (last_s - first_s) // self.row_span_s + 1
        if narrow is None or narrow.literal_uids is None or hours > MAX_NARROWED_HOURS:
            return [(start, stop)]
        ranges: list[tuple[bytes, bytes | None]] = []
        for base_s in range(first_s, last_s + 1, self.row_span_s):
            hour = salt + metric_uid + base_s.to_bytes(4, "big")
            ranges.append((hour, hour + narrow.tagk_uid))
            for tagv_uid in sorted(narrow.literal_uids):
                prefix = hour + narrow.tagk_uid + tagv_uid
                ranges.append((prefix, prefix_stop(prefix)))
        return ranges

    def _exact_rows(self, metric_uid: bytes, tag_sets: list[list[tuple[bytes, bytes]]],
                    first_s: int, last_s: int) -> Iterator[tuple[bytes, Row]]:
        """explicitTags with only literals: the row keys are known, so fetch, don't scan."""
        keys = [self.layout.row_key(metric_uid, base_s, tags)
                for tags in tag_sets for base_s in range(first_s, last_s + 1, self.row_span_s)]
        keys.sort()
        yield from self.table().rows(keys, columns=[b"t"])

    def _tsuid_rows(self, tsuids: Sequence[str], first_s: int,
                    last_s: int) -> Iterable[_SeriesRows]:
        table = self.table()
        keys = sorted(self.layout.row_key_from_tsuid(bytes.fromhex(tsuid), base_s)
                      for tsuid in tsuids
                      for base_s in range(first_s, last_s + 1, self.row_span_s))
        return self._group(iter(table.rows(keys, columns=[b"t"])))

    def _group(self, rows: Iterator[tuple[bytes, Row]]) -> Iterable[_SeriesRows]:
        by_series: dict[bytes, _SeriesRows] = {}
        time_start = self.layout.salt_width + self.layout.metric_width
        stats = self.stats
        try:
            for key, cells in rows:
                stats.rows += 1
                # Per cell its row key, column name and value, as OpenTSDB weighs its
                # KeyValues: many small cells cost more than one compacted column.
                stats.bytes += (len(key) * len(cells) + sum(map(len, cells))
                                + sum(map(len, cells.values())))
                if stats.rows % CHECK_EVERY_ROWS == 0:
                    self.limits.check_read(self._sub, stats.points, stats.bytes)
                    self.deadline.check(self._sub.index)
                order = key[:time_start] + key[time_start + 4:]
                group = by_series.get(order)
                if group is None:
                    tags = self.layout.parse_row_key(key).tags
                    group = by_series[order] = _SeriesRows(order, tags)
                group.rows.append((key, cells))
        finally:
            # A scan stopped by a limit or the deadline is closed here and now. Left to the
            # garbage collector, its HBase scanner would be closed at a random moment, maybe
            # in the middle of another Thrift call on this thread's pooled connection.
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        self.limits.check_read(self._sub, stats.points, stats.bytes)
        return [by_series[order] for order in sorted(by_series)]

    def _decode(self, groups: Iterable[_SeriesRows], filters: Sequence[TagFilter],
                explicit_tags: bool) -> list[Series]:
        kept = self._matching(groups, filters, explicit_tags)
        # The rows of the series the query matched (what ``"delete": true`` deletes).
        self.matched_rows = [row for group, _ in kept for row in group.rows]
        decoded = self._decode_all([group for group, _ in kept])
        self.stats.series += len(kept)
        return [self._series(group, tags, rows) for (group, tags), rows in zip(kept, decoded)]

    def _matching(self, groups: Iterable[_SeriesRows], filters: Sequence[TagFilter],
                  explicit_tags: bool) -> list[tuple[_SeriesRows, dict[str, str]]]:
        """The series whose tag names pass the filters, with those names."""
        kept = []
        for group in groups:
            tags = self._names(group.tag_uids)
            if tags is not None and series_matches(tags, filters, explicit_tags):
                kept.append((group, tags))
        self.limits.check_emitted(self._sub, self._buckets, len(kept))
        return kept

    def _decode_all(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """Decode every series' rows in a few vectorised passes, each over many series.

        Series j of a pass has its timestamps shifted by ``j * SERIES_SHIFT_S`` seconds, so
        after the decoder's ascending sort the series lie one after the other; cutting at the
        shift boundaries and subtracting the shift gives each series its own arrays. Passes
        are kept to about ``DECODE_CHUNK_ROWS`` rows: their temporaries then stay small enough
        for the allocator to recycle, which on this class of machine costs far less than fresh
        pages (and bounds peak memory).
        """
        decoded: list[codec.DecodedRow] = []
        chunk: list[_SeriesRows] = []
        rows = 0
        for group in groups:
            chunk.append(group)
            rows += len(group.rows)
            if rows >= DECODE_CHUNK_ROWS:
                decoded += self._decode_counted(chunk)
                chunk, rows = [], 0
        return decoded + self._decode_counted(chunk)

    def _decode_counted(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        """One decode pass, then the point limit and the deadline."""
        decoded = self._decode_chunk(groups)
        self.stats.points += sum(int(d.ts_ms.size) for d in decoded)
        self.limits.check_read(self._sub, self.stats.points, self.stats.bytes)
        self.deadline.check(self._sub.index)
        return decoded

    def _decode_chunk(self, groups: Sequence[_SeriesRows]) -> list[codec.DecodedRow]:
        if not groups:
            return []
        batch = [(self._base_time(key) + j * SERIES_SHIFT_S, _data_cells(cells))
                 for j, group in enumerate(groups) for key, cells in group.rows]
        merged = codec.decode_rows(batch)
        if merged.has_duplicates:
            return [self._decode_one(group) for group in groups]
        shift_ms = SERIES_SHIFT_S * 1000
        cuts = np.searchsorted(merged.ts_ms, np.arange(1, len(groups)) * shift_ms).tolist()
        out = []
        for j, (start, end) in enumerate(zip([0, *cuts], [*cuts, merged.ts_ms.size])):
            ts_ms = merged.ts_ms[start:end]
            ts_ms -= j * shift_ms  # in place: the merged array is ours alone
            out.append(codec.DecodedRow(ts_ms, merged.values[start:end],
                                        merged.is_int[start:end]))
        return out

    def _decode_one(self, group: _SeriesRows) -> codec.DecodedRow:
        """One series, re-reading write times for rows with duplicate timestamps."""
        rows = [self._decode_row(key, cells) for key, cells in group.rows]
        return codec.DecodedRow(np.concatenate([r.ts_ms for r in rows]),
                                np.concatenate([r.values for r in rows]),
                                np.concatenate([r.is_int for r in rows]))

    def _base_time(self, key: bytes) -> int:
        start = self.layout.salt_width + self.layout.metric_width
        return int.from_bytes(key[start:start + 4], "big")

    def _names(self, tag_uids: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
        try:
            return {self.tsdb.tagk.get_name(k): self.tsdb.tagv.get_name(v) for k, v in tag_uids}
        except NoSuchUniqueId as exc:
            log.warning("skipping a series with an unresolvable UID: %s", exc.message)
            return None

    def _series(self, group: _SeriesRows, tags: dict[str, str],
                decoded: codec.DecodedRow) -> Series:
        notes = [note for key, cells in group.rows
                 for note in _annotations(self.layout, key, cells)]
        tsuid = group.row_order[self.layout.salt_width:]
        # ``tags`` was built from ``group.tag_uids`` in the same order (see _names).
        tag_uids = dict(zip(tags, group.tag_uids))
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=decoded.ts_ms,
                      values=decoded.values, is_int=decoded.is_int, annotations=notes,
                      long_values=self._exact_longs(group, decoded),
                      row_order=group.row_order, tag_uids=tag_uids)

    def _exact_longs(self, group: _SeriesRows, decoded: codec.DecodedRow) -> Int64Array | None:
        """Exact 64-bit values when an integer is beyond a double's 2**53 (rare: counters
        near Long.MAX_VALUE), which the float64 decoder rounds; None otherwise."""
        big = decoded.is_int & (np.abs(decoded.values) >= EXACT_DOUBLE_LIMIT)
        if not big.any():
            return None
        exact: dict[int, int] = {}
        for key, cells in group.rows:
            base_ms = self._base_time(key) * 1000
            for qualifier, value in _data_cells(cells):
                kind = cell_kind(qualifier)
                for offset_ms, point_q, point_v in cell_points(kind, qualifier, value) \
                        if kind is not None else ():
                    if not point_q[-1] & codec.FLAG_FLOAT:
                        exact[base_ms + offset_ms] = int.from_bytes(point_v, "big", signed=True)
        longs = np.where(decoded.is_int & ~big, decoded.values, 0.0).astype(np.int64)
        for i in np.flatnonzero(big).tolist():
            longs[i] = exact[int(decoded.ts_ms[i])]
        return longs

    def _decode_row(self, key: bytes, cells: Row) -> codec.DecodedRow:
        base_time_s = self._base_time(key)
        data = _data_cells(cells)
        decoded = codec.decode_row(base_time_s, data)
        if decoded.has_duplicates:
            # Rare: the same timestamp in two cells. Re-read with write times, newest wins.
            times = self.table().row_write_times(key)
            write_ts = {column[2:]: ts for column, ts in times.items()}
            decoded = codec.decode_row(base_time_s, data, write_ts)
        return decoded


@dataclass(frozen=True)
class _UidConstraint:
    tagk_uid: bytes
    excluded: bool
    literal_uids: frozenset[bytes] | None


def _passes(layout: codec.RowKeyLayout, key: bytes,
            constraints: Sequence[_UidConstraint]) -> bool:
    """The byte-level pre-filter: keys present (or absent for not_key), literal tagv UIDs."""
    if not constraints:
        return True
    tags = dict(layout.parse_row_key(key).tags)
    for constraint in constraints:
        tagv_uid = tags.get(constraint.tagk_uid)
        if constraint.excluded:
            if tagv_uid is not None:
                return False
            continue
        if tagv_uid is None:
            return False
        if constraint.literal_uids is not None and tagv_uid not in constraint.literal_uids:
            return False
    return True


def _narrowing(constraints: Sequence[_UidConstraint]) -> _UidConstraint | None:
    """The literal constraint whose tagk sorts first: the best one to narrow scans with."""
    literal = [c for c in constraints if c.literal_uids and not c.excluded]
    return min(literal, key=lambda c: c.tagk_uid) if literal else None


def _exact_tag_sets(constraints: Sequence[_UidConstraint]
                    ) -> list[list[tuple[bytes, bytes]]] | None:
    """Every exact tag set the constraints allow, or None when some key is not literal."""
    if any(c.literal_uids is None or c.excluded for c in constraints):
        return None
    choices = [[(c.tagk_uid, v) for v in sorted(c.literal_uids or ())] for c in constraints]
    return [list(combo) for combo in itertools.product(*choices)]


def _data_cells(cells: Row) -> list[tuple[bytes, bytes]]:
    """``(qualifier, value)`` of the ``t`` family (the decoder skips non-data qualifiers)."""
    return [(column[2:], value) for column, value in cells.items()
            if column.startswith(DATA_PREFIX)]


def _annotations(layout: codec.RowKeyLayout, key: bytes, cells: Row) -> list[dict[str, Any]]:
    """The row's notes, ready for the response: every field Grafana reads, times in seconds
    (the serializer keeps those starting in the query range)."""
    notes = []
    for column, value in cells.items():
        if column.startswith(DATA_PREFIX) and codec.is_annotation_qualifier(column[2:]):
            note = query_note(layout, key, column[2:], value)
            if note is not None:
                notes.append(note)
    return notes

