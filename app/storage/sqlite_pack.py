"""Compression at rest of the embedded store's big cells (pure: no IO).

A compacted hour row is one cell of a few kilobytes (a 2-byte qualifier and a 4- or 8-byte
value per point). The embedded store keeps such a value zlib-compressed in the SQLite file,
with the flag ``z`` set on its SQL row (``sqlite.py``); every read inflates it again, so what
the store returns (and ``pytsd cells`` prints, and an export to HBase copies) stays exactly
OpenTSDB's bytes. zlib is in the standard library and its format is frozen: a file written
today inflates the same anywhere.

A packed value is ``method (1 byte), stride (1 byte), raw length (uint32, little-endian)``,
then the deflated bytes. Method 2 deflates the value's first ``n * stride`` bytes as byte
planes (the first byte of every ``stride``-byte value, then the second, ...): the sign and
exponent bytes of floats, or the high bytes of integers, repeat, and deflate finds them one
after the other. The raw length in the header lets a reader weigh a cell without inflating it.

Method 3 is for a column of floats (the qualifier says so and gives each one's width, 4 or 8
bytes; OpenTSDB stores ``12.34`` as the double nearest it, ``57`` as a 4-byte float): each
float becomes the integer ``m`` with ``float(m / 10**d) == value`` in its width, for the
fewest decimals ``d`` shared by the column (``1234`` for ``12.34``); the widths (a bit each)
and the integers' byte planes deflate to little more than the digits' information. Kept
only when every value comes back to the same bits (checked when packing, by the very
arithmetic unpacking does).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence

import numpy as np

PLAIN = 1  # deflate of the value as it is
PLANES = 2  # deflate of the value's byte planes of ``stride`` bytes
DECIMAL = 3  # 4- and 8-byte floats as decimal integers (``stride``: the count of decimals)
MAX_DECIMALS = 6
INT32_LIMIT = 2.0**31
HEADER_BYTES = 6
LEVEL = 6  # zlib's default: level 9 saved ~1% more on compacted hours, at twice the CPU
# zlib's memory level 3 (default 8): deflate blocks of 512 symbols, each with Huffman codes
# of its own, fit a column's byte planes one by one (the random low bytes, the narrow high
# ones, the zeros): 6% smaller on the bench's columns (728 bytes for 360 points, not 772), at
# the same CPU; any zlib inflates it.
MEM_LEVEL = 3
PACK_MIN_BYTES = 64  # smaller values are left alone: the header and deflate's overhead win
PACK_MIN_SAVING = 8  # keep a packed value only when it saves at least 1/8 of the bytes
STRIDES = (4, 8)  # OpenTSDB's float and long widths (a compacted row of one kind has one)


def pack(value: bytes, float_widths: list[int] | None = None) -> bytes | None:
    """``value`` packed, or None when packing would not save :data:`PACK_MIN_SAVING`.
    ``float_widths``: the value is floats of these widths (and a last byte), as its
    qualifier says (:func:`float_widths`)."""
    if len(value) < PACK_MIN_BYTES or len(value) >= 1 << 32:
        return None
    decimal = _pack_decimal(value, float_widths) if float_widths else None
    if decimal is not None:
        return decimal
    best = _with_header(PLAIN, 0, len(value), _deflate(value))
    for stride in STRIDES:
        planes = _planes(value, stride)
        if planes is not None:
            packed = _with_header(PLANES, stride, len(value), _deflate(planes))
            best = packed if len(packed) < len(best) else best
    return best if len(best) <= len(value) - len(value) // PACK_MIN_SAVING else None


def pack_plain(value: bytes) -> bytes:
    """``value`` in a packed form whatever its size (stored, not deflated): for a cell that
    must be packed (``sqlite_hours.restored``) where :func:`pack` would save nothing."""
    return _with_header(PLAIN, 0, len(value), zlib.compress(value, 0))


def unpack(packed: bytes) -> bytes:
    """The value :func:`pack` packed, byte for byte."""
    method, stride = packed[0], packed[1]
    raw = zlib.decompress(packed[HEADER_BYTES:])
    if method == PLAIN:
        return raw
    if method == DECIMAL:
        return _unpack_decimal(raw, stride)
    if method != PLANES or stride == 0:
        raise ValueError(f"unknown packing {method}/{stride} of an embedded store's cell")
    whole = len(raw) // stride * stride
    values = np.frombuffer(raw, np.uint8, whole).reshape(stride, -1).T
    return values.tobytes() + raw[whole:]


def unpacked_length(packed: bytes) -> int:
    """The length of the value, read from the header (nothing inflated)."""
    return int.from_bytes(packed[2:HEADER_BYTES], "little")


def _pack_decimal(value: bytes, widths: list[int]) -> bytes | None:
    """Method 3, or None when some float has no integer of at most :data:`MAX_DECIMALS`
    decimals that comes back to its bits (or is not finite)."""
    eight = np.array(widths) == 8
    ends = np.cumsum(widths)
    if not 0 < int(ends[-1]) <= len(value) or len(widths) >= 1 << 32:
        return None
    raw = np.frombuffer(value, np.uint8, int(ends[-1]))
    original = _gather(raw, ends - np.array(widths), eight)
    wide = np.where(eight, original[1], original[0].astype(np.float64))
    if not np.isfinite(wide).all():
        return None
    exact = value[:int(ends[-1])]
    for decimals in range(MAX_DECIMALS + 1):
        scaled = np.rint(wide * 10.0**decimals)
        if np.abs(scaled).max() >= INT32_LIMIT:
            return None
        # The doubles first (cheap, and where a wrong count of decimals shows), then every
        # value's bytes in its width, by the very arithmetic unpacking does.
        if not (scaled[eight] / 10.0**decimals == wide[eight]).all():
            continue
        mantissas = scaled.astype("<i4")
        if _floats(mantissas, 10.0**decimals, eight).tobytes() == exact:
            planes = mantissas.view(np.uint8).reshape(-1, 4).T.tobytes()
            head = len(widths).to_bytes(4, "little") + np.packbits(eight).tobytes()
            body = _deflate(head + planes + value[int(ends[-1]):])
            return _with_header(DECIMAL, decimals, len(value), body)
    return None


def _unpack_decimal(raw: bytes, decimals: int) -> bytes:
    count = int.from_bytes(raw[:4], "little")
    at = 4 + (count + 7) // 8
    eight = np.unpackbits(np.frombuffer(raw, np.uint8, at - 4, 4), count=count).astype(bool)
    planes = np.frombuffer(raw, np.uint8, 4 * count, at).reshape(4, -1)
    mantissas = planes.T.copy().view("<i4").ravel()
    return _floats(mantissas, 10.0**decimals, eight).tobytes() + raw[at + 4 * count:]


def _gather(raw: np.ndarray, starts: np.ndarray, eight: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The 4-byte floats at ``starts[~eight]`` and the 8-byte ones at ``starts[eight]``, each
    in a full-length array (zeros elsewhere)."""
    four_values = np.zeros(len(starts), ">f4")
    eight_values = np.zeros(len(starts), ">f8")
    four_at, eight_at = starts[~eight], starts[eight]
    four_values[~eight] = raw[four_at[:, None] + np.arange(4)].copy().view(">f4").ravel()
    eight_values[eight] = raw[eight_at[:, None] + np.arange(8)].copy().view(">f8").ravel()
    return four_values, eight_values


