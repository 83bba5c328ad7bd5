"""A ``KeyValueCodec`` cell block as ``hbase_reply.ReplyRow`` rows, cut in bulk with numpy.

Each cell (``KeyValueCodec`` writes no tags): a 4-byte length of the rest, the key's length (4
bytes), the value's length (4 bytes), the key = row length (2 bytes), row, family length (1
byte), family, qualifier, timestamp (8 bytes), type (1 byte); then the value. All integers are
big-endian. ``ScanResponse.cells_per_result`` says how many cells each row has.

The cells' offsets: each cell's length says where the next starts, a walk of ~0.35 µs a
cell; runs of cells with keys of one length are instead found in bulk from every place whose
bytes read as such a cell's head (``_KeyShape``: ~0.1 µs a cell; every place that reads as
any cell's head measured no faster than the walk). Columns (``family:qualifier``), values and
timestamps are then gathered for all cells at once.
"""

from __future__ import annotations

import struct

import numpy as np

from app.storage.codec_bulk import gather
from app.storage.hbase_reply import ReplyRow

_LENGTH = struct.Struct(">I")
_CELL_HEAD = 12  # total length, key length, value length
_KEY_FIXED = 2 + 1 + 8 + 1  # row length, family length, timestamp, type


class CellBlockError(ValueError):
    """A cell block that does not hold the cells its response announced."""


# Fewer cells are walked one by one (numpy's fixed cost is more than the walk's per cell).
BULK_CELLS = 64
# Cells walked in a row before the cells of the next one's key length are sought in bulk.
WALKED_BEFORE_SEARCH = 16
MAX_KEY_SHAPES = 4  # key lengths sought per block, at most


def _offsets(block: bytes, expected: int) -> np.ndarray:
    """Where each of the ``expected`` cells starts: each cell's length says where the next
    starts. Runs of cells of one key length (a row key, family and qualifier of one length:
    the rows of one cell per point, of compacted cells) are cut in bulk (:class:`_KeyShape`);
    any other cell is walked to."""
    if expected < BULK_CELLS:
        return np.array(_walk(block, 0, expected), np.int64)
    shapes: dict[int, _KeyShape | None] = {}
    pieces: list[np.ndarray] = []
    walked: list[int] = []
    pos, index, end = 0, 0, len(block)
    walked_in_row = WALKED_BEFORE_SEARCH
    while index < expected:
        if pos + _CELL_HEAD > end:
            raise CellBlockError(f"cell block ends after {index} of {expected} cells")
        run = None
        if walked_in_row == 0 or walked_in_row >= WALKED_BEFORE_SEARCH:
            key_bytes = _LENGTH.unpack_from(block, pos + 4)[0]
            if (key_bytes not in shapes and walked_in_row and len(shapes) < MAX_KEY_SHAPES):
                shapes[key_bytes] = _KeyShape.find(block, key_bytes)
            shape = shapes.get(key_bytes)
            run = shape.run(pos, expected - index) if shape is not None else None
        if run is None:
            walked.append(pos)
            pos += 4 + _LENGTH.unpack_from(block, pos)[0]
            index += 1
            walked_in_row = 1 if walked_in_row >= WALKED_BEFORE_SEARCH else walked_in_row + 1
            continue
        starts, pos = run
        pieces += [np.array(walked, np.int64), starts]
        walked = []
        index += len(starts)
        walked_in_row = 0
    if pos != end:
        raise CellBlockError(f"cell block has {end - pos} bytes after its {expected} cells")
    return np.concatenate([*pieces, np.array(walked, np.int64)])


def _walk(block: bytes, pos: int, expected: int) -> list[int]:
    """The cells' offsets from ``pos``, one by one (the whole block)."""
    unpack = _LENGTH.unpack_from
    offsets = [0] * expected
    end = len(block)
    for index in range(expected):
        if pos + _CELL_HEAD > end:
            raise CellBlockError(f"cell block ends after {index} of {expected} cells")
        offsets[index] = pos
        pos += 4 + unpack(block, pos)[0]
    if pos != end:
        raise CellBlockError(f"cell block has {end - pos} bytes after its {expected} cells")
    return offsets


