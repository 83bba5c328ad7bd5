"""The columnar form of one closed hour's rows, as the embedded store keeps it beside their
cells (``app.storage.sqlite_hours``): pure, no IO.

One blob per hour prefix (salt, metric, base time), that is every series of one metric in one
salt bucket for the hour, made from the hour's rows decoded by the one decoder every read
uses (``decode.decode_pass``), so a read from the blob gives the very points a read of the
cells gives. Layout (little-endian; every section starts 8-byte aligned)::

    head (HEAD_DTYPE) | key lengths u2[rows] | keys | points u4[rows] | stored bytes u4[rows]
    | cells u4[rows] | newest write time i8[rows] (each row's stamp, as the hour cache keeps it)
    | offsets from the base time (u2 seconds, or u4 ms) [points]
    | values (f4 when every point is a float that a 4-byte float holds exactly, else f8)
    | integer flags u1[points] (f8 only)

With ``FLAG_ZLIB`` every section after the head is deflated (level 1) as one stream. An hour
holding what its cells are needed for each time (a note, two cells with one timestamp, an
integer beyond 2**53) has no blob (``encode`` returns None).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

VERSION = 1
HEAD_DTYPE = np.dtype([("version", "u1"), ("flags", "u1"), ("scale", "u1"), ("width", "u1"),
                       ("rows", "<u4"), ("points", "<u8"), ("key_bytes", "<u8"),
                       ("base_s", "<u8")])
FLAG_FLOAT32 = 1  # values as 4-byte floats
FLAG_SECONDS = 2  # offsets as u2 seconds (else u4 ms)
FLAG_ZLIB = 4  # the sections deflated
FLAG_REGULAR = 8  # no offsets: per row its first offset and step (u4 ms each)
FLAG_SCALED = 16  # values as signed integers of ``width`` bytes over 10**scale
FLAG_NO_INTS = 32  # no point is an integer (no flags stored)
FLAG_ALL_INTS = 64  # every point is an integer (no flags stored)
U4_LIMIT = 1 << 32
MAX_SCALE = 6  # decimals tried for FLAG_SCALED


@dataclass(frozen=True, slots=True)
class HourRows:
    """One hour's rows decoded from a blob: row after row, each in time order."""

    base_s: int
    keys: bytes  # the row keys, joined
    key_lengths: np.ndarray  # int64 per row
    points: np.ndarray  # int64 per row
    stored_bytes: np.ndarray  # int64 per row: the byte limit's weight of its cells
    cells: np.ndarray  # int64 per row: its stored cells and their newest write time (its
    newest_ms: np.ndarray  # stamp in the hour cache)
    ts_ms: np.ndarray  # int64
    values: np.ndarray  # float64
    is_int: np.ndarray  # bool

    def key_list(self) -> list[bytes]:
        ends = np.cumsum(self.key_lengths).tolist()
        return [self.keys[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def _pad(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return bool((a.view(np.uint64) == b.view(np.uint64)).all())


def _scaled(values: np.ndarray) -> tuple[int, np.ndarray] | None:
    """``(decimals, integers)`` whose quotient by 10**decimals gives back every value bit for
    bit (IEEE division rounds correctly, so a decimal parsed to its nearest double comes
    back), in 2 or 4 bytes; None when no scale does."""
    if not values.size or not np.isfinite(values).all() or float(np.abs(values).max()) >= 2**31:
        return None
    for scale in range(MAX_SCALE + 1):
        factor = 10.0 ** scale
        scaled = np.rint(values * factor)
        if float(np.abs(scaled).max()) >= 2**31:
            return None
        if _same_bits(scaled / factor, values):
            small = float(np.abs(scaled).max()) < 2**15
            return scale, scaled.astype("<i2" if small else "<i4")
    return None


def _fits_float32(values: np.ndarray) -> bool:
    """Whether a 4-byte float holds every value exactly (beyond its range: no)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _same_bits(values.astype(np.float32).astype(np.float64), values)


def _regular(offsets: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row its first offset and step when every row's points are evenly spaced."""
    starts = np.cumsum(points) - points
    nonempty = points > 0
    first = np.zeros(points.size, np.int64)
    first[nonempty] = offsets[starts[nonempty]]
    step = np.zeros(points.size, np.int64)
    two = points > 1
    step[two] = offsets[starts[two] + 1] - offsets[starts[two]]
    within = np.arange(offsets.size) - np.repeat(starts, points)
    if not (offsets == np.repeat(first, points) + np.repeat(step, points) * within).all():
        return None
    return first, step


def encode(base_s: int, keys: Sequence[bytes], points: np.ndarray, stored_bytes: Sequence[int],
           stamps: Sequence[tuple[int, int]], ts_ms: np.ndarray, values: np.ndarray,
           is_int: np.ndarray, *, compress: bool = False) -> bytes | None:
    """The blob of an hour's rows (``points`` per row, their points one row after the other,
    each in time order), or None when the points do not fit the layout."""
    offsets = ts_ms - base_s * 1000
    if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) >= U4_LIMIT):
        return None
    widest = max([*stored_bytes, *(cells for cells, _ in stamps)], default=0)
    if widest >= U4_LIMIT or any(len(key) >= 1 << 16 for key in keys):
        return None
    flags = scale = width = 0
    regular = _regular(offsets, points)
    if regular is not None:
        flags |= FLAG_REGULAR
        offset_bytes = _pad(regular[0].astype("<u4").tobytes()) + regular[1].astype("<u4").tobytes()
    elif offsets.size == 0 or (not (offsets % 1000).any() and int(offsets.max()) < 1000 << 16):
        flags |= FLAG_SECONDS
        offset_bytes = (offsets // 1000).astype("<u2").tobytes()
    else:
        offset_bytes = offsets.astype("<u4").tobytes()
    ints = is_int.any()
    flags |= FLAG_ALL_INTS if ints and is_int.all() else 0 if ints else FLAG_NO_INTS
    scaled = _scaled(values) if flags & (FLAG_ALL_INTS | FLAG_NO_INTS) else None
    if scaled is not None:
        flags |= FLAG_SCALED
        scale, integers = scaled
        width = integers.itemsize
        value_bytes = integers.tobytes()
    elif not ints and _fits_float32(values):
        flags |= FLAG_FLOAT32
        value_bytes = values.astype("<f4").tobytes()
    else:
        value_bytes = values.astype("<f8").tobytes()
    if not flags & (FLAG_ALL_INTS | FLAG_NO_INTS):
        value_bytes = _pad(value_bytes) + is_int.astype(np.uint8).tobytes()
    joined = b"".join(keys)
    body = b"".join([
        _pad(np.fromiter(map(len, keys), "<u2", len(keys)).tobytes()), _pad(joined),
        _pad(np.asarray(points, "<u4").tobytes()), _pad(np.asarray(stored_bytes, "<u4").tobytes()),
        _pad(np.array([cells for cells, _ in stamps], "<u4").tobytes()),
        np.array([newest for _, newest in stamps], "<i8").tobytes(),
        _pad(offset_bytes), value_bytes])
    if compress:
        flags |= FLAG_ZLIB
        body = zlib.compress(body, 1)
    head = np.array([(VERSION, flags, scale, width, len(keys), int(ts_ms.size), len(joined),
                      base_s)], HEAD_DTYPE)
    return head.tobytes() + body


class _Sections:
    """A blob's head, checked, and its body's sections read in order (each padded to 8 bytes):
    what :func:`decode` and :class:`BlobRows` both open a blob with."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < HEAD_DTYPE.itemsize:
            raise ValueError("an hour column shorter than its head")
        self.head = head = np.frombuffer(blob, HEAD_DTYPE, 1)[0]
        if int(head["version"]) != VERSION:
            raise ValueError(f"an hour column of version {int(head['version'])}")
        self.flags, self.rows = int(head["flags"]), int(head["rows"])
        self.points = int(head["points"])
        body = memoryview(blob)[HEAD_DTYPE.itemsize:]
        self.body = memoryview(zlib.decompress(body)) if self.flags & FLAG_ZLIB else body
        self.at = 0

    def take(self, dtype: str, count: int) -> np.ndarray:
        array = np.frombuffer(self.body, dtype, count, self.at)
        self.at += -(-array.nbytes // 8) * 8
        return array


def decode(blob: bytes) -> HourRows:
    """An hour's rows from its blob (ValueError when it is not one)."""
    sections = _Sections(blob)
    head, flags, rows, points = sections.head, sections.flags, sections.rows, sections.points
    take = sections.take
    key_lengths = take("<u2", rows).astype(np.int64)
    keys = bytes(take("u1", int(head["key_bytes"])))
    counts = take("<u4", rows).astype(np.int64)
    weights = take("<u4", rows).astype(np.int64)
    cells = take("<u4", rows).astype(np.int64)
    newest = take("<i8", rows).astype(np.int64)
    base_ms = int(head["base_s"]) * 1000
    if flags & FLAG_REGULAR:
        first = take("<u4", rows).astype(np.int64)
        step = take("<u4", rows).astype(np.int64)
        ts_ms = _regular_times(first + base_ms, step, counts, points)
    elif flags & FLAG_SECONDS:
        ts_ms = take("<u2", points).astype(np.int64)
        ts_ms *= 1000
        ts_ms += base_ms
    else:
        ts_ms = take("<u4", points).astype(np.int64)
        ts_ms += base_ms
    if flags & FLAG_SCALED:
        scaled = take("<i2" if int(head["width"]) == 2 else "<i4", points)
        values = np.divide(scaled, 10.0 ** int(head["scale"]), dtype=np.float64)  # one pass
    else:
        values = take("<f4" if flags & FLAG_FLOAT32 else "<f8", points).astype(np.float64)
    if flags & (FLAG_NO_INTS | FLAG_ALL_INTS):
        is_int = np.full(points, bool(flags & FLAG_ALL_INTS))
    else:
        is_int = take("u1", points).astype(np.bool_)
    return HourRows(int(head["base_s"]), keys, key_lengths, counts, weights, cells, newest,
                    ts_ms, values, is_int)


def _regular_times(first_ms: np.ndarray, step_ms: np.ndarray, counts: np.ndarray,
                   points: int) -> np.ndarray:
    """Each row's ``first + step * k`` for k below its count, rows one after the other: a
    matrix when every row has as many points (the common case), else per point."""
    if counts.size and bool((counts == counts[0]).all()):
        width = int(counts[0])
        ts_ms = step_ms[:, None] * np.arange(width, dtype=np.int64)[None, :]
        ts_ms += first_ms[:, None]
        return ts_ms.reshape(-1)
    starts = np.cumsum(counts) - counts
    ts_ms = np.arange(points, dtype=np.int64) - np.repeat(starts, counts)
    ts_ms *= np.repeat(step_ms, counts)
    ts_ms += np.repeat(first_ms, counts)
    return ts_ms


class BlobRows:
    """An hour's blob opened for its rows one at a time (a cell's value made from its hour's
    blob: ``hour_values``): the sections located once, each row's points decoded only when
    asked for, exactly as :func:`decode` gives them (ts in milliseconds since the hour's base
    time: ``decode``'s less its ``base_s``)."""

    def __init__(self, blob: bytes) -> None:
        sections = _Sections(blob)
        head, flags, rows, points = sections.head, sections.flags, sections.rows, sections.points
        take = sections.take
        ends = np.cumsum(take("<u2", rows), dtype=np.int64).tolist()
        keys = bytes(take("u1", int(head["key_bytes"])))
        self.index = {keys[start:end]: i for i, (start, end) in enumerate(zip([0, *ends[:-1]],
                                                                               ends))}
        self.counts = take("<u4", rows).astype(np.int64)
        self.firsts = (np.cumsum(self.counts) - self.counts).tolist()
        for dtype in ("<u4", "<u4", "<i8"):  # stored bytes, cells, newest write time
            take(dtype, rows)
        self.flags = flags
        if flags & FLAG_REGULAR:
            self.starts = take("<u4", rows).astype(np.int64)
            self.steps = take("<u4", rows).astype(np.int64)
        else:
            self.offsets = take("<u2" if flags & FLAG_SECONDS else "<u4", points)
        if flags & FLAG_SCALED:
            self.scale = 10.0 ** int(head["scale"])
            self.values = take("<i2" if int(head["width"]) == 2 else "<i4", points)
        else:
            self.values = take("<f4" if flags & FLAG_FLOAT32 else "<f8", points)
        if not flags & (FLAG_NO_INTS | FLAG_ALL_INTS):
            self.ints = take("u1", points)

    def row(self, key: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The row's points ``(ts_ms since the base time, values, is_int)``, or None when
        the blob has no such row."""
        index = self.index.get(key)
        if index is None:
            return None
        first, count = self.firsts[index], int(self.counts[index])
        flags, end = self.flags, first + count
        if flags & FLAG_REGULAR:
            ts_ms = _regular_times(self.starts[index:index + 1], self.steps[index:index + 1],
                                   self.counts[index:index + 1], count)
        else:
            ts_ms = self.offsets[first:end].astype(np.int64)
            if flags & FLAG_SECONDS:
                ts_ms *= 1000
        if flags & FLAG_SCALED:
            values = np.divide(self.values[first:end], self.scale, dtype=np.float64)
        else:
            values = self.values[first:end].astype(np.float64)
        if flags & (FLAG_NO_INTS | FLAG_ALL_INTS):
            is_int = np.full(count, bool(flags & FLAG_ALL_INTS))
        else:
            is_int = self.ints[first:end].astype(np.bool_)
        return ts_ms, values, is_int