def _floats(mantissas: np.ndarray, scale: float | np.ndarray, eight: np.ndarray
            ) -> np.ndarray:
    """The bytes (uint8) of the floats of decimal mantissas over ``scale`` (``10.0**decimals``,
    or one such per mantissa), each in its width, back to back: the one arithmetic of both
    ways."""
    wide = mantissas.astype(np.float64) / scale
    if eight.all():  # one width: no scatter
        return wide.astype(">f8").view(np.uint8)
    if not eight.any():
        return wide.astype(">f4").view(np.uint8)
    # Each value's 8 bytes as two 4-byte words; a 4-byte one's first word is its float, and
    # the words kept (the first of every value, the second of the 8-byte ones) are the column.
    words = wide.astype(">f8").view(np.uint32).reshape(-1, 2)
    four = np.flatnonzero(~eight)
    words[four, 0] = wide[four].astype(">f4").view(np.uint32)
    keep = np.ones(words.shape, np.bool_)
    keep[:, 1] = eight
    return words[keep].view(np.uint8)


def _planes(value: bytes, stride: int) -> bytes | None:
    whole = len(value) // stride * stride
    if whole < 2 * stride:
        return None
    values = np.frombuffer(value, np.uint8, whole).reshape(-1, stride)
    return values.T.tobytes() + value[whole:]


def _deflate(data: bytes) -> bytes:
    deflate = zlib.compressobj(LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, MEM_LEVEL)
    return deflate.compress(data) + deflate.flush()


def _with_header(method: int, stride: int, length: int, body: bytes) -> bytes:
    return bytes((method, stride)) + length.to_bytes(4, "little") + body