class _KeyShape:
    """Every place of a block that reads as a cell head with a key of ``key_bytes`` (the key
    length there, a total length of the key and value lengths that follow), and the runs of
    them that chain (each ending where the next starts). A place inside a cell that only
    looks like a head breaks a run; a run is taken from a cell's true start only, so each of
    its cells is where the walk would find it."""

    __slots__ = ("starts", "ends", "breaks")

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts = starts
        self.ends = ends
        self.breaks = np.flatnonzero(ends[:-1] != starts[1:])  # a run's last cell

    @classmethod
    def find(cls, block: bytes, key_bytes: int) -> _KeyShape | None:
        if not 0 < key_bytes < 256:  # sought by its low byte (data keys are ~30 bytes)
            return None
        room = len(block) - _CELL_HEAD + 1  # places with room for a cell's head
        starts = np.flatnonzero(np.frombuffer(block, np.uint8, room, 7) == key_bytes)
        words = _at(block, ">u4")
        starts = starts[words[starts + 4] == key_bytes]
        totals = words[starts].astype(np.int64)
        whole = totals == 8 + key_bytes + words[starts + 8]
        return cls(starts[whole], starts[whole] + 4 + totals[whole])

    def run(self, pos: int, most: int) -> tuple[np.ndarray, int] | None:
        """The starts of the run of at most ``most`` cells from ``pos`` (a cell's start),
        and where its last ends; None when no run starts there."""
        first = int(np.searchsorted(self.starts, pos))
        if first == len(self.starts) or int(self.starts[first]) != pos:
            return None
        at = int(np.searchsorted(self.breaks, first))
        last = int(self.breaks[at]) if at < len(self.breaks) else len(self.starts) - 1
        last = min(last, first + most - 1)
        return self.starts[first:last + 1], int(self.ends[last])


def _at(block: bytes, dtype: str) -> np.ndarray:
    """``block`` read as big-endian integers of ``dtype`` at every byte offset (a view)."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(len(block) - size + 1, 0),), dtype, block, 0, (1,))


def _columns(data: np.ndarray, family_starts: np.ndarray, family_sizes: np.ndarray,
             qualifier_sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``family:qualifier`` of every cell joined (family and qualifier are adjacent in the
    key; the colon is a byte appended to ``data``), and where each ends."""
    sizes = family_sizes + 1 + qualifier_sizes
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    within = np.arange(total, dtype=np.int64) - np.repeat(ends - sizes, sizes)
    family_each = np.repeat(family_sizes, sizes)
    index = np.repeat(family_starts, sizes) + within - (within > family_each)
    index[within == family_each] = len(data) - 1
    return data[index], ends


def rows(block: bytes, cells_per_row: list[int]) -> list[ReplyRow]:
    """The rows of a scan response's cell block."""
    count = sum(cells_per_row)
    if count == 0:
        return []
    offsets = _offsets(block, count)
    data = np.frombuffer(block + b":", np.uint8)
    words = _at(block, ">u4")
    key_sizes = words[offsets + 4].astype(np.int64)
    value_sizes = words[offsets + 8].astype(np.int64)
    if ((words[offsets] != 8 + key_sizes + value_sizes).any()
            or (key_sizes < _KEY_FIXED).any()):
        raise CellBlockError("a cell's length is not its key's and value's")
    row_sizes = _at(block, ">u2")[offsets + _CELL_HEAD].astype(np.int64)
    family_size_at = offsets + _CELL_HEAD + 2 + row_sizes
    family_sizes = data[family_size_at].astype(np.int64)
    qualifier_sizes = key_sizes - _KEY_FIXED - row_sizes - family_sizes
    if (qualifier_sizes < 0).any():
        raise CellBlockError("a cell's key is shorter than its parts")
    key_ends = offsets + _CELL_HEAD + key_sizes
    stamps = _at(block, ">i8")[key_ends - 9]
    columns, column_ends = _columns(data, family_size_at + 1, family_sizes, qualifier_sizes)
    values = gather(block, key_ends, value_sizes)
    value_ends = np.cumsum(value_sizes)
    return _split_rows(block, offsets, row_sizes, cells_per_row, columns.tobytes(),
                       column_ends, values, value_ends, stamps)


def _split_rows(block: bytes, offsets: np.ndarray, row_sizes: np.ndarray,
                cells_per_row: list[int], columns: bytes, column_ends: np.ndarray,
                values: bytes, value_ends: np.ndarray, stamps: np.ndarray) -> list[ReplyRow]:
    firsts = np.cumsum([0, *cells_per_row[:-1]])
    nonempty = [n > 0 for n in cells_per_row]
    newest = np.zeros(len(cells_per_row), np.int64)
    if any(nonempty):
        starts = firsts[nonempty]
        newest[nonempty] = np.maximum.reduceat(stamps, starts)
    column_base = np.concatenate([[0], column_ends])
    value_base = np.concatenate([[0], value_ends])
    out: list[ReplyRow] = []
    for index, first in enumerate(firsts.tolist()):
        n = cells_per_row[index]
        if n == 0:
            continue
        last = first + n
        row_at = int(offsets[first]) + _CELL_HEAD + 2
        row = block[row_at:row_at + int(row_sizes[first])]
        c0, v0 = int(column_base[first]), int(value_base[first])
        out.append(ReplyRow(row, columns[c0:int(column_base[last])],
                            column_ends[first:last] - c0, values[v0:int(value_base[last])],
                            value_ends[first:last] - v0, int(newest[index])))
    return out
