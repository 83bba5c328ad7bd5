"""Rollup rows read and decoded in bulk, and kept decoded in the hour cache.

A rollup row holds one cell per aggregate per interval (2.4's layout, which its ``RollupSeq``
reads cell by cell, so it cannot be compacted). Reading them as one Python object per cell
was the cost of a rollup query; here:

* only the cells of the aggregates the query needs are read (``avg``: ``sum`` and ``count``):
  a qualifier-prefix condition in SQL, a ``MultipleColumnPrefixFilter`` on HBase;
* each row comes back as one record ``(row, cells, newest write time, qualifiers joined,
  values joined)`` (``scan_packed`` on both backends), and all rows of a read are decoded
  in one vectorised pass (3-byte qualifiers; value widths from their flags);
* on HBase, closed rows are kept decoded in the process's hour cache, under a key space
  naming the table and the aggregates read, validated by the same stamp as raw hour rows (the
  count and newest write time of the cells read; see docs/cache.md), so a rewritten rollup
  cell or a backfill is seen by the next query;
* the embedded store keeps its rollup rows' columns on disk (``sqlite_columns``), read a
  range at a time: those reads keep nothing in the hour cache (``plan._cache_policy``).

Rows that are not in the modern layout (the old ``sum:``-prefixed qualifiers, a value whose
length its flags do not give) are decoded cell by cell; they are never kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import StorageError
from app.storage.base import (
    SCAN_COLUMNS,
    SCAN_PACKED,
    ColumnsPut,
    Row,
    ScanColumns,
    able,
)
from app.storage.codec import FLAG_BITS, FLAGS_MASK
from app.storage.codec_decode import DecodedRow
from app.storage.codec_rollup import (
    AGGREGATOR_MASK,
    column_parts,
    decode_modern_rows,
    decode_rollup_cell,
    values_of,
)
from app.tsdb import hour_cache
from app.tsdb.hour_cache import ENTRY_OVERHEAD_BYTES, Block, CachedRow, HourCache
from app.tsdb.read import rollup_blocks, rollup_columns

log = logging.getLogger(__name__)

QUALIFIER_BYTES = 3
# Warm reads (fewer than this share of the rows missing from the cache) read the missing
# rows by key; colder ones read the ranges again.
COLD_SHARE = 4
COLUMN_PREFIX_BYTES = 2  # "t:" in a stored cell's weight
NO_COUNT = -1  # the cell count in the stamp of a row never kept (no stamp of its own)
# Rows changed since their columns were put, up to which they are read by key (beyond it,
# the ranges are read again).
FEW_DIRTY_ROWS = 64

Packed = tuple[bytes, int, int, bytes, bytes]
"""``(row, cells, newest write time in ms, qualifiers joined, values joined)``."""


@dataclass(eq=False)
class RollupRow(CachedRow):
    """One rollup row's cells of the aggregates read. ``decoded`` holds the cells of every
    row of one read, value aggregate (``sum``, ``min``, ...) first, row after row, then the
    ``count`` cells of an average likewise; this row's are ``[value_at, value_end)`` and
    ``[count_at, count_end)``. Rows of one read lie side by side, so a query gets a run of
    them as one slice, not one array per row."""

    spans: tuple[int, int, int, int] = (0, 0, 0, 0)
    kept: bool = True  # False: not to be kept (no stamp, or cells decoded one by one)

    @property
    def nbytes(self) -> int:
        if self.block is not None:
            return ENTRY_OVERHEAD_BYTES
        d = self.decoded
        return ENTRY_OVERHEAD_BYTES + d.ts_ms.nbytes + d.values.nbytes + d.is_int.nbytes

    def value_cells(self) -> DecodedRow:
        a, b = self.spans[0], self.spans[1]
        d = self.decoded
        return DecodedRow(d.ts_ms[a:b], d.values[a:b], d.is_int[a:b])


@dataclass(frozen=True)
class Wanted:
    """The aggregates a query reads from a rollup table and how to find their cells."""

    value_id: int
    value_name: str
    count_id: int | None  # set for an average

    def prefixes(self) -> list[bytes]:
        """Qualifier prefixes of their cells: the ID byte (as written and with the high bit
        2.4's mask ignores) and the old ``name:`` layout."""
        ids = [self.value_id] + ([self.count_id] if self.count_id is not None else [])
        names = [self.value_name] + (["count"] if self.count_id is not None else [])
        return sorted({bytes([i | high]) for i in ids for high in (0, 0x80)}
                      | {name.encode() + b":" for name in names}
                      | {name.upper().encode() + b":" for name in names})

    def space(self, table: str) -> str:
        """The hour cache key space: the table and the aggregates read."""
        return f"{table}\x00rollup:{self.value_id}:{self.count_id}"


class RowSource:
    """Reads the rollup rows of key ranges from one table, through the hour cache."""

    def __init__(self, table: Any, wanted: Wanted, interval_s: int, span_s: int,
                 base_time: Callable[[bytes], int], series_key: Callable[[bytes], bytes],
                 cache: HourCache | None, time_at: int | None = None) -> None:
        self.table = table
        self.wanted = wanted
        self.interval_s = interval_s
        self.span_s = span_s
        self.base_time = base_time  # row key -> base time in s
        self.series_key = series_key  # row key -> the key without its base time
        self.cache = cache if able(table, SCAN_PACKED) is not None else None
        self.space = wanted.space(table.name)
        self.prefixes = wanted.prefixes()
        self.time_at = time_at  # where a row key's base time starts (None: unknown)

    def rows(self, ranges: Sequence[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes,
                                                                                  RollupRow]]:
        """Every row of the ranges with cells of the wanted aggregates, in key order."""
        if able(self.table, SCAN_PACKED) is None:
            for start, stop in ranges:
                for key, cells in self.table.scan(row_start=start, row_stop=stop,
                                                  columns=[b"t"]):
                    yield from self.decode([packed_from_cells(key, cells)], keep=False)
            return
        if self.cache is None or self.space not in _SPACES_KEPT:
            yield from self._cold(ranges)
            return
        stamped = self._stamps(ranges)
        found = self.cache.lookup(self.space, stamped)
        missing = [row[0] for row, entry in zip(stamped, found) if entry is None]
        fresh: dict[bytes, RollupRow] = {}
        if missing and len(missing) * COLD_SHARE >= len(stamped):
            fresh = dict(self._cold(ranges, skip={row[0] for row, entry in zip(stamped, found)
                                                  if entry is not None}))
        elif missing:
            packed = [row for key in missing
                      for row in self.table.scan_packed(key, key + b"\x00", "t", self.prefixes)]
            fresh = dict(self._decoded_kept(packed))
        rows = {key: entry for (key, _, _), entry in zip(stamped, found)
                if isinstance(entry, RollupRow)}
        rows.update(fresh)  # with any row written since the stamps were read
        for key in sorted(rows):
            yield key, rows[key]

    def _stamps(self, ranges: Sequence[tuple[bytes, bytes | None]]
                ) -> list[tuple[bytes, int, int]]:
        """Each row's stamp: the count and newest write time of the cells read, values left
        on the region servers."""
        return [row for start, stop in ranges
                for row in self.table.scan_stamps_packed(start, stop, "t", self.prefixes)]

    @staticmethod
    def _stamp(row: Packed) -> tuple[int, int]:
        """The stamp of a row read with its values, as :meth:`_stamps` reads it alone."""
        return row[1], row[2]

    def _cold(self, ranges: Sequence[tuple[bytes, bytes | None]],
              skip: set[bytes] | None = None) -> Iterator[tuple[bytes, RollupRow]]:
        columns = able(self.table, SCAN_COLUMNS)
        if columns is not None and skip is None and self.time_at is not None:
            try:
                return iter(self._from_columns(columns, ranges))
            except StorageError as exc:  # e.g. a read-only file: the cells alone, as before
                log.warning("rollup columns unavailable, reading cells: %s", exc.message)
        packed = [row for start, stop in ranges
                  for row in self.table.scan_packed(start, stop, "t", self.prefixes)
                  if skip is None or row[0] not in skip]
        return iter(self._decoded_kept(packed))

    def _read_columns(self, columns: ScanColumns, ranges: Sequence[tuple[bytes, bytes | None]]
                      ) -> tuple[list[rollup_columns.Part | None], list[tuple[bytes, RollupRow]]]:
        """The wanted aggregates' parts of ``ranges`` from the columns the store keeps (rows
        changed since their columns were put, or never put, read from their cells, and their
        columns put again once their span is over), and the rows decoded cell by cell."""
        wanted = [self.wanted.value_id] + (
            [self.wanted.count_id] if self.wanted.count_id is not None else [])
        assert self.time_at is not None
        by_row, blocks = rollup_blocks.split(ranges, self.time_at,
                                             self.span_s * rollup_blocks.BLOCK_SPANS)
        found = columns.scan_columns(by_row, wanted, blocks)
        built, loose = self._rebuilt(columns, found.dirty, [*by_row, *found.unbuilt])
        parts: list[rollup_columns.Part | None] = []
        for part in wanted:
            pieces = [rollup_blocks.decode(data) for data in found.blocks.get(part, [])]
            blob = found.parts.get(part, b"") + built.get(part, b"")
            if blob:
                pieces.append(rollup_columns.part_of(blob))
            present = [piece for piece in pieces if piece is not None]
            parts.append(rollup_blocks.concat(present) if present else None)
        # The blocks of ranges over, their rows' columns all current by now (a row only ever
        # read from its cells, ``loose``, never is: no block of its range is tried).
        now_s = hour_cache.clock_ms() // 1000
        over = [(start, stop) for start, stop in found.unbuilt
                if int.from_bytes(stop[self.time_at:], "big") <= now_s
                and not any(start <= key < stop for key, _ in loose)]
        columns.put_column_blocks(over, wanted, rollup_blocks.encode)
        return parts, loose

    def columns_read(self, ranges: Sequence[tuple[bytes, bytes | None]]
                     ) -> tuple[list[rollup_columns.Part | None],
                                list[tuple[bytes, RollupRow]]] | None:
        """With the hour cache off, the wanted aggregates' parts of ``ranges`` from the
        columns the store keeps and the rows decoded cell by cell (what :meth:`rows_of`
        makes rows of); None where there are no columns to read (then :meth:`rows`)."""
        columns = able(self.table, SCAN_COLUMNS)
        if (columns is None or self.cache is not None or self.time_at is None
                or able(self.table, SCAN_PACKED) is None):
            return None
        try:
            return self._read_columns(columns, ranges)
        except StorageError as exc:  # e.g. a read-only file: the cells alone, as before
            log.warning("rollup columns unavailable, reading cells: %s", exc.message)
            return None

    def _from_columns(self, columns: ScanColumns, ranges: Sequence[tuple[bytes, bytes | None]]
                      ) -> list[tuple[bytes, RollupRow]]:
        """The rows of ``ranges`` from columns (``rollup_columns``), one joined row per
        series (the hour cache off: nothing kept)."""
        return self.rows_of(*self._read_columns(columns, ranges))

    def rows_of(self, parts: list[rollup_columns.Part | None],
                loose: list[tuple[bytes, RollupRow]]) -> list[tuple[bytes, RollupRow]]:
        """The rows of a columns read, one joined row per series, in key order."""
        if all(part is None for part in parts):
            return loose
        assert self.time_at is not None
        whole = rollup_columns.joined(parts, self.time_at, self.interval_s)
        return sorted(_series_rows(whole) + loose, key=lambda item: item[0])

    def _rebuilt(self, columns: ScanColumns, dirty: list[tuple[bytes, int]],
                 ranges: Sequence[tuple[bytes, bytes | None]]
                 ) -> tuple[dict[int, bytes], list[tuple[bytes, RollupRow]]]:
        """The dirty rows read from their cells: their wanted parts as joined blobs, the rows
        not in the modern layout decoded cell by cell; the columns of every row whose span
        is over put back (each only if unchanged since this read)."""
        if not dirty:
            return {}, []
        generation = dict(dirty)
        if len(dirty) <= FEW_DIRTY_ROWS:
            packed = [row for key, _ in dirty
                      for row in self.table.scan_packed(key, key + b"\x00", "t", [b""])]
        else:
            packed = [row for start, stop in ranges
                      for row in self.table.scan_packed(start, stop, "t", [b""])
                      if row[0] in generation]
        cells = np.fromiter((row[1] for row in packed), np.int64, len(packed))
        q_len = np.fromiter((len(row[3]) for row in packed), np.int64, len(packed))
        modern = (q_len == QUALIFIER_BYTES * cells).tolist()
        rows = [row for row, ok in zip(packed, modern) if ok]
        decoded = decode_modern_rows(
            b"".join(row[3] for row in rows), b"".join(row[4] for row in rows),
            np.fromiter((row[1] for row in rows), np.int64, len(rows)),
            np.fromiter((len(row[4]) for row in rows), np.int64, len(rows)))
        good = decoded.good.tolist()
        loose = [(row[0], self._decode_cells(row)) for row, ok in zip(packed, modern) if not ok]
        loose += [(row[0], self._decode_cells(row)) for row, ok in zip(rows, good) if not ok]
        wanted = {self.wanted.value_id, self.wanted.count_id}
        built: dict[int, list[bytes]] = {}
        puts = []
        now_s = hour_cache.clock_ms() // 1000
        for i, row in enumerate(rows):
            if not good[i]:
                continue
            parts = column_parts(decoded, i, row[0], row[2])
            for part, blob in parts:
                if part in wanted:
                    built.setdefault(part, []).append(blob)
            if self.base_time(row[0]) + self.span_s <= now_s:
                puts.append(ColumnsPut(row[0], generation[row[0]], parts))
        seen = {row[0] for row in packed}
        now_closed = [ColumnsPut(key, number, []) for key, number in dirty
                      if key not in seen and self.base_time(key) + self.span_s <= now_s]
        columns.put_columns(puts + now_closed)
        return ({part: b"".join(found) for part, found in built.items()}, loose)

    def _decoded_kept(self, packed: list[Packed]) -> list[tuple[bytes, RollupRow]]:
        """Decode, and keep the closed, settled rows in the cache."""
        decoded = self.decode(packed, keep=True)
        if self.cache is not None and decoded:
            now_ms = hour_cache.clock_ms()
            kept = [(key, row) for key, row in decoded if row.kept
                    and hour_cache.keepable(self.base_time(key), self.span_s, row.stamp, now_ms)]
            if kept:
                self.cache.put_many(self.space, kept)
                _SPACES_KEPT.add(self.space)
        return decoded

    def decode(self, packed: list[Packed], keep: bool) -> list[tuple[bytes, RollupRow]]:
        """Rows' cells decoded in one pass; rows not in the modern layout cell by cell."""
        if not packed:
            return []
        cells = np.fromiter((row[1] for row in packed), np.int64, len(packed))
        q_len = np.fromiter((len(row[3]) for row in packed), np.int64, len(packed))
        modern = q_len == QUALIFIER_BYTES * cells
        # The read's arrays hold the rows series after series, as a query takes them.
        rows = sorted((row for row, ok in zip(packed, modern.tolist()) if ok),
                      key=lambda row: (self.series_key(row[0]), row[0]))
        cells = np.fromiter((row[1] for row in rows), np.int64, len(rows))
        out = dict(self._decode_modern(rows, cells, keep))
        for row, ok in zip(packed, modern.tolist()):
            if not ok or row[0] not in out:
                out[row[0]] = self._decode_cells(row)
        return [(row[0], out[row[0]]) for row in packed]

    def _decode_modern(self, rows: list[Packed], cells: np.ndarray,
                       keep: bool) -> list[tuple[bytes, RollupRow]]:
        """Rows of 3-byte qualifiers; a row whose values do not add up is left out."""
        if not rows:
            return []
        quals = np.frombuffer(b"".join([row[3] for row in rows]), np.uint8).reshape(-1, 3)
        vals = np.frombuffer(b"".join([row[4] for row in rows]), np.uint8)
        row_of = np.repeat(np.arange(len(rows)), cells)
        word = (quals[:, 1].astype(np.int64) << 8) | quals[:, 2]
        flags = word & FLAGS_MASK
        width = (flags & 0x7) + 1
        ends = np.cumsum(width)
        v_len = np.fromiter((len(row[4]) for row in rows), np.int64, len(rows))
        row_first = np.cumsum(cells) - cells
        good = ends[row_first + cells - 1] - (ends[row_first] - width[row_first]) == v_len
        v_start = np.cumsum(v_len) - v_len
        at = v_start[row_of] + (ends - width) - (ends[row_first] - width[row_first])[row_of]
        ids = quals[:, 0] & AGGREGATOR_MASK
        kind = np.full(ids.size, -1, np.int64)  # 0: the value aggregate, 1: count
        kind[ids == self.wanted.value_id] = 0
        if self.wanted.count_id is not None:
            kind[ids == self.wanted.count_id] = 1
        take = (kind >= 0) & good[row_of]
        bases = np.fromiter((self.base_time(row[0]) for row in rows), np.int64, len(rows))
        ts_ms = (bases[row_of] + (word >> FLAG_BITS) * self.interval_s) * 1000
        values = values_of(vals, at, width, flags, take)
        row_of, kind, ts_ms, values = row_of[take], kind[take], ts_ms[take], values[take]
        is_int = (flags[take] & 0x8) == 0
        # Kind-major: every row's value cells, then every row's count cells.
        order_key = kind * len(rows) + row_of
        if order_key.size > 1 and not _ascending(order_key, ts_ms):
            order = np.lexsort((ts_ms, order_key))
            ts_ms, values, is_int, order_key = (ts_ms[order], values[order], is_int[order],
                                                order_key[order])
        whole = DecodedRow(ts_ms, values, is_int)
        block = Block(whole) if keep else None
        cuts = np.searchsorted(order_key, np.arange(2 * len(rows) + 1)).tolist()
        n = len(rows)
        stamps = [self._stamp(row) for row in rows]
        return [(row[0], RollupRow(stamps[i], whole, _weight(row), block,
                                   spans=(cuts[i], cuts[i + 1], cuts[n + i], cuts[n + i + 1]),
                                   kept=keep))
                for i, row in enumerate(rows) if good[i]]

    def _decode_cells(self, row: Packed) -> RollupRow:
        """A row decoded cell by cell (old layouts); never kept. Its cells come one by one
        from storage: the joined form cannot be cut when qualifier lengths differ."""
        key = row[0]
        cells = self.table.row(key, columns=[b"t"])
        base_s = self.base_time(key)
        picked: list[list[tuple[int, float, bool]]] = [[], []]
        for column, value in cells.items():
            qualifier = column[COLUMN_PREFIX_BYTES:]
            if not any(qualifier.startswith(p) for p in self.prefixes):
                continue
            cell = decode_rollup_cell(qualifier, value, base_s, self.interval_s)
            if cell is None:
                continue
            kind = self._kind(cell.aggregator_id, cell.prefix)
            if kind is not None:
                picked[kind].append((cell.ts_ms, cell.value, cell.is_int))
        points = sorted(picked[0]) + sorted(picked[1])
        whole = DecodedRow(np.array([p[0] for p in points], np.int64),
                           np.array([p[1] for p in points], np.float64),
                           np.array([p[2] for p in points], bool))
        split = len(picked[0])
        return RollupRow(self._stamp(row), whole, _weight(row), None,
                         spans=(0, split, split, len(points)), kept=False)

    def _kind(self, aggregator_id: int | None, prefix: str | None) -> int | None:
        if aggregator_id is not None:
            if aggregator_id == self.wanted.value_id:
                return 0
            return 1 if aggregator_id == self.wanted.count_id else None
        if prefix == self.wanted.value_name:
            return 0
        return 1 if prefix == "count" and self.wanted.count_id is not None else None


# Key spaces this process has kept rows under: a read of another one skips the stamp read
# (nothing to validate) and reads the values at once, with their stamps in the same scan.
_SPACES_KEPT: set[str] = set()


def _series_rows(whole: rollup_columns.Joined) -> list[tuple[bytes, RollupRow]]:
    """One row per series of a joined block (never kept: no stamp of its own)."""
    return [(key, RollupRow((NO_COUNT, 0), whole.whole, int(stored), None,
                            spans=(int(a), int(b), int(c), int(d)), kept=False, rows=int(rows)))
            for key, (a, b, c, d), rows, stored in zip(
                whole.first_keys, whole.spans.tolist(), whole.rows.tolist(),
                whole.stored_bytes.tolist())]


def packed_from_cells(key: bytes, cells: Row) -> Packed:
    """A row fetched as ``{column: value}`` (by key) in the joined form."""
    data = [(column[COLUMN_PREFIX_BYTES:], value) for column, value in cells.items()
            if column.startswith(b"t:")]
    return (key, len(data), 0, b"".join(q for q, _ in data), b"".join(v for _, v in data))


def _weight(row: Packed) -> int:
    """The stored bytes of the cells read, as the raw reader weighs cells (key, column and
    value per cell)."""
    return row[1] * (len(row[0]) + COLUMN_PREFIX_BYTES) + len(row[3]) + len(row[4])


def _ascending(group: np.ndarray, ts_ms: np.ndarray) -> bool:
    """Cells sorted by group, then strictly by time within a group."""
    step = np.diff(group)
    return bool(np.all(step >= 0) and np.all((step > 0) | (np.diff(ts_ms) > 0)))
