"""Rollup rows from the columns the embedded store keeps beside them, joined per series.

``SqliteTable.scan_columns`` returns a key range's rows of one aggregate as four joined
arrays (``app.storage.codec_rollup``'s columnar form: heads, offsets, doubles, integer flags)
plus their keys; here they become what ``RollupReader`` combines: one block holding every
series' value cells, then every series' count cells (series after series, each in time
order), and one span per series, without a Python step per cell and only a few per row
(the row keys, to number the series).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.engine.flat import ranges_to_index
from app.storage.codec_decode import DecodedRow
from app.storage.codec_rollup import HEAD_DTYPE, column_bytes, column_padding

HEAD_BYTES = HEAD_DTYPE.itemsize
COLUMN_PREFIX_BYTES = 2  # "t:" in a stored cell's weight
QUALIFIER_BYTES = 3


@dataclass(frozen=True, slots=True)
class Part:
    """One aggregate's rows read from columns."""

    rows: bytes  # the row keys, joined
    row_len: np.ndarray  # per row
    cells: np.ndarray  # per row
    weight: np.ndarray  # per row: stored bytes of its cells, as the raw reader weighs them
    newest: np.ndarray  # per row: the newest write time of its cells (its cache stamp)
    # Per cell: intervals from its row's base time, value, integer flag. When every row has
    # ``width`` cells, matrices of a row each (views of the blob: no copy); else flat.
    offsets: np.ndarray
    values: np.ndarray
    is_int: np.ndarray
    width: int = 0


@dataclass(frozen=True, slots=True)
class Joined:
    """Every series of a read: its first row key, its spans in ``whole`` (value cells, then
    count cells), its stored rows and bytes."""

    whole: DecodedRow
    first_keys: list[bytes]
    spans: np.ndarray  # (series, 4)
    rows: np.ndarray
    stored_bytes: np.ndarray


def part_of(blob: bytes) -> Part:
    """One aggregate's blobs joined (``codec_rollup.column_parts``) as arrays: by reshaping
    when every blob has one key length and cell count, else blob by blob."""
    if not blob:
        return Part(b"", *(np.zeros(0, np.int64),) * 5, np.zeros(0), np.zeros(0, np.bool_))
    if len(blob) < HEAD_BYTES:
        raise ValueError("a row column shorter than its head")
    first = np.frombuffer(blob, HEAD_DTYPE, 1)
    length, cells = int(first["row_len"][0]), int(first["cells"][0])
    size = column_bytes(length, cells)
    if len(blob) % size == 0:
        matrix = np.frombuffer(blob, np.uint8).reshape(-1, size)
        head = np.ascontiguousarray(matrix[:, :HEAD_BYTES]).view(HEAD_DTYPE).ravel()
        if (head["row_len"] == length).all() and (head["cells"] == cells).all():
            at = HEAD_BYTES + length + column_padding(length)
            row_len, count, weight, newest = _weights(head)
            return Part(matrix[:, HEAD_BYTES:HEAD_BYTES + length].tobytes(), row_len, count,
                        weight, newest, matrix[:, at + 8 * cells:at + 10 * cells].view("<u2"),
                        matrix[:, at:at + 8 * cells].view("<f8"),
                        matrix[:, at + 10 * cells:at + 11 * cells].view(np.bool_), cells)
    return _part_by_blob(blob)


def _part_by_blob(blob: bytes) -> Part:
    heads, keys, offsets, values, ints = [], [], [], [], []
    at = 0
    while at < len(blob):
        head = np.frombuffer(blob, HEAD_DTYPE, 1, at)
        length, cells = int(head["row_len"][0]), int(head["cells"][0])
        key_at = at + HEAD_BYTES
        cells_at = key_at + length + column_padding(length)
        heads.append(blob[at:key_at])
        keys.append(blob[key_at:key_at + length])
        values.append(blob[cells_at:cells_at + 8 * cells])
        offsets.append(blob[cells_at + 8 * cells:cells_at + 10 * cells])
        ints.append(blob[cells_at + 10 * cells:cells_at + 11 * cells])
        at += column_bytes(length, cells)
    return _part(np.frombuffer(b"".join(heads), HEAD_DTYPE), b"".join(keys),
                 np.frombuffer(b"".join(offsets), np.uint8),
                 np.frombuffer(b"".join(values), np.uint8),
                 np.frombuffer(b"".join(ints), np.uint8))


