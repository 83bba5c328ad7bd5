"""The read path: from a sub-query to decoded series, as ``TsdbQuery`` and ``SaltScanner`` do.

1. Resolve the metric and the filters' tag keys and literal values to UIDs (unknown names are
   OpenTSDB's 400s).
2. Scan each salt bucket over the hour rows of the scan range (wider than the query range:
   ``scan_range_s``), or, with explicitTags and only literal filters, fetch the exact row keys.
3. Keep the rows whose tag UIDs pass the per-key constraints, in bulk on bytes; resolve the
   surviving tag UIDs to names and run the remaining (wildcard, regexp, ...) filters once per
   series, not per row.
4. Decode each series' rows into numpy arrays in one pass.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.model import Series
from app.errors import NoSuchUniqueId, QueryLimitError
from app.query.ast import SubQuery
from app.query.filters import KeyConstraint, TagFilter, build_filter, merge_filters, series_matches
from app.storage import codec
from app.storage.base import Row
from app.tsdb import TSDB

log = logging.getLogger(__name__)

MAX_TIMESPAN_S = 3600
DATA_PREFIX = b"t:"


def scan_range_s(start_ms: int, end_ms: int, interval_ms: int) -> tuple[int, int]:
    """OpenTSDB's ``getScanStartTimeSeconds``/``getScanEndTimeSeconds``: hour rows to read.

    Start: aligned down to the downsample interval, then to the hour. End: the next interval
    start (if downsampling), then the next hour boundary. Returns inclusive base times.
    """
    start_s = start_ms // 1000
    if interval_ms > 0:
        start_s -= (start_s * 1000 % interval_ms) // 1000
    start_s -= start_s % MAX_TIMESPAN_S
    end_s = end_ms // 1000
    if interval_ms > 0:
        interval_s = max(interval_ms // 1000, 1)
        end_s = end_s - end_s % interval_s + interval_s
    return max(start_s, 0), end_s - end_s % MAX_TIMESPAN_S


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


class SeriesReader:
    """Reads the series of one sub-query."""

    def __init__(self, tsdb: TSDB, max_points: int = 0) -> None:
        self.tsdb = tsdb
        self.layout = tsdb.layout
        self.max_points = max_points
        self.stats = ReadStats()

    def read(self, sub: SubQuery, start_ms: int, end_ms: int) -> list[Series]:
        """Every series of ``sub`` with data in the scan range, in row-key order."""
        interval_ms = sub.downsample.interval_ms if sub.downsample else 0
        first_s, last_s = scan_range_s(start_ms, end_ms, interval_ms)
        filters = [build_filter(f) for f in sub.filters]
        if sub.tsuids:
            groups = self._tsuid_rows(sub.tsuids, first_s, last_s)
        else:
            assert sub.metric is not None
            metric_uid = self.tsdb.metrics.get_id(sub.metric)
            constraints = self._resolve(merge_filters(filters))
            groups = self._metric_rows(metric_uid, constraints, sub.explicit_tags, filters,
                                       first_s, last_s)
        return self._decode(groups, filters, sub.explicit_tags, sub.index)

    def _resolve(self, constraints: list[KeyConstraint]) -> list[_UidConstraint]:
        resolved = []
        for constraint in constraints:
            tagk_uid = self.tsdb.tagk.get_id(constraint.tagk)
            literal_uids = None
            if constraint.literals is not None:
                literal_uids = frozenset(self.tsdb.tagv.get_id(v)
                                         for v in sorted(constraint.literals))
            resolved.append(_UidConstraint(tagk_uid, constraint.excluded, literal_uids))
        return resolved

    def _metric_rows(self, metric_uid: bytes, constraints: list[_UidConstraint],
                     explicit_tags: bool, filters: Sequence[TagFilter], first_s: int,
                     last_s: int) -> Iterable[_SeriesRows]:
        exact = _exact_tag_sets(constraints) if explicit_tags and filters else None
        if exact is not None:
            rows = self._exact_rows(metric_uid, exact, first_s, last_s)
        else:
            rows = self._scan_rows(metric_uid, first_s, last_s)
        return self._group(row for row in rows if _passes(self.layout, row[0], constraints))

    def _scan_rows(self, metric_uid: bytes, first_s: int,
                   last_s: int) -> Iterator[tuple[bytes, Row]]:
        table = self.tsdb.data_table()
        for salt in self.layout.salt_prefixes():
            start, stop = self.layout.metric_scan_range(salt, metric_uid, first_s, last_s)
            yield from table.scan(row_start=start, row_stop=stop, columns=[b"t"])

    def _exact_rows(self, metric_uid: bytes, tag_sets: list[list[tuple[bytes, bytes]]],
                    first_s: int, last_s: int) -> Iterator[tuple[bytes, Row]]:
        """explicitTags with only literals: the row keys are known, so fetch, don't scan."""
        keys = [self.layout.row_key(metric_uid, base_s, tags)
                for tags in tag_sets for base_s in range(first_s, last_s + 1, MAX_TIMESPAN_S)]
        keys.sort()
        yield from self.tsdb.data_table().rows(keys, columns=[b"t"])

    def _tsuid_rows(self, tsuids: Sequence[str], first_s: int,
                    last_s: int) -> Iterable[_SeriesRows]:
        table = self.tsdb.data_table()
        keys = sorted(self.layout.row_key_from_tsuid(bytes.fromhex(tsuid), base_s)
                      for tsuid in tsuids
                      for base_s in range(first_s, last_s + 1, MAX_TIMESPAN_S))
        return self._group(iter(table.rows(keys, columns=[b"t"])))

    def _group(self, rows: Iterator[tuple[bytes, Row]]) -> Iterable[_SeriesRows]:
        by_series: dict[bytes, _SeriesRows] = {}
        time_start = self.layout.salt_width + self.layout.metric_width
        for key, cells in rows:
            self.stats.rows += 1
            order = key[:time_start] + key[time_start + 4:]
            group = by_series.get(order)
            if group is None:
                tags = self.layout.parse_row_key(key).tags
                group = by_series[order] = _SeriesRows(order, tags)
            group.rows.append((key, cells))
        return [by_series[order] for order in sorted(by_series)]

    def _decode(self, groups: Iterable[_SeriesRows], filters: Sequence[TagFilter],
                explicit_tags: bool, index: int) -> list[Series]:
        series = []
        for group in groups:
            tags = self._names(group.tag_uids)
            if tags is None or not series_matches(tags, filters, explicit_tags):
                continue
            series.append(self._series(group, tags, index))
        self.stats.series += len(series)
        return series

    def _names(self, tag_uids: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
        try:
            return {self.tsdb.tagk.get_name(k): self.tsdb.tagv.get_name(v) for k, v in tag_uids}
        except NoSuchUniqueId as exc:
            log.warning("skipping a series with an unresolvable UID: %s", exc.message)
            return None

    def _series(self, group: _SeriesRows, tags: dict[str, str], index: int) -> Series:
        decoded = [self._decode_row(key, cells) for key, cells in group.rows]
        ts_ms = np.concatenate([d.ts_ms for d in decoded])
        self.stats.points += int(ts_ms.size)
        if self.max_points and self.stats.points > self.max_points:
            raise QueryLimitError(
                f"Sub query {index} has exceeded the data points limit of "
                f"{self.max_points}: read more than {self.max_points} points")
        notes = [note for key, cells in group.rows for note in _annotations(self.layout, key,
                                                                             cells)]
        tsuid = group.row_order[self.layout.salt_width:]
        tag_uids = {self.tsdb.tagk.get_name(k): (k, v) for k, v in group.tag_uids}
        return Series(tsuid=tsuid.hex().upper(), tags=tags, ts_ms=ts_ms,
                      values=np.concatenate([d.values for d in decoded]),
                      is_int=np.concatenate([d.is_int for d in decoded]),
                      annotations=notes, row_order=group.row_order, tag_uids=tag_uids)

    def _decode_row(self, key: bytes, cells: Row) -> codec.DecodedRow:
        base_time_s = self.layout.parse_row_key(key).base_time_s
        data = [(column[2:], value) for column, value in cells.items()
                if column.startswith(DATA_PREFIX)]
        decoded = codec.decode_row(base_time_s, data)
        if decoded.has_duplicates:
            # Rare: the same timestamp in two cells. Re-read with write times, newest wins.
            times = self.tsdb.data_table().row_write_times(key)
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


def _exact_tag_sets(constraints: Sequence[_UidConstraint]
                    ) -> list[list[tuple[bytes, bytes]]] | None:
    """Every exact tag set the constraints allow, or None when some key is not literal."""
    if any(c.literal_uids is None or c.excluded for c in constraints):
        return None
    choices = [[(c.tagk_uid, v) for v in sorted(c.literal_uids or ())] for c in constraints]
    return [list(combo) for combo in itertools.product(*choices)]


def _annotations(layout: codec.RowKeyLayout, key: bytes, cells: Row) -> list[dict[str, Any]]:
    notes = []
    for column, value in cells.items():
        if column.startswith(DATA_PREFIX) and codec.is_annotation_qualifier(column[2:]):
            try:
                notes.append(json.loads(value))
            except ValueError:
                log.warning("skipping an unreadable annotation in row %s", key.hex())
    return notes

