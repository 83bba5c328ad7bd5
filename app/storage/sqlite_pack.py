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
"""

from __future__ import annotations

import zlib

import numpy as np

PLAIN = 1  # deflate of the value as it is
PLANES = 2  # deflate of the value's byte planes of ``stride`` bytes
HEADER_BYTES = 6
LEVEL = 6  # zlib's default: level 9 saved ~1% more on compacted hours, at twice the CPU
PACK_MIN_BYTES = 64  # smaller values are left alone: the header and deflate's overhead win
PACK_MIN_SAVING = 8  # keep a packed value only when it saves at least 1/8 of the bytes
STRIDES = (4, 8)  # OpenTSDB's float and long widths (a compacted row of one kind has one)


def pack(value: bytes) -> bytes | None:
    """``value`` packed, or None when packing would not save :data:`PACK_MIN_SAVING`."""
    if len(value) < PACK_MIN_BYTES or len(value) >= 1 << 32:
        return None
    best = _with_header(PLAIN, 0, len(value), zlib.compress(value, LEVEL))
    for stride in STRIDES:
        planes = _planes(value, stride)
        if planes is not None:
            packed = _with_header(PLANES, stride, len(value), zlib.compress(planes, LEVEL))
            best = packed if len(packed) < len(best) else best
    return best if len(best) <= len(value) - len(value) // PACK_MIN_SAVING else None


def unpack(packed: bytes) -> bytes:
    """The value :func:`pack` packed, byte for byte."""
    method, stride = packed[0], packed[1]
    raw = zlib.decompress(packed[HEADER_BYTES:])
    if method == PLAIN:
        return raw
    if method != PLANES or stride == 0:
        raise ValueError(f"unknown packing {method}/{stride} of an embedded store's cell")
    whole = len(raw) // stride * stride
    values = np.frombuffer(raw, np.uint8, whole).reshape(stride, -1).T
    return values.tobytes() + raw[whole:]


def unpacked_length(packed: bytes) -> int:
    """The length of the value, read from the header (nothing inflated)."""
    return int.from_bytes(packed[2:HEADER_BYTES], "little")


def _planes(value: bytes, stride: int) -> bytes | None:
    whole = len(value) // stride * stride
    if whole < 2 * stride:
        return None
    values = np.frombuffer(value, np.uint8, whole).reshape(-1, stride)
    return values.T.tobytes() + value[whole:]


def _with_header(method: int, stride: int, length: int, body: bytes) -> bytes:
    return bytes((method, stride)) + length.to_bytes(4, "little") + body