def _part(head: np.ndarray, keys: bytes, offsets: np.ndarray, values: np.ndarray,
          ints: np.ndarray) -> Part:
    """A part from its heads and its cells' bytes (runs, row after row)."""
    return Part(keys, *_weights(head), offsets.view("<u2").astype(np.int64), values.view("<f8"),
                ints.view(np.bool_))


def _weights(head: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: key length, cells, stored bytes (key, column name and value per cell), the
    newest write time."""
    row_len = head["row_len"].astype(np.int64)
    cells = head["cells"].astype(np.int64)
    weight = cells * (row_len + COLUMN_PREFIX_BYTES + QUALIFIER_BYTES) + head["value_bytes"]
    return row_len, cells, weight, head["newest_ms"].astype(np.int64)


def joined(parts: list[Part | None], time_at: int, interval_s: int) -> Joined:
    """The value part (and an average's count part) joined per series. ``time_at``: where
    a row key's 4-byte base time starts (the key without it names the series)."""
    present = [p for p in parts if p is not None]
    grid = grid_of(present, time_at)
    if grid is not None:
        return _joined_grid(parts, grid, interval_s)
    series_of, base_s, firsts, key_at = _series(present, time_at)
    count = len(firsts)
    sizes = np.zeros((2, count), np.int64)
    stored = np.zeros(count, np.int64)
    total = sum(int(p.cells.sum()) for p in present)
    # One block: every part's cells gathered straight into it, series after series.
    whole = DecodedRow(np.empty(total, np.int64), np.empty(total, np.float64),
                       np.empty(total, np.bool_))
    at = out = 0
    row_ids: list[np.ndarray] = []
    # Sums and counts written together hold the same rows: one order for both.
    same_rows = all(p.rows == present[0].rows for p in present[1:])
    order = None
    for slot, part in enumerate(parts):
        if part is None:
            continue
        rows = part.cells.size
        sid, base = series_of[at:at + rows], base_s[at:at + rows]
        at += rows
        if order is None or not same_rows:
            order = np.lexsort((base, sid))  # series after series, each in time order
        end = out + int(part.cells.sum())
        if part.width:  # whole rows moved at once
            shape = (rows, part.width)
            ts_ms = whole.ts_ms[out:end].reshape(shape)
            # Rows alike (a block's full rows: broadcast views) need no gathering.
            ts_ms[...] = part.offsets[0] if alike(part.offsets) else part.offsets[order]
            ts_ms *= interval_s * 1000
            ts_ms += base[order, None] * 1000
            np.take(part.values, order, axis=0, out=whole.values[out:end].reshape(shape))
            if alike(part.is_int):
                whole.is_int[out:end].reshape(shape)[...] = part.is_int[0]
            else:
                np.take(part.is_int, order, axis=0, out=whole.is_int[out:end].reshape(shape))
        else:
            gather = _cell_index(part.cells, order)
            ts_ms = whole.ts_ms[out:end]
            np.take(part.offsets, gather, out=ts_ms)
            ts_ms *= interval_s * 1000
            ts_ms += np.repeat(base[order] * 1000, part.cells[order])
            np.take(part.values, gather, out=whole.values[out:end])
            np.take(part.is_int, gather, out=whole.is_int[out:end])
        out = end
        sizes[slot] = np.bincount(sid, weights=part.cells, minlength=count).astype(np.int64)
        stored += np.bincount(sid, weights=part.weight, minlength=count).astype(np.int64)
        if not same_rows or not row_ids:
            row_ids.append(sid << 32 | base)
    ends = np.cumsum(sizes, axis=1)
    total_values = int(ends[0, -1]) if count else 0
    spans = np.stack([ends[0] - sizes[0], ends[0], total_values + ends[1] - sizes[1],
                      total_values + ends[1]], axis=1)
    if same_rows and row_ids:  # each row once already: no set to take
        rows_per_series = np.bincount(row_ids[0] >> 32, minlength=count)
    else:
        distinct = np.unique(np.concatenate(row_ids)) if row_ids else np.zeros(0, np.int64)
        rows_per_series = np.bincount(distinct >> 32, minlength=count)
    return Joined(whole, [key_at(i) for i in firsts], spans, rows_per_series, stored)


@dataclass(frozen=True, slots=True)
class Grid:
    """Rows that form a (base time x series) grid: runs of rows, one base time each, every
    run the same series in key order (the rows of whole blocks, then the ends read row by
    row: every series has a row of every span, the common case)."""

    series: int
    base_s: np.ndarray  # per run, in time order
    position: np.ndarray | None  # per run as the rows hold them: its place in time (None: as is)
    keys: bytes  # the earliest run's row keys: each series' first (smallest) key
    length: int  # of a row key

    def first_keys(self) -> list[bytes]:
        """Each series' first row key, in key order."""
        length = self.length
        return [self.keys[i * length:(i + 1) * length] for i in range(self.series)]


def grid_of(parts: list[Part], time_at: int) -> Grid | None:
    """The parts' rows as a grid, when they are one (every part the same rows, each a
    matrix: one cell count per row), else None."""
    if not parts or any(not p.width or p.rows != parts[0].rows for p in parts):
        return None
    part = parts[0]
    rows = part.cells.size
    length = int(part.row_len[0])
    if not rows or length < time_at + 4 or not (part.row_len == length).all():
        return None
    keys = np.frombuffer(part.rows, np.uint8).reshape(rows, length)
    base = keys[:, time_at:time_at + 4].copy().view(">u4").ravel().astype(np.int64)
    cuts = np.flatnonzero(base[1:] != base[:-1]) + 1
    series = int(cuts[0]) if cuts.size else rows
    if rows % series or not np.array_equal(cuts, np.arange(series, rows, series)):
        return None
    runs = rows // series
    grid = keys.reshape(runs, series, length)
    if runs > 1 and not ((grid[1:, :, :time_at] == grid[0, :, :time_at]).all()
                         and (grid[1:, :, time_at + 4:] == grid[0, :, time_at + 4:]).all()):
        return None
    if series > 1:  # distinct series in key order (their keys differ outside the base time)
        rest = np.delete(grid[0], np.s_[time_at:time_at + 4], axis=1)
        step = rest[1:].astype(np.int16) - rest[:-1]
        first = np.argmax(step != 0, axis=1)
        if not (step[np.arange(series - 1), first] > 0).all():
            return None
    run_base = base[::series]
    order = np.argsort(run_base, kind="stable")
    ordered = run_base[order]
    if runs > 1 and not (ordered[1:] > ordered[:-1]).all():
        return None
    position = None
    if (order != np.arange(runs)).any():
        position = np.empty(runs, np.int64)
        position[order] = np.arange(runs)
    earliest = int(order[0]) * series * length
    return Grid(series, ordered, position, part.rows[earliest:earliest + series * length],
                 length)


def _joined_grid(parts: list[Part | None], grid: Grid, interval_s: int) -> Joined:
    """:func:`joined` of a grid: each part's (run x series) rows turned series-major by one
    transposing copy, no sort and no gather."""
    n, runs = grid.series, grid.base_s.size
    present = [p for p in parts if p is not None]
    total = sum(p.values.size for p in present)
    whole = DecodedRow(np.empty(total, np.int64), np.empty(total, np.float64),
                       np.empty(total, np.bool_))
    sizes = np.zeros((2, n), np.int64)
    stored = np.zeros(n, np.int64)
    out = 0
    for slot, part in enumerate(parts):
        if part is None:
            continue
        width = part.width
        end = out + part.values.size
        shape = (n, runs, width)
        ts_ms = whole.ts_ms[out:end]
        if alike(part.offsets):
            ts_ms.reshape(shape)[...] = part.offsets[0]
        else:
            series_major(part.offsets, grid, ts_ms)
        ts_ms *= interval_s * 1000
        ts_ms.reshape(shape)[...] += grid.base_s[None, :, None] * 1000
        series_major(part.values, grid, whole.values[out:end])
        if alike(part.is_int):
            whole.is_int[out:end].reshape(shape)[...] = part.is_int[0]
        else:
            series_major(part.is_int, grid, whole.is_int[out:end])
        sizes[slot] = runs * width
        stored += part.weight.reshape(runs, n).sum(axis=0)
        out = end
    ends = np.cumsum(sizes, axis=1)
    total_values = int(ends[0, -1])
    spans = np.stack([ends[0] - sizes[0], ends[0], total_values + ends[1] - sizes[1],
                      total_values + ends[1]], axis=1)
    return Joined(whole, grid.first_keys(), spans, np.full(n, runs, np.int64), stored)


def series_major(matrix: np.ndarray, grid: Grid, into: np.ndarray | None = None
                 ) -> np.ndarray:
    """A part's (row x cell) ``matrix`` of a grid's rows as ``(series, runs * width)``,
    each series' rows in time order: one transposing copy (into ``into`` when given)."""
    n, runs = grid.series, grid.base_s.size
    width = matrix.shape[1]
    rows = matrix.reshape(runs, n, width).transpose(1, 0, 2)
    out = np.empty((n, runs, width), matrix.dtype) if into is None else into.reshape(
        n, runs, width)
    if grid.position is None:
        out[...] = rows
    else:  # runs of rows in time order (blocks, then the ends): a slice each, no gather
        position = grid.position
        cuts = [0, *(np.flatnonzero(np.diff(position) != 1) + 1).tolist(), runs]
        for a, b in zip(cuts[:-1], cuts[1:]):
            at = int(position[a])
            out[:, at:at + b - a] = rows[:, a:b]
    return out.reshape(n, runs * width)


def _series(parts: list[Part], time_at: int
            ) -> tuple[np.ndarray, np.ndarray, list[int], Callable[[int], bytes]]:
    """Over the parts' rows one after the other: each row's series number (its key without
    the base time) and base time, per series the row of its smallest key, and the key of a
    row. Keys of one length (the common case: one metric, the same tag keys) are compared
    as arrays; others one by one."""
    lengths = np.concatenate([p.row_len for p in parts]) if parts else np.zeros(0, np.int64)
    if lengths.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), [], lambda i: b""
    rows = b"".join(p.rows for p in parts) if len(parts) > 1 else parts[0].rows
    length = int(lengths[0])
    if not (lengths == length).all() or length < time_at + 4:
        return _series_by_key(rows, lengths, time_at)
    keys = np.frombuffer(rows, np.uint8).reshape(-1, length)
    base = keys[:, time_at:time_at + 4].copy().view(">u4").ravel().astype(np.int64)
    rest = length - 4
    words = -(-rest // 8)
    padded = np.zeros((keys.shape[0], words * 8), np.uint8)
    padded[:, :time_at] = keys[:, :time_at]
    padded[:, time_at:rest] = keys[:, time_at + 4:]
    columns = padded.view(">u8")  # big-endian words sort as the bytes do
    order = np.lexsort([base] + [columns[:, w] for w in range(words - 1, -1, -1)])
    ordered = columns[order]
    starts = np.ones(order.size, bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    series_sorted = np.cumsum(starts) - 1
    sid = np.empty(order.size, np.int64)
    sid[order] = series_sorted
    firsts = order[starts].tolist()  # the earliest base time of each series
    return sid, base, firsts, lambda i: rows[i * length:(i + 1) * length]


def _series_by_key(rows: bytes, lengths: np.ndarray, time_at: int
                   ) -> tuple[np.ndarray, np.ndarray, list[int], Callable[[int], bytes]]:
    ends = np.cumsum(lengths).tolist()
    keys = [rows[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    numbers: dict[bytes, int] = {}
    sid = np.fromiter((numbers.setdefault(key[:time_at] + key[time_at + 4:], len(numbers))
                       for key in keys), np.int64, len(keys))
    base = np.fromiter((int.from_bytes(key[time_at:time_at + 4], "big") for key in keys),
                       np.int64, len(keys))
    firsts = [-1] * len(numbers)
    for i, (key, number) in enumerate(zip(keys, sid.tolist())):
        first = firsts[number]
        if first < 0 or key < keys[first]:
            firsts[number] = i
    return sid, base, firsts, keys.__getitem__


def alike(matrix: np.ndarray) -> bool:
    """Whether every row of ``matrix`` is one row seen again (a broadcast view)."""
    return matrix.ndim == 2 and matrix.shape[0] > 0 and matrix.strides[0] == 0


def _cell_index(cells: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The cells of the rows in ``order``, each row's cells one after the other."""
    starts = np.cumsum(cells) - cells
    return ranges_to_index(starts[order], cells[order])
