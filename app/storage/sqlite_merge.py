"""The staging log's merge into ``cells``: a merge step's staged cells in the order they go in,
the single data points of blocks compacted per row (:class:`MergeChunk`), and the cells as
rows of ``cells`` (:data:`Record`). sqlite_write.py reads the staged batches and writes what
this gives; nothing here does IO but the floors' look-ups.
"""

from __future__ import annotations

import sqlite3
from itertools import repeat

import numpy as np
import numpy.typing as npt

from app.errors import StorageError
from app.storage.codec_bulk import compact_single_cells, gather, single_cell_mask
from app.storage.sqlite_block import block_columns

Record = tuple[str, bytes, str, bytes, bytes, int]
"""A cell as stored: ``(tbl, row, family, qualifier, value, ts)``."""
PACKED_FAMILY = "t"  # data (and rollup) cells: compacted hours are what packing shrinks


def as_records(table: str, rows: list[bytes], columns: list[bytes], values: list[bytes],
             ts: int) -> list[Record]:
    """Cells given field by field, as rows of ``cells``."""
    if all(column[:2] == b"t:" for column in columns):  # data cells: no call per cell
        return list(zip(repeat(table), rows, repeat("t"), [c[2:] for c in columns], values,
                        repeat(ts)))
    return [(table, row, *split_qualified(column), value, ts)
            for row, column, value in zip(rows, columns, values)]


def split_qualified(column: bytes) -> tuple[str, bytes]:
    """``b"t:q"`` -> ``("t", b"q")``; a column must name its qualifier."""
    family, sep, qualifier = column.partition(b":")
    if not sep:
        raise StorageError(f"A cell needs family:qualifier, got {column!r}")
    return family.decode(), qualifier


class Floors:
    """Per table, the newest write time of a cell already in ``cells`` (``cell_marks``),
    read once per merge and raised as the merge's cells go in."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._newest_ms: dict[str, int] = {}
        self._raised: set[str] = set()

    def get(self, table: str) -> int:
        if table not in self._newest_ms:
            found = self._db.execute("SELECT newest_ms FROM cell_marks WHERE tbl = ?",
                                     (table,)).fetchone()
            self._newest_ms[table] = int(found[0]) if found else 0
        return self._newest_ms[table]

    def raise_to(self, table: str, newest_ms: int) -> None:
        if newest_ms > self.get(table):
            self._newest_ms[table] = newest_ms
            self._raised.add(table)

    def save(self, db: sqlite3.Connection) -> None:
        for table in self._raised:
            mark_cells(db, table, self._newest_ms[table])


def mark_cells(db: sqlite3.Connection, table: str, written_ms: int) -> None:
    """Cells written to ``table``'s rows of ``cells`` at ``written_ms`` (in the caller's
    transaction): the merge's floor (:class:`MergeChunk`)."""
    db.execute("INSERT INTO cell_marks (tbl, newest_ms) VALUES (?, ?) ON CONFLICT (tbl)"
               " DO UPDATE SET newest_ms = max(newest_ms, excluded.newest_ms)",
               (table, written_ms))


Sequenced = tuple[int, int, Record]
"""A record with its batch's arrival (``seq``) and place in the batch: the merge's order."""


class MergeChunk:
    """The staged cells of one merge step, in the order they go into ``cells``; the cells of
    blocks compacted per row.

    Inserting a SQL row (and a ``cells_stamp`` entry) per point was most of the ingest's CPU
    and ~90 bytes a point on disk (docs/performance.md). The single data cells of a chunk's
    blocks (the writer's points: 2-byte second or 4-byte millisecond qualifiers whose flags
    give the value's length) are compacted per row into ONE cell of OpenTSDB's compacted
    form by ``codec_bulk.compact_single_cells`` (the bytes ``compact_cells`` writes); a row
    with one point keeps its single cell, byte for byte. A ``put_many`` batch is HBase's put,
    which every caller of every table uses and whose columns it may read, delete or replace
    by name: its cells go in as they were put, and so do the block cells of a row that such a
    batch of the same chunk wrote data cells to (their order against each other is the
    arrival order, as before).

    **Write times.** A compacted cell's points were staged at different times; it takes the
    newest of them. Every cell already in ``cells`` is older than or as old as every staged
    cell (a write to ``cells`` merges the staging first), so the compacted cell still ranks
    above every cell its points replace (``codec_cells.cell_rank``: newest write first), the
    hour cache's row stamps and range stamps still grow with every merge, and compaction's
    ``delete(up_to_ms=)`` still keeps what it did not read. One case is not: a cell already
    in ``cells`` written in the very millisecond of the compacted cell's newest point, where
    ``cell_rank`` would prefer a single cell to a compacted one (the kind), whatever their
    order. So a row whose compacted cell would be no newer than the newest cell already in
    the table (``cell_marks``, kept by merges and by direct writes) keeps its points as
    single cells, as before. Splitting by write time instead would leave a cell per batch:
    a collector's batch holds one point per series.

    Several cells of one row may then hold one timestamp (a point sent again after its row
    was merged): readers keep the newest write (``cell_rank``), compaction and ``fsck
    --last-write-wins`` too; OpenTSDB reads such rows and its compaction merges them.
    """

    def __init__(self) -> None:
        self._blocks: dict[str, _BlockCells] = {}
        self._put: list[Sequenced] = []  # put_many's cells
        self._put_rows: dict[str, set[bytes]] = {}  # rows put_many wrote data cells to

    def add_batch(self, seq: int, table: str, written_ms: int, rows: list[bytes],
                  columns: list[bytes], values: list[bytes]) -> None:
        """A ``put_many`` batch (:func:`unpack_cells`)."""
        records = as_records(table, rows, columns, values, written_ms)
        self._put += zip(repeat(seq), range(len(records)), records)
        self._put_rows.setdefault(table, set()).update(
            record[1] for record in records if record[2] == PACKED_FAMILY)

    def add_block(self, seq: int, table: str, written_ms: int, data: bytes,
                  cell_index: str) -> None:
        """A staged block (sqlite_block.py), cut out of its blob with the chunk's others."""
        found = self._blocks.get(table)
        if found is None:
            found = self._blocks[table] = _BlockCells()
        found.add(seq, written_ms, data, cell_index)

    def records(self, floors: Floors) -> list[Record]:
        """The chunk's rows of ``cells`` in the order to insert them: by row for locality
        (each page of ``cells`` touched once), then in arrival order (of a cell staged twice
        the later one replaces the other)."""
        out = self._put
        for table, cells in self._blocks.items():  # each against the cells before the chunk
            out += cells.records(table, floors.get(table), self._put_rows.get(table, set()))
        for table, cells in self._blocks.items():
            floors.raise_to(table, cells.newest_ms)
        for record in (sequenced[2] for sequenced in self._put):
            floors.raise_to(record[0], record[5])
        out.sort(key=_row_then_arrival)
        return [sequenced[2] for sequenced in out]