# --- compacted qualifiers ----------------------------------------------------------------
# A compacted column's qualifier (2 bytes a point) is part of the SQL primary key, so it is
# stored twice (the table and its ``cells_stamp`` index). A column of second-precision points
# is kept as a short key instead: its first two qualifiers as they are (so it sorts where the
# column does against every cell that differs in them), the point count, the flags (one
# value; two values and a bit per point; or a nibble per point), then the differences of the
# offsets run-length coded (``zigzag(delta), run`` as varints), padded to an odd length. The
# key is a pure function of the qualifier (an exact-column look-up computes it), and odd: no
# OpenTSDB data qualifier is, and no annotation or append one is that long.
KEY_MIN_BYTES = 16  # shorter compacted qualifiers (under 8 points) are left alone
SECOND_WORD_MAX = 0xF000  # a 2-byte word at or above it starts a millisecond qualifier
ONE_FLAG, TWO_FLAGS, NIBBLES = 0, 1, 2


def pack_qualifier(qualifier: bytes) -> bytes | None:
    """The short key of a compacted qualifier of second-precision points, or None when it
    has none (too short, milliseconds, or no shorter)."""
    if len(qualifier) < KEY_MIN_BYTES or len(qualifier) % 2:
        return None
    words = np.frombuffer(qualifier, ">u2").astype(np.int64)
    if int(words.max()) >= SECOND_WORD_MAX:
        return None
    out = bytearray(qualifier[:4]) + _varint(len(words)) + _flags(words & 0x0F)
    deltas = np.diff(words >> 4)
    change = np.flatnonzero(np.diff(deltas)) + 1
    for start, end in zip([0, *change.tolist()], [*change.tolist(), len(deltas)]):
        delta = int(deltas[start])
        out += _varint(delta * 2 if delta >= 0 else -delta * 2 - 1) + _varint(end - start)
    if len(out) % 2 == 0:
        out.append(0)  # a lone last byte is padding: a pair takes at least two
    return bytes(out) if len(out) < len(qualifier) else None


def unpack_qualifier(key: bytes) -> bytes:
    """The compacted qualifier :func:`pack_qualifier` made ``key`` of, byte for byte."""
    count, at = _read_varint(key, 4)
    flags, at = _read_flags(key, at, count)
    first = int.from_bytes(key[:2], "big") >> 4
    if len(key) - at >= 2 and (pair := _one_run(key, at, count)) is not None:
        offsets = first + pair * np.arange(count, dtype=np.int64)  # evenly spaced: one run
    else:
        # Each offset's difference from the one before (the first's from the first
        # qualifier), run after run, filled in slices: a column has a run or a few.
        steps = np.zeros(count, np.int64)
        done = 1
        while len(key) - at >= 2:
            zigzag, at = _read_varint(key, at)
            run, at = _read_varint(key, at)
            steps[done:done + run] = _unzigzag(zigzag)
            done += run
        steps[0] = first
        offsets = np.cumsum(steps, out=steps)
    offsets <<= 4
    offsets |= flags
    return offsets.astype(">u2").tobytes()


def _unzigzag(zigzag: int) -> int:
    """The signed difference a zigzag varint holds (0, -1, 1, -2, ... from 0, 1, 2, 3, ...)."""
    return zigzag // 2 if zigzag % 2 == 0 else -(zigzag + 1) // 2


def _one_run(key: bytes, at: int, count: int) -> int | None:
    """The one difference of every offset from the one before, when the key holds one run
    of them (and at most a padding byte after it), else None."""
    zigzag, after = _read_varint(key, at)
    run, after = _read_varint(key, after)
    if run != count - 1 or len(key) - after >= 2:
        return None
    return _unzigzag(zigzag)


def _flags(flags: np.ndarray) -> bytes:
    values = np.flatnonzero(np.bincount(flags, minlength=16)).tolist()  # sorted, as unique's
    if len(values) == 1:
        return bytes((ONE_FLAG, values[0]))
    if len(values) == 2:
        return bytes((TWO_FLAGS, *values)) + np.packbits(flags == values[1]).tobytes()
    padded = np.append(flags, 0) if len(flags) % 2 else flags
    return bytes((NIBBLES,)) + (padded[0::2] << 4 | padded[1::2]).astype(np.uint8).tobytes()


