"""OpenTSDB 2.4's HBase byte format for the ``tsdb`` data table: pure encode and decode.

Grammar (big-endian throughout; widths in bytes unless marked as bits)::

    RowKey        = [salt(salt_width)] metric_uid base_time_s(4) (tagk_uid tagv_uid)*
    TSUID         = metric_uid (tagk_uid tagv_uid)*          ; tag pairs sorted by tagk uid bytes
    salt          = bucket(salt_width), bucket = |java_array_hash(metric_uid tags) % salt_buckets|
                    ; the global annotation row (all-zero metric uid) keeps an all-zero salt
    Qualifier(s)  = offset_s(12 bits) flags(4 bits)                                   ; 2 bytes
    Qualifier(ms) = 0xF(4 bits) offset_ms(22 bits) unused(2 bits) flags(4 bits)       ; 4 bytes
    flags         = is_float(1 bit) value_length_minus_1(3 bits)
    Value         = int(1|2|4|8, two's complement) | float32(4) | float64(8)
    Single cell   = Qualifier(s|ms) -> Value
    Compacted     = Qualifier(s|ms){2,} in time order -> Value{2,} meta(1)
    meta          = MS_MIXED_COMPACT (0x01) if s and ms qualifiers are mixed, else 0x00
    Append        = 0x05 0x00 0x00 -> (Qualifier(s|ms) Value)* in write order
    Annotation    = 0x01 offset_s(2) | 0x01 offset_ms(4) -> JSON     ; odd length: never data

A timestamp ``ts`` is in milliseconds when ``ts & SECOND_MASK`` (``ts >= 2**32``), else in
seconds. This module is the public face: row keys, value and qualifier encoding, annotations.
Cell parsing, fixups and compaction live in :mod:`app.storage.codec_cells`, the vectorised row
decoder in :mod:`app.storage.codec_decode`; both are re-exported here. Corrupt cells raise
:class:`IllegalDataError`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from app.storage.codec_cells import (
    ANNOTATION_PREFIX,
    APPEND_COLUMN_PREFIX,
    APPEND_QUALIFIER,
    DATA_PREFIX,
    FLAG_BITS,
    FLAG_FLOAT,
    FLAGS_MASK,
    LENGTH_MASK,
    MAX_TIMESPAN,
    MS_BYTE_FLAG,
    MS_FLAG,
    MS_FLAG_BITS,
    MS_MIXED_COMPACT,
    SECOND_MASK,
    TIMESTAMP_BYTES,
    IllegalDataError,
    compact_cells,
)
from app.storage.codec_decode import DecodedRow, decode_row, decode_rows

# --- row keys ------------------------------------------------------------------------------


def java_array_hash(data: bytes) -> int:
    """Java's ``Arrays.hashCode(byte[])``: signed bytes, ``31 * h + b`` with int32 overflow."""
    h = 1
    for b in data:
        h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def salt_bucket(salt_base: bytes, salt_buckets: int) -> int:
    """``RowKey.prefixKeyWithSalt``'s bucket: ``hash % buckets`` made positive (Java's ``%``)."""
    return abs(java_array_hash(salt_base)) % salt_buckets