def _row_then_arrival(sequenced: Sequenced) -> tuple[bytes, int, int]:
    return sequenced[2][1], sequenced[0], sequenced[1]


class _BlockCells:
    """One table's staged blocks of a chunk, kept as staged until :meth:`records` cuts them
    all out at once (``block_columns``): each block's blob, cell index, write time and
    arrival."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.cell_indexes: list[str] = []
        self.block_written: list[int] = []
        self.block_seqs: list[int] = []
        self.newest_ms = 0

    def add(self, seq: int, written_ms: int, data: bytes, cell_index: str) -> None:
        self.blobs.append(data)
        self.cell_indexes.append(cell_index)
        self.block_written.append(written_ms)
        self.block_seqs.append(seq)
        self.newest_ms = max(self.newest_ms, written_ms)

    def records(self, table: str, floor_ms: int, put_rows: set[bytes]) -> list[Sequenced]:
        """Per row, its cells compacted; as staged, the cells of a row no compacted cell may
        hold (``put_rows``: rows ``put_many`` wrote to in this chunk; a compacted cell no
        newer than ``floor_ms``: :class:`MergeChunk`) and the cells that are no single data
        points (none from pytsd's writer)."""
        rows, qualifiers, q_lengths, values, v_lengths, counts = block_columns(
            self.blobs, self.cell_indexes)
        written = np.repeat(np.array(self.block_written, np.int64), counts)
        seqs = np.repeat(np.array(self.block_seqs, np.int64), counts)
        keys = list(dict.fromkeys(rows))  # each row once, in order of first appearance
        ids = dict(zip(keys, range(len(keys))))
        row_ids = np.fromiter(map(ids.__getitem__, rows), np.int64, len(rows))
        keep_single = ~single_cell_mask(qualifiers, q_lengths, v_lengths)
        if put_rows:
            keep_single |= np.isin(row_ids, [ids[row] for row in put_rows if row in ids])
        together = ~keep_single
        compacted = compact_single_cells(
            row_ids[together], _select(qualifiers, q_lengths, together), q_lengths[together],
            _select(values, v_lengths, together), v_lengths[together], written[together])
        out: list[Sequenced] = []
        risky: list[int] = []
        for row_id, qualifier, value, newest, points in zip(*compacted):
            if points > 1 and newest <= floor_ms:
                risky.append(row_id)
            else:  # no other cell of the chunk has its key: its place in the row is any
                out.append((0, 0, (table, keys[row_id], PACKED_FAMILY, qualifier, value,
                                   newest)))
        if risky:
            keep_single |= np.isin(row_ids, risky)
        if keep_single.any():
            q_ends, v_ends = np.cumsum(q_lengths).tolist(), np.cumsum(v_lengths).tolist()
            for i in np.flatnonzero(keep_single).tolist():
                q_from, v_from = q_ends[i] - int(q_lengths[i]), v_ends[i] - int(v_lengths[i])
                out.append((int(seqs[i]), i, (table, rows[i], PACKED_FAMILY,
                                              qualifiers[q_from:q_ends[i]],
                                              values[v_from:v_ends[i]], int(written[i]))))
        return out


def _select(joined: bytes, lengths: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_]
            ) -> bytes:
    """The segments of ``joined`` (``lengths`` long, back to back) that ``mask`` keeps."""
    if mask.all():
        return joined
    starts = np.cumsum(lengths) - lengths
    return gather(joined, starts[mask], lengths[mask])
