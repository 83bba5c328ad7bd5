"""Data cells staged as a columnar block, merged into ``cells`` compacted per row.

A :class:`~app.storage.base.CellBlock` (the writer's batch of data cells: unique row keys,
each cell's row index, qualifiers and values back to back) is staged as ONE row of
``staged_batches`` without a Python object per cell:

* ``data``: each cell's row key, qualifier and value bytes back to back, gathered by numpy;
* ``cell_index``: a JSON array of one integer per cell, ``start << 20 | row_len << 12 |
  qualifier_len << 8 | value_len`` (``start``: the cell's first byte in ``data``).

The merge cuts the cells back out with numpy, the blocks of a merge step all at once
(:func:`block_columns`: a Python step per cell for its row key only), and compacts them per
row with the other staged cells of its step (``sqlite_merge.MergeChunk``), in arrival order:
of a cell written twice the later one stays, as with ``put_many``. (Until issue 26's merge
compaction, a block was merged by one ``INSERT ... SELECT ... FROM json_each(cell_index)``:
a SQL row per cell.)

Only blocks whose every cell fits the index (row keys under 256 bytes, qualifiers under 16,
values 1 to 255 bytes) and whose qualifiers are too short for a packed form
(``sqlite_pack.KEY_MIN_BYTES``) are staged so; others go through ``put_many``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt
import orjson

from app.storage.base import CellBlock
from app.storage.codec_bulk import gather
from app.storage.sqlite_pack import KEY_MIN_BYTES

MAX_ROW_BYTES = 255
MAX_QUALIFIER_BYTES = min(15, KEY_MIN_BYTES - 1)
MAX_VALUE_BYTES = 255
_FIELD_WEIGHTS = np.array([1 << 12, 1 << 8, 1], np.int64)  # row_len, qualifier_len, value_len


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
    count, row_count = len(block.row_of), len(block.rows)
    row_lengths = np.fromiter(map(len, block.rows), np.int64, row_count)
    # Per cell (a line each) its three segments, row key, qualifier and value: their lengths,
    # and where each starts in the source (the row keys, qualifiers and values concatenated).
    # Few numpy calls: for a block of 50 cells each costs more than its work.
    lengths = np.empty((count, 3), np.int64)
    lengths[:, 0] = row_lengths[block.row_of]
    lengths[:, 1] = block.qualifier_lengths
    lengths[:, 2] = block.value_lengths
    source_lengths = np.concatenate((row_lengths, block.qualifier_lengths, block.value_lengths))
    source_starts = source_lengths.cumsum() - source_lengths
    starts = np.empty((count, 3), np.int64)
    starts[:, 0] = source_starts[block.row_of]
    starts[:, 1:] = source_starts[row_count:].reshape(2, count).T
    segment_len = lengths.ravel()
    segment_end = segment_len.cumsum()
    # Each output byte's source byte: a segment's offset repeated over its length, plus i.
    gather = np.repeat(starts.ravel() - (segment_end - segment_len), segment_len)
    gather += np.arange(int(segment_end[-1]), dtype=np.int64)
    source = np.frombuffer(b"".join(block.rows) + block.qualifiers + block.values, np.uint8)
    cell_end = segment_end[2::3]
    # The fields do not overlap (row_len < 256, qualifier_len < 16, value_len < 256): the
    # shifted lengths of the module's doc are one weighted sum.
    index: npt.NDArray[np.int64] = ((cell_end - lengths.sum(1)) << 20) + lengths @ _FIELD_WEIGHTS
    text = orjson.dumps(index, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return source[gather].tobytes(), text


def block_columns(blobs: Sequence[bytes], cell_indexes: Sequence[str]
                  ) -> tuple[list[bytes], bytes, npt.NDArray[np.int64], bytes,
                             npt.NDArray[np.int64], list[int]]:
    """Staged blocks' cells, columnar and in order: each cell's row key, the qualifiers and
    the values back to back with their lengths (what the merge compacts; a Python step per
    cell only for the row key), and each block's number of cells. All blocks at once: numpy's
    fixed cost is paid once per merge step, not once per block (a block is often one
    ``/api/put`` body of 50 points)."""
    entries = list(map(orjson.loads, cell_indexes))
    counts = list(map(len, entries))
    index = np.fromiter(chain.from_iterable(entries), np.int64, sum(counts))
    sizes = np.fromiter(map(len, blobs), np.int64, len(blobs))
    data = b"".join(blobs)
    starts = (index >> 20) + np.repeat(np.cumsum(sizes) - sizes, counts)  # in ``data``
    row_lengths, q_lengths, v_lengths = index >> 12 & 255, index >> 8 & 15, index & 255
    q_starts = starts + row_lengths
    rows = [data[start:end] for start, end in zip(starts.tolist(), q_starts.tolist())]
    return (rows, gather(data, q_starts, q_lengths), q_lengths,
            gather(data, q_starts + q_lengths, v_lengths), v_lengths, counts)


def block_records(table: str, written_ms: int, data: bytes, cell_index: str
                  ) -> list[tuple[str, bytes, str, bytes, bytes, int]]:
    """A staged block's cells as rows of ``cells``, as staged, decoded in Python (for
    inspection and tests; the merge reads :func:`block_columns`)."""
    records = []
    for entry in json.loads(cell_index):
        start, row_len, q_len, v_len = entry >> 20, entry >> 12 & 255, entry >> 8 & 15, entry & 255
        q_at = start + row_len
        records.append((table, data[start:q_at], "t", data[q_at:q_at + q_len],
                        data[q_at + q_len:q_at + q_len + v_len], written_ms))
    return records