def _read_flags(key: bytes, at: int, count: int) -> tuple[np.ndarray, int]:
    mode = key[at]
    if mode == ONE_FLAG:
        return np.full(count, key[at + 1], np.int64), at + 2
    if mode == TWO_FLAGS:
        size = (count + 7) // 8
        flags = np.unpackbits(np.frombuffer(key, np.uint8, size, at + 3), count=count
                              ).astype(np.int64)
        flags *= key[at + 2] - key[at + 1]  # 1 for the second flag, 0 for the first
        flags += key[at + 1]
        return flags, at + 3 + size
    size = (count + 1) // 2
    nibbles = np.frombuffer(key, np.uint8, size, at + 1).astype(np.int64)
    return np.stack((nibbles >> 4, nibbles & 0x0F), axis=1).ravel()[:count], at + 1 + size


def _varint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    number = shift = 0
    while True:
        byte = data[at]
        at += 1
        number |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return number, at


FLOAT_FLAGS = {0x0B: 4, 0x0F: 8}  # a qualifier's low 4 bits for a 4- or 8-byte float


def float_widths(qualifier: bytes) -> list[int] | None:
    """The widths of the values of a compacted qualifier of second-precision points when
    they are all floats, else None."""
    if len(qualifier) < 4 or len(qualifier) % 2:
        return None
    words = np.frombuffer(qualifier, ">u2")
    flags = words & 0x0F
    if not ((words < SECOND_WORD_MAX).all() and ((flags == 0x0B) | (flags == 0x0F)).all()):
        return None
    return np.where(flags == 0x0F, 8, 4).tolist()


# --- many cells at once --------------------------------------------------------------------
# A scan unpacks the packed cells of a batch of rows together (sqlite.py): one inflate per
# value, but one numpy pass over all the batch's points for the decimal values and the short
# keys, where a call per cell paid numpy's fixed cost a dozen times (~75 µs a column).


def pack_qualifiers(qualifiers: Sequence[bytes]) -> list[bytes | None]:
    """:func:`pack_qualifier` of each, each distinct qualifier once: a merge's columns of
    the series a collector wrote together share their timestamps, so their qualifiers."""
    keys = {qualifier: pack_qualifier(qualifier) for qualifier in dict.fromkeys(qualifiers)}
    return [keys[qualifier] for qualifier in qualifiers]


def pack_columns(qualifiers: Sequence[bytes], values: Sequence[bytes]) -> list[bytes | None]:
    """``pack(value, float_widths(qualifier))`` of each compacted column, byte for byte.

    Columns of 4-byte floats alone (the line protocol's decimals) of one length are tried
    as decimals together, a numpy pass per count of decimals for all of them, where a call
    per column paid numpy's fixed cost some twenty times (~60 us a column); the others,
    and those that are no short decimals, one by one."""
    out: list[bytes | None] = [None] * len(values)
    widths = {qualifier: float_widths(qualifier) for qualifier in dict.fromkeys(qualifiers)}
    floats: dict[int, list[int]] = {}  # value length -> the columns of 4-byte floats
    for at, (qualifier, value) in enumerate(zip(qualifiers, values)):
        if len(value) < PACK_MIN_BYTES:
            continue
        column_widths = widths[qualifier]
        if column_widths is not None and 8 not in column_widths \
                and len(value) >= 4 * len(column_widths):
            floats.setdefault(len(value) * 65536 + len(column_widths), []).append(at)
        else:
            out[at] = pack(value, column_widths)
    for columns in floats.values():
        count = len(widths[qualifiers[columns[0]]] or ())
        packed = _pack_floats([values[at] for at in columns], count)
        for at, found in zip(columns, packed):
            out[at] = found if found is not None else pack(values[at], widths[qualifiers[at]])
    return out


