"""Data cells staged as a columnar block, and merged into ``cells`` by SQLite alone.

A :class:`~app.storage.base.CellBlock` (the writer's batch of data cells: unique row keys,
each cell's row index, qualifiers and values back to back) is staged as ONE row of
``staged_batches`` without a Python object per cell:

* ``data``: each cell's row key, qualifier and value bytes back to back, gathered by numpy;
* ``cell_index``: a JSON array of one integer per cell, ``start << 20 | row_len << 12 |
  qualifier_len << 8 | value_len`` (``start``: the cell's first byte in ``data``).

Its merge is one ``INSERT OR REPLACE ... SELECT ... FROM json_each(cell_index)`` that cuts
each cell out of ``data`` with ``substr``: the per-cell work is SQLite's B-tree insert, not
Python binding six parameters per cell (a merge's cost per cell fell by about half:
docs/performance.md). ``json_each`` yields the cells in array order and each replaces an
earlier cell of its key, so of a cell written twice the later one stays, as with
``put_many``. The cells are the same rows of ``cells`` a ``put_many`` stages: readers see no
difference.

Only blocks whose every cell fits the index (row keys under 256 bytes, qualifiers under 16,
values 1 to 255 bytes) and whose qualifiers are too short for a packed form
(``sqlite_pack.KEY_MIN_BYTES``) are staged so; others go through ``put_many``.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import numpy.typing as npt

from app.storage.base import CellBlock
from app.storage.sqlite_pack import KEY_MIN_BYTES

MAX_ROW_BYTES = 255
MAX_QUALIFIER_BYTES = min(15, KEY_MIN_BYTES - 1)
MAX_VALUE_BYTES = 255
_START = "(value >> 20)"
_ROW_LEN = "((value >> 12) & 255)"
_Q_LEN = "((value >> 8) & 15)"
_V_LEN = "(value & 255)"
MERGE_BLOCK = (
    "INSERT OR REPLACE INTO cells (tbl, row, family, qualifier, value, ts) SELECT ?1,"
    f" substr(?2, {_START} + 1, {_ROW_LEN}), 't',"
    f" substr(?2, {_START} + {_ROW_LEN} + 1, {_Q_LEN}),"
    f" substr(?2, {_START} + {_ROW_LEN} + {_Q_LEN} + 1, {_V_LEN}), ?3 FROM json_each(?4)")


def fits(block: CellBlock) -> bool:
    """Whether every cell of ``block`` fits the index's fields."""
    if not len(block):
        return False
    longest_row = max(map(len, block.rows))
    return (longest_row <= MAX_ROW_BYTES
            and int(block.qualifier_lengths.max()) <= MAX_QUALIFIER_BYTES
            and int(block.qualifier_lengths.min()) > 0
            and int(block.value_lengths.max()) <= MAX_VALUE_BYTES
            and int(block.value_lengths.min()) > 0)


def block_blob(block: CellBlock) -> tuple[bytes, str]:
    """``(data, cell_index)`` of a block that :func:`fits`, as staged (the module's doc)."""
    row_lengths = np.fromiter(map(len, block.rows), np.int64, len(block.rows))
    row_starts = np.cumsum(row_lengths) - row_lengths
    rows = b"".join(block.rows)
    row_len = row_lengths[block.row_of]
    q_len, v_len = block.qualifier_lengths, block.value_lengths
    # Where each cell's three fields are in the sources (rows, qualifiers, values concatenated)
    q_source = len(rows) + np.cumsum(q_len) - q_len
    v_source = len(rows) + len(block.qualifiers) + np.cumsum(v_len) - v_len
    segment_source = np.stack([row_starts[block.row_of], q_source, v_source], 1).ravel()
    segment_len = np.stack([row_len, q_len, v_len], 1).ravel()
    segment_end = np.cumsum(segment_len)
    total = int(segment_end[-1])
    # Each output byte's source byte: a segment's offset repeated over its length, plus i.
    gather = np.repeat(segment_source - (segment_end - segment_len), segment_len)
    gather += np.arange(total, dtype=np.int64)
    source = np.frombuffer(rows + block.qualifiers + block.values, np.uint8)
    cell_len = row_len + q_len + v_len
    starts = np.cumsum(cell_len) - cell_len
    index: npt.NDArray[np.int64] = (starts << 20) | (row_len << 12) | (q_len << 8) | v_len
    return source[gather].tobytes(), "[" + ",".join(map(str, index.tolist())) + "]"


def merge_block(db: sqlite3.Connection, table: str, written_ms: int, data: bytes,
                cell_index: str) -> None:
    """Insert a staged block's cells into ``cells`` (in the caller's transaction)."""
    db.execute(MERGE_BLOCK, (table, data, written_ms, cell_index))


def block_records(table: str, written_ms: int, data: bytes, cell_index: str
                  ) -> list[tuple[str, bytes, str, bytes, bytes, int]]:
    """A staged block's cells as rows of ``cells``, decoded in Python: what
    :func:`merge_block` inserts (for inspection and tests; the merge does not call it)."""
    records = []
    for entry in json.loads(cell_index):
        start, row_len, q_len, v_len = entry >> 20, entry >> 12 & 255, entry >> 8 & 15, entry & 255
        q_at = start + row_len
        records.append((table, data[start:q_at], "t", data[q_at:q_at + q_len],
                        data[q_at + q_len:q_at + q_len + v_len], written_ms))
    return records
