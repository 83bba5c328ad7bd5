"""One copy of a closed hour's values (pure: no IO): the cells of an hour whose blob the store
keeps (``hour_blob``, ``sqlite_hours``) may keep their keys without their value, which is
made again from the blob byte for byte.

A cell stored so has ``z & HOUR_VALUE`` set (and ``z & 1``, its value "packed": older pytsd
cannot inflate the marker and fails loudly instead of reading it), the length of the hour's
key prefix in ``z >> PREFIX_SHIFT``, and as its value a marker: ``sqlite_pack``'s header
(method :data:`MARKER_METHOD`, the value's length) and the value's last bytes that are no
point's (a compacted column's trailing byte). The qualifier's flags give each point's type
and width, the blob's float64 its bytes: exact for 4- and 8-byte floats and integers below
2**53, which is all a blob holds. A cell's value is dropped only when
:func:`value` gives back its very bytes (``sqlite_hours.strip``).
"""

from __future__ import annotations

import numpy as np

from app.storage import hour_blob

HOUR_VALUE = 4  # the ``z`` bit: the value is made from the hour's blob
RESTORING = 64  # the ``z`` bit a trigger sets for a moment while it makes an hour whole
# ``z >> PREFIX_SHIFT``: the length of the hour's key prefix, above every flag bit.
PREFIX_SHIFT = 8
MARKER_METHOD = 9  # a packing method no pytsd inflates (sqlite_pack: 1 to 3)
MARKER_HEAD_BYTES = 6  # method, 0, the value's length (uint32, little-endian)
MAX_TAIL_BYTES = 2  # a marker is never a whole zlib stream, which older pytsd might inflate
MS_BYTE_FLAG = 0xF0
# (float, width in bytes, big-endian dtype): OpenTSDB's value kinds.
KINDS = ((True, 4, ">f4"), (True, 8, ">f8"), (False, 1, ">i1"), (False, 2, ">i2"),
         (False, 4, ">i4"), (False, 8, ">i8"))
# A column of one kind whose values need no range check (floats; 8-byte integers, which a
# blob holds below 2**53): its flags, its dtype.
ONE_KIND = {0x0B: ">f4", 0x0F: ">f8", 0x07: ">i8"}


def marker(length: int, tail: bytes) -> bytes:
    """What a cell whose ``length``-byte value ends in ``tail`` stores instead."""
    return bytes((MARKER_METHOD, 0)) + length.to_bytes(4, "little") + tail


def is_marker(value: bytes) -> bool:
    return len(value) >= MARKER_HEAD_BYTES and value[0] == MARKER_METHOD


def value(blob: bytes | hour_blob.BlobRows, row: bytes, qualifier: bytes, tail: bytes
          ) -> bytes | None:
    """The value of the cell ``row``/``qualifier`` (its qualifier as OpenTSDB wrote it)
    whose last bytes are ``tail``, made from its hour's ``blob`` (or the blob opened, for
    many cells of it); None when the blob does not hold its points in the kinds and widths
    the qualifier names."""
    rows = blob if isinstance(blob, hour_blob.BlobRows) else hour_blob.BlobRows(blob)
    found = rows.row(row)
    points = _points(qualifier)
    if found is None or points is None:
        return None
    offsets_ms, values, is_int = found
    wanted, flags = points
    at = np.searchsorted(offsets_ms, wanted)
    if (at >= len(offsets_ms)).any() or not (offsets_ms[at] == wanted).all():
        return None
    made = _point_bytes(values[at], is_int[at], flags)
    return None if made is None else made + tail


def points_bytes(qualifier: bytes) -> int | None:
    """The bytes of the points a qualifier names (its value less a tail), or None when it
    is not data points'."""
    points = _points(qualifier)
    return None if points is None else int(((points[1] & 7) + 1).sum())


def _points(qualifier: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """Each point's offset from the row's base time (ms) and flags, or None when the
    qualifier is not data points'."""
    if not qualifier or len(qualifier) % 2:
        return None
    words = np.frombuffer(qualifier, ">u2").astype(np.int64)
    if not (words >= MS_BYTE_FLAG << 8).any():  # seconds only: one numpy pass
        return (words >> 4) * 1000, words & 0x0F
    offsets, flags, at = [], [], 0
    while at < len(qualifier):
        if qualifier[at] >= MS_BYTE_FLAG:
            if at + 4 > len(qualifier):
                return None
            word = int.from_bytes(qualifier[at:at + 4], "big")
            offsets.append((word >> 6) & 0x3FFFFF)
            at += 4
        else:
            word = int.from_bytes(qualifier[at:at + 2], "big")
            offsets.append((word >> 4) * 1000)
            at += 2
        flags.append(word & 0x0F)
    return np.array(offsets, np.int64), np.array(flags, np.int64)


def _point_bytes(values: np.ndarray, is_int: np.ndarray, flags: np.ndarray) -> bytes | None:
    """The points' value bytes in the widths and kinds their flags say, back to back; None
    when a flag names a kind the blob's value is not of, a width that does not hold it, or
    no OpenTSDB kind."""
    widths = (flags & 7) + 1
    floats = (flags & 8) != 0
    if (floats == is_int).any():
        return None
    if flags.size and (flags == flags[0]).all() and int(flags[0]) in ONE_KIND:
        return values.astype(ONE_KIND[int(flags[0])]).tobytes()  # one kind: no gather
    eight = flags == 0x0F
    if (eight | (flags == 0x0B)).all():  # floats of both widths: each as 8 bytes, two words
        words = values.astype(">f8").view(np.uint32).reshape(-1, 2)
        four = ~eight
        words[four, 0] = values[four].astype(">f4").view(np.uint32)
        keep = np.ones(words.shape, np.bool_)
        keep[:, 1] = eight  # a 4-byte float's second word dropped
        return words[keep].tobytes()
    out = np.zeros((len(values), 8), np.uint8)
    done = np.zeros(len(values), np.bool_)
    for is_float, width, dtype in KINDS:
        mask = (floats == is_float) & (widths == width)
        if mask.any():
            these = values[mask] if is_float else values[mask].astype(np.int64)
            limit = 1 << (8 * width - 1)
            if width < 8 and not is_float and ((these < -limit) | (these >= limit)).any():
                return None  # an integer its width does not hold (a blob's, below 2**53)
            out[mask, :width] = these.astype(dtype).view(np.uint8).reshape(-1, width)
            done |= mask
    if not done.all():
        return None
    return out[np.arange(8)[None, :] < widths[:, None]].tobytes()


def cell_value(blob: bytes | hour_blob.BlobRows | None, row: bytes, qualifier: bytes,
               stored: bytes) -> bytes:
    """The value of a cell stored as a marker (``stored``), from its hour's ``blob``;
    ValueError when it cannot be made (never a wrong value)."""
    if blob is None:
        raise ValueError("the hour column holding a cell's value is missing")
    made = value(blob if isinstance(blob, hour_blob.BlobRows) else bytes(blob), row, qualifier,
                 bytes(stored[MARKER_HEAD_BYTES:]))
    if made is None or len(made) != int.from_bytes(stored[2:MARKER_HEAD_BYTES], "little"):
        raise ValueError("a cell's value is not in its hour column")
    return made