def _pack_floats(values: list[bytes], count: int) -> list[bytes | None]:
    """:func:`_pack_decimal` of values of one length, each ``count`` 4-byte floats and a
    tail: the decimal form of each, or None where :func:`pack` must decide one by one."""
    size = 4 * count
    original = np.frombuffer(b"".join([value[:size] for value in values]), ">f4"
                             ).reshape(len(values), count)
    wide = original.astype(np.float64)
    bits = original.view(">u4")
    out: list[bytes | None] = [None] * len(values)
    open_rows = np.isfinite(wide).all(1)
    head = count.to_bytes(4, "little") + bytes((count + 7) // 8)  # no 8-byte float
    for decimals in range(MAX_DECIMALS + 1):
        if not open_rows.any():
            break
        scale = 10.0**decimals
        scaled = np.rint(wide * scale)
        open_rows &= (np.abs(scaled) < INT32_LIMIT).all(1)  # else None: pack decides
        scaled[~open_rows] = 0  # (not cast: NaN, infinities, too big)
        mantissas = scaled.astype("<i4")
        exact = open_rows & ((mantissas.astype(np.float64) / scale).astype(">f4").view(">u4")
                             == bits).all(1)
        for row in np.flatnonzero(exact).tolist():
            planes = mantissas[row].view(np.uint8).reshape(-1, 4).T.tobytes()
            value = values[row]
            out[row] = _with_header(DECIMAL, decimals, len(value),
                                    _deflate(head + planes + value[size:]))
        open_rows &= ~exact
    return out


def unpack_many(packed: Sequence[bytes]) -> list[bytes]:
    """:func:`unpack` of each value, byte for byte."""
    raws = [zlib.decompress(value[HEADER_BYTES:]) for value in packed]
    out: list[bytes] = []
    decimal: list[int] = []
    for at, (value, raw) in enumerate(zip(packed, raws)):
        if value[0] == DECIMAL:
            decimal.append(at)
            out.append(b"")
        elif value[0] == PLAIN:
            out.append(raw)
        else:
            out.append(unpack(value))  # byte planes: rare (integers), one call each
    if decimal:
        values = _unpack_decimals([raws[at] for at in decimal], [packed[at][1] for at in decimal])
        for at, value in zip(decimal, values):
            out[at] = value
    return out


def _unpack_decimals(raws: list[bytes], decimals: list[int]) -> list[bytes]:
    """:func:`_unpack_decimal` of each inflated value, all points in one pass: each value's
    width bits, then each of its 4 byte planes, cut by slicing and joined over all values."""
    counts = [int.from_bytes(raw[:4], "little") for raw in raws]
    bytes_of_bits = [(count + 7) // 8 for count in counts]
    eight = _bits([raw[4:4 + size] for raw, size in zip(raws, bytes_of_bits)],
                  counts).astype(bool)
    planes = np.empty((sum(counts), 4), np.uint8)
    for plane in range(4):
        planes[:, plane] = np.frombuffer(b"".join([
            raw[at + plane * count:at + (plane + 1) * count]
            for raw, count, at in zip(raws, counts, (4 + size for size in bytes_of_bits))]),
            np.uint8)
    mantissas = planes.view("<i4").ravel()
    scales = np.repeat(np.array([10.0**count for count in decimals]), counts)
    floats = _floats(mantissas, scales, eight).tobytes()
    # Each value's floats: 4 bytes a point and 4 more for each 8-byte one.
    firsts = np.cumsum([0, *counts[:-1]])
    wide_points = np.add.reduceat(eight, firsts, dtype=np.int64).tolist()  # a point or more each
    out, start = [], 0
    for raw, count, size, wide in zip(raws, counts, bytes_of_bits, wide_points):
        end = start + 4 * (count + wide)
        out.append(floats[start:end] + raw[4 + size + 4 * count:])  # and its tail
        start = end
    return out


def unpack_qualifiers(keys: Sequence[bytes]) -> list[bytes]:
    """:func:`unpack_qualifier` of each short key: each distinct key once (the series of an
    hour written together share their timestamps, so their keys), all in one pass."""
    distinct = list(dict.fromkeys(keys))
    if len(distinct) == len(keys):
        return _unpack_distinct(keys)
    found = dict(zip(distinct, _unpack_distinct(distinct)))
    return [found[key] for key in keys]


def _unpack_distinct(keys: Sequence[bytes]) -> list[bytes]:
    """Each key's runs and flags read here (a few varints; the flags' bytes sliced off),
    the offsets and flags of all the keys' points then made at once."""
    counts, steps, repeats, modes = [], [], [], []
    ones: tuple[list[int], list[int]] = ([], [])  # one flag: the flags, the counts
    twos: tuple[list[bytes], list[int], list[int], list[int]] = ([], [], [], [])
    nibbles: tuple[list[bytes], list[int]] = ([], [])
    total = 0  # the sum of every step so far
    for key in keys:
        count, at = _read_varint(key, 4)
        mode = key[at]
        first = int.from_bytes(key[:2], "big") >> 4
        steps.append(first - total)  # the cumulative sum restarts at the key's first offset
        repeats.append(1)
        total = first
        modes.append(mode)
        counts.append(count)
        if mode == ONE_FLAG:
            ones[0].append(key[at + 1])
            ones[1].append(count)
            at += 2
        elif mode == TWO_FLAGS:
            size = (count + 7) // 8
            twos[0].append(key[at + 3:at + 3 + size])
            twos[1].append(count)
            twos[2].append(key[at + 1])
            twos[3].append(key[at + 2] - key[at + 1])
            at += 3 + size
        else:
            size = (count + 1) // 2
            nibbles[0].append(key[at + 1:at + 1 + size])
            nibbles[1].append(count)
            at += 1 + size
        done = 1
        while len(key) - at >= 2:
            zigzag, at = _read_varint(key, at)
            run, at = _read_varint(key, at)
            delta = _unzigzag(zigzag)
            run = max(0, min(run, count - done))  # as the per-key slices would cut it
            steps.append(delta)
            repeats.append(run)
            total += delta * run
            done += run
        steps.append(0)  # offsets no run reached repeat the last (zeros in the slices)
        repeats.append(count - done)
    # int32: a second-precision qualifier's offset is under 2**12 (its flags, 4 bits).
    offsets = np.cumsum(np.repeat(np.array(steps, np.int32), repeats), dtype=np.int32)
    parts = [(ONE_FLAG, ones[1]), (TWO_FLAGS, twos[1]), (NIBBLES, nibbles[1])]
    single = len(keys) in (len(ones[1]), len(twos[1]), len(nibbles[1]))
    point_modes = None if single else np.repeat(np.array(modes, np.uint8), counts)
    flags = np.empty(len(offsets), np.int32)
    for mode, mode_counts in parts:
        if not mode_counts:
            continue
        if mode == ONE_FLAG:
            these = np.repeat(np.array(ones[0], np.int32), mode_counts)
        elif mode == TWO_FLAGS:
            these = np.repeat(np.array(twos[2], np.int32), mode_counts)
            these += _bits(twos[0], mode_counts) * np.repeat(np.array(twos[3], np.int32),
                                                             mode_counts)
        else:
            data = np.frombuffer(b"".join(nibbles[0]), np.uint8)
            both = np.stack((data >> 4, data & 0x0F), axis=1).ravel()
            these = both[_kept(mode_counts, [c % 2 for c in mode_counts])]
        if point_modes is None:
            flags = these  # every key's flags are of this one kind
        else:
            flags[point_modes == mode] = these
    words = ((offsets << 4) | flags).astype(">u2").tobytes()
    out, at = [], 0
    for count in counts:
        out.append(words[at:at + 2 * count])
        at += 2 * count
    return out


def _bits(parts: list[bytes], counts: list[int]) -> np.ndarray:
    """The first ``counts[i]`` bits of ``parts[i]`` (a bit a point, packed), all in a row."""
    bits = np.unpackbits(np.frombuffer(b"".join(parts), np.uint8))
    return bits[_kept(counts, [len(part) * 8 - count for part, count in zip(parts, counts)])]


def _kept(counts: list[int], padding: list[int]) -> np.ndarray:
    """A mask keeping ``counts[i]`` items, then dropping ``padding[i]``, for each ``i``."""
    return np.repeat(np.tile(np.array([True, False]), len(counts)),
                     [n for pair in zip(counts, padding) for n in pair])


class Unpacked:
    """Values (or short keys) unpacked lately, by their packed bytes, up to ``max_bytes``
    (packed and unpacked): the open hour's merged columns stay as they are until compaction,
    and every read of it (a dashboard's "last hour", refreshed) asks for the same ones again.
    Keyed by content, an entry is never stale. When full it starts over (no order kept)."""

    def __init__(self, unpack_all: Callable[[Sequence[bytes]], list[bytes]],
                 max_bytes: int) -> None:
        self._unpack_all = unpack_all
        self.max_bytes = max_bytes
        self._found: dict[bytes, bytes] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __call__(self, packed: Sequence[bytes]) -> list[bytes]:
        """Each packed item unpacked, byte for byte: from here, or unpacked together."""
        found = self._found
        out = [found.get(item) for item in packed]
        missing = [at for at, item in enumerate(out) if item is None]
        if not missing:
            return out  # type: ignore[return-value]  # every item was found
        distinct = list(dict.fromkeys([packed[at] for at in missing]))
        fresh = dict(zip(distinct, self._unpack_all(distinct)))
        for at in missing:
            out[at] = fresh[packed[at]]
        added = sum(len(item) + len(value) for item, value in fresh.items())
        with self._lock:
            if self._bytes + added > self.max_bytes:
                self._found, self._bytes = {}, 0
            if added <= self.max_bytes:
                self._found.update(fresh)
                self._bytes += added
        return out  # type: ignore[return-value]