class RowKeyParts(NamedTuple):
    salt: bytes
    metric_uid: bytes
    base_time_s: int
    tags: tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class RowKeyLayout:
    """UID widths and salting of one TSD's row keys (``tsd.storage.uid.width.*``, ``salt.*``)."""

    metric_width: int = 3
    tagk_width: int = 3
    tagv_width: int = 3
    salt_width: int = 0
    salt_buckets: int = 20

    def __post_init__(self) -> None:
        for width in (self.metric_width, self.tagk_width, self.tagv_width):
            if not 1 <= width <= 8:
                raise ValueError(f"UID widths must be 1..8 bytes, not {width}")
        if not 0 <= self.salt_width <= 8 or self.salt_buckets < 1:
            raise ValueError("salt width must be 0..8 bytes and salt buckets at least 1")
        if self.salt_width and self.salt_buckets > 1 << (8 * self.salt_width):
            raise ValueError(f"{self.salt_buckets} salt buckets do not fit in "
                             f"{self.salt_width} salt bytes")

    @property
    def tags_start(self) -> int:
        return self.salt_width + self.metric_width + TIMESTAMP_BYTES

    def row_key(self, metric_uid: bytes, base_time_s: int,
                tags: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The salted row key; tag pairs are sorted by tagk uid bytes as OpenTSDB does."""
        _check_width(metric_uid, self.metric_width, "metric")
        pairs = sorted(tags)
        for tagk, tagv in pairs:
            _check_width(tagk, self.tagk_width, "tagk")
            _check_width(tagv, self.tagv_width, "tagv")
        if len({tagk for tagk, _ in pairs}) != len(pairs):
            raise ValueError("duplicate tagk uid in row key")
        tail = b"".join(tagk + tagv for tagk, tagv in pairs)
        return self._salted(metric_uid + _pack_base_time(base_time_s) + tail)

    def parse_row_key(self, key: bytes) -> RowKeyParts:
        self._check_key(key)
        salt_end = self.salt_width
        metric_end = salt_end + self.metric_width
        (base,) = struct.unpack_from(">I", key, metric_end)
        pair = self.tagk_width + self.tagv_width
        tags = tuple((key[i:i + self.tagk_width], key[i + self.tagk_width:i + pair])
                     for i in range(self.tags_start, len(key), pair))
        return RowKeyParts(key[:salt_end], key[salt_end:metric_end], base, tags)

    def tsuid(self, key: bytes) -> bytes:
        """Metric uid and tag pairs of a row key: no salt, no base time."""
        self._check_key(key)
        return key[self.salt_width:self.salt_width + self.metric_width] + key[self.tags_start:]

    def row_key_from_tsuid(self, tsuid: bytes, base_time_s: int) -> bytes:
        tags_len = len(tsuid) - self.metric_width
        if tags_len < 0 or tags_len % (self.tagk_width + self.tagv_width):
            raise ValueError(f"TSUID {tsuid.hex().upper()} does not match the UID widths")
        metric = tsuid[:self.metric_width]
        return self._salted(metric + _pack_base_time(base_time_s) + tsuid[self.metric_width:])

    def salt_prefixes(self) -> list[bytes]:
        """Every salt a row key may start with, in bucket order (``[b""]`` when unsalted)."""
        if not self.salt_width:
            return [b""]
        return [self._salt_bytes(bucket) for bucket in range(self.salt_buckets)]

    def global_annotation_row(self, base_time_s: int) -> bytes:
        """Zero salt, zero metric uid, base time: where global annotations live."""
        return bytes(self.salt_width + self.metric_width) + _pack_base_time(base_time_s)

    def metric_scan_range(self, salt: bytes, metric_uid: bytes, start_s: int,
                          end_s: int) -> tuple[bytes, bytes]:
        """``[start, stop)`` keys of the hour rows of one salt and metric covering
        ``start_s..end_s`` (both inclusive, in seconds)."""
        _check_width(salt, self.salt_width, "salt")
        _check_width(metric_uid, self.metric_width, "metric")
        if start_s < 0 or end_s < start_s:
            raise ValueError(f"bad scan range {start_s}..{end_s}")
        prefix = salt + metric_uid
        start = prefix + _pack_base_time(start_s - start_s % MAX_TIMESPAN)
        stop_s = end_s - end_s % MAX_TIMESPAN + MAX_TIMESPAN
        if stop_s <= 0xFFFFFFFF:
            return start, prefix + _pack_base_time(stop_s)
        return start, _next_prefix(prefix)

    def _salted(self, unsalted: bytes) -> bytes:
        if not self.salt_width:
            return unsalted
        metric = unsalted[:self.metric_width]
        if not any(metric):
            return bytes(self.salt_width) + unsalted  # the global annotation row
        salt_base = metric + unsalted[self.metric_width + TIMESTAMP_BYTES:]
        return self._salt_bytes(salt_bucket(salt_base, self.salt_buckets)) + unsalted

    def _salt_bytes(self, bucket: int) -> bytes:
        """``RowKey.getSaltBytes``: the bucket big-endian, truncated to the salt width."""
        return (bucket & ((1 << 8 * self.salt_width) - 1)).to_bytes(self.salt_width, "big")

    def _check_key(self, key: bytes) -> None:
        tags_len = len(key) - self.tags_start
        if tags_len < 0 or tags_len % (self.tagk_width + self.tagv_width):
            raise ValueError(f"row key {key.hex().upper()} does not match the layout {self}")


def _check_width(uid: bytes, width: int, kind: str) -> None:
    if len(uid) != width:
        raise ValueError(f"{kind} uid {uid.hex().upper()} is not {width} bytes wide")


def _pack_base_time(base_s: int) -> bytes:
    if not 0 <= base_s <= 0xFFFFFFFF or base_s % MAX_TIMESPAN:
        raise ValueError(f"base time {base_s} is not an hour boundary in 0..2**32-1 seconds")
    return base_s.to_bytes(TIMESTAMP_BYTES, "big")


def _next_prefix(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("a scan over an all-0xFF prefix has no upper bound")
    return stripped[:-1] + bytes((stripped[-1] + 1,))


# --- timestamps, values, qualifiers --------------------------------------------------------


def base_time_s(ts: int) -> int:
    """The hour-aligned row base time, in seconds, of a timestamp in seconds or milliseconds."""
    if ts < 0:
        raise ValueError(f"negative timestamp {ts}")
    seconds = ts // 1000 if ts & SECOND_MASK else ts
    return seconds - seconds % MAX_TIMESPAN


def encode_value(value: int | float) -> tuple[int, bytes]:
    """``(flags, bytes)`` as ``TSDB.addPoint`` stores it.

    Integers take the smallest of 1, 2, 4 or 8 bytes; a float takes 4 bytes when
    ``(float) d == d`` (``Tags.fitsInFloat``), else 8. NaN and infinities are rejected.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        number = int(value)
        for width in (1, 2, 4, 8):
            bound = 1 << (8 * width - 1)
            if -bound <= number < bound:
                return width - 1, number.to_bytes(width, "big", signed=True)
        raise ValueError(f"integer {number} does not fit in a signed 64-bit long")
    if not isinstance(value, (float, np.floating)):
        raise TypeError(f"a data point value must be an int or a float, not {type(value)}")
    d = float(value)
    if not math.isfinite(d):
        raise ValueError("value is NaN or Infinite")
    try:
        single = struct.pack(">f", d)
        fits = struct.unpack(">f", single)[0] == d
    except OverflowError:  # (float) d would be infinite
        fits = False
    if fits:
        return FLAG_FLOAT | 0x3, single
    return FLAG_FLOAT | 0x7, struct.pack(">d", d)


def build_qualifier(ts: int, flags: int) -> bytes:
    """``Internal.buildQualifier``: 2 bytes for a timestamp in seconds, 4 for milliseconds."""
    if not 0 <= flags <= FLAGS_MASK:
        raise ValueError(f"flags {flags:#x} do not fit in {FLAG_BITS} bits")
    base_s = base_time_s(ts)
    if ts & SECOND_MASK:
        offset_ms = ts - base_s * 1000
        return ((offset_ms << MS_FLAG_BITS) | flags | MS_FLAG).to_bytes(4, "big")
    return (((ts - base_s) << FLAG_BITS) | flags).to_bytes(2, "big")


def point_cell(ts: int, value: int | float) -> tuple[int, bytes, bytes]:
    """``(base_time_s, qualifier, value_bytes)`` of one data point's single cell."""
    flags, raw = encode_value(value)
    return base_time_s(ts), build_qualifier(ts, flags), raw


def append_entry(ts: int, value: int | float) -> bytes:
    """Bytes to append to the ``APPEND_QUALIFIER`` column of the point's row."""
    flags, raw = encode_value(value)
    return build_qualifier(ts, flags) + raw


# --- annotations ---------------------------------------------------------------------------


def annotation_qualifier(ts: int) -> bytes:
    """``Annotation.getQualifier`` (2.4): 0x01 + 2-byte offset in s, or + 4-byte offset in ms."""
    if ts < 1:
        raise ValueError("The start timestamp has not been set")
    base_s = base_time_s(ts)
    prefix = bytes((ANNOTATION_PREFIX,))
    if ts & SECOND_MASK:
        return prefix + (ts - base_s * 1000).to_bytes(4, "big")
    return prefix + (ts - base_s).to_bytes(2, "big")


def is_annotation_qualifier(q: bytes) -> bool:
    return len(q) in (3, 5) and q[0] == ANNOTATION_PREFIX


def annotation_offset_ms(qualifier: bytes, base_time_s: int) -> int:
    """The annotation's start time, in absolute milliseconds, from its qualifier and row."""
    if not is_annotation_qualifier(qualifier):
        raise ValueError(f"not an annotation qualifier: {qualifier.hex().upper()}")
    offset = int.from_bytes(qualifier[1:], "big")
    return base_time_s * 1000 + (offset * 1000 if len(qualifier) == 3 else offset)


__all__ = [
    "ANNOTATION_PREFIX", "APPEND_COLUMN_PREFIX", "APPEND_QUALIFIER", "DATA_PREFIX", "FLAGS_MASK",
    "FLAG_BITS",
    "FLAG_FLOAT", "LENGTH_MASK", "MAX_TIMESPAN", "MS_BYTE_FLAG", "MS_FLAG", "MS_FLAG_BITS",
    "MS_MIXED_COMPACT", "SECOND_MASK", "TIMESTAMP_BYTES", "DecodedRow", "IllegalDataError",
    "RowKeyLayout", "RowKeyParts", "annotation_offset_ms", "annotation_qualifier",
    "append_entry", "base_time_s", "build_qualifier", "compact_cells", "decode_row",
    "decode_rows", "encode_value", "is_annotation_qualifier", "java_array_hash", "point_cell",
    "salt_bucket",
]
