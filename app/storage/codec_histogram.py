"""Histogram cells as OpenTSDB 2.4 stores them (``HistogramDataPoint``, ``SimpleHistogram``).

A histogram point is one cell in the data row of its series' hour:

* qualifier: the prefix byte ``0x06`` then the offset from the row's base time, 2 bytes of
  seconds or 4 bytes of milliseconds (``Internal.getQualifier``): 3 or 5 bytes, never
  compacted, never appended (odd lengths, so the numeric decoder skips them);
* value: the codec id (one byte, from ``tsd.core.histograms.config``) then the codec's bytes.

The built-in codec (``net.opentsdb.core.SimpleHistogramDecoder``) writes with Kryo 2.21:
a big-endian short bucket count, then per bucket (in ``HistogramBucket`` order: lower bound,
then upper bound, by ``Float.compare``) two big-endian IEEE floats and a count as a Kryo
varlong, then the underflow and overflow counts as varlongs. Pure: no IO.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

PREFIX = 0x06
SIMPLE_CODEC = "net.opentsdb.core.SimpleHistogramDecoder"
LONG_MASK = (1 << 64) - 1
MIN_RAW_BYTES = 6  # SimpleHistogram#fromHistogram refuses anything shorter

Bounds = tuple[float, float]


class HistogramCodecError(ValueError):
    """Bytes or settings OpenTSDB's codec manager would refuse (its message)."""


# --- the cell's qualifier ----------------------------------------------------------------


def histogram_qualifier(timestamp: int) -> tuple[int, bytes]:
    """``(base_time_s, qualifier)`` of a histogram point (seconds or ms, SECOND_MASK rule)."""
    if timestamp & ~0xFFFFFFFF:  # milliseconds
        base_s = timestamp // 1000 - (timestamp // 1000) % 3600
        return base_s, bytes([PREFIX]) + (timestamp - base_s * 1000).to_bytes(4, "big")
    base_s = timestamp - timestamp % 3600
    return base_s, bytes([PREFIX]) + (timestamp - base_s).to_bytes(2, "big")


def is_histogram_qualifier(qualifier: bytes) -> bool:
    return len(qualifier) in (3, 5) and qualifier[0] == PREFIX


def histogram_time_ms(base_time_s: int, qualifier: bytes) -> int:
    """``Internal.getTimeStampFromNonDP``: the point's time in milliseconds."""
    if len(qualifier) == 3:
        return (base_time_s + int.from_bytes(qualifier[1:], "big")) * 1000
    return base_time_s * 1000 + int.from_bytes(qualifier[1:], "big")


# --- Java's float: order, text --------------------------------------------------------------


def to_float32(value: float) -> float:
    """``Float.parseFloat`` / a ``(float)`` cast: the nearest float, as a Python float."""
    try:
        return float(struct.unpack(">f", struct.pack(">f", value))[0])
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def float_order(value: float) -> int:
    """A key sorting floats as ``Float.compare`` does (-0.0 before 0.0, NaN last)."""
    if value != value:
        bits = 0x7FC00000
    else:
        bits = struct.unpack(">i", struct.pack(">f", value))[0]
    return bits if bits >= 0 else bits ^ 0x7FFFFFFF


def java_float_text(value: float) -> str:
    """``Float.toString`` of ``value`` made a float: the shortest digits that read back as
    the same float, in Java's layout."""
    value = to_float32(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if struct.pack(">f", value)[0] & 0x80 else ""
    magnitude = abs(value)
    if magnitude == 0:
        return sign + "0.0"
    digits, exponent = _shortest_float32(magnitude)
    if 1e-3 <= magnitude < 1e7:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            frac = digits[exponent + 1:] or "0"
        else:
            whole, frac = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac}"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{exponent}"


def _shortest_float32(magnitude: float) -> tuple[str, int]:
    """(significant digits, decimal exponent of the first) of the shortest round-trip text."""
    for precision in range(1, 10):
        text = f"{magnitude:.{precision - 1}e}"
        if to_float32(float(text)) == magnitude:
            mantissa, exp_text = text.split("e")
            return mantissa.replace(".", "").rstrip("0") or "0", int(exp_text)
    raise AssertionError("a float needs at most 9 digits")


# --- Kryo's varlong (optimizePositive) ------------------------------------------------------


def write_varlong(value: int) -> bytes:
    """Kryo 2.21 ``Output.writeLong(value, true)``: 7 bits a byte, low first; 9th byte whole."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    v = value & LONG_MASK
    out = bytearray()
    for _ in range(8):
        if v >> 7 == 0:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v & 0xFF)
    return bytes(out)


_SMALL = [bytes([v]) for v in range(0x80)]


def read_varlong(raw: bytes, pos: int) -> tuple[int, int]:
    """Kryo's ``Input.readLong(true)``: ``(signed value, next position)``."""
    result = 0
    for i in range(9):
        if pos >= len(raw):
            raise HistogramCodecError("Buffer underflow.")
        byte = raw[pos]
        pos += 1
        if i == 8:
            result |= byte << 56
            break
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            break
    return result - (1 << 64) if result >> 63 else result, pos


# --- the simple-bucket histogram ------------------------------------------------------------


@dataclass
class SimpleHistogram:
    """``SimpleHistogram``: counts per ``[lower, upper]`` bucket (float bounds), plus the
    underflow and overflow counts. Buckets are keyed by their ``Float.compare`` order."""

    codec_id: int
    buckets: dict[tuple[int, int], tuple[Bounds, int]] = field(default_factory=dict)
    underflow: int = 0
    overflow: int = 0

    def add_bucket(self, lower: float, upper: float, count: int) -> None:
        """Set one bucket's count (replacing the count of an equal bucket, as a TreeMap put)."""
        lower, upper = to_float32(lower), to_float32(upper)
        self.buckets[(float_order(lower), float_order(upper))] = ((lower, upper), count)

    def ordered(self) -> list[tuple[Bounds, int]]:
        return [self.buckets[key] for key in sorted(self.buckets)]

    def copy(self) -> SimpleHistogram:
        return SimpleHistogram(self.codec_id, dict(self.buckets), self.underflow, self.overflow)

    def add(self, other: SimpleHistogram) -> None:
        """``aggregate(other, SUM)``: counts added bucket by bucket (new buckets join)."""
        for key, (bounds, count) in other.buckets.items():
            mine = self.buckets.get(key)
            self.buckets[key] = (bounds, _long(count + (mine[1] if mine else 0)))
        self.overflow = _long(self.overflow + other.overflow)
        self.underflow = _long(self.underflow + other.underflow)

    def percentile(self, percentile: float) -> float:
        """``SimpleHistogram#percentile``: the middle of the first bucket whose running count
        reaches ``percentile`` % of all bucket counts (under/overflow left out); -1 outside
        [1, 100]; 0 when no bucket reaches it. Counts are summed as Java ints, as 2.4 does."""
        if percentile < 1.0 or percentile > 100.0:
            return -1.0
        ordered = self.ordered()
        total = _int(sum(_int(count) for _, count in ordered))
        running = 0
        for (lower, upper), count in ordered:
            running = _long(running + _int(count))
            area = _java_div(running * 100.0, total)
            if area >= percentile:
                return float(to_float32(lower + upper) / 2)
        return 0.0


def _long(value: int) -> int:
    value &= LONG_MASK
    return value - (1 << 64) if value >> 63 else value


def _int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _java_div(numerator: float, denominator: int) -> float:
    if denominator:
        return numerator / denominator
    if numerator == 0:
        return float("nan")
    return float("inf") if numerator > 0 else float("-inf")


def encode_simple(histogram: SimpleHistogram, include_id: bool = True) -> bytes:
    """``SimpleHistogram#histogram(include_id)``."""
    ordered = histogram.ordered()
    out = bytearray()
    if include_id:
        out.append(histogram.codec_id & 0xFF)
    out += struct.pack(">H", len(ordered) & 0xFFFF)
    for (lower, upper), count in ordered:
        out += struct.pack(">ff", lower, upper) + write_varlong(count)
    out += write_varlong(histogram.underflow) + write_varlong(histogram.overflow)
    return bytes(out)


def decode_simple(raw: bytes, codec_id: int, includes_id: bool = True) -> SimpleHistogram:
    """``SimpleHistogram#fromHistogram``: buckets as stored (a short count, signed)."""
    if len(raw) < MIN_RAW_BYTES:
        raise HistogramCodecError(f"Byte array shorter than 6 bytes detected: {_pretty(raw)}")
    pos = 1 if includes_id else 0
    count = struct.unpack(">h", raw[pos:pos + 2])[0]
    pos += 2
    histogram = SimpleHistogram(codec_id)
    buckets = histogram.buckets
    for _ in range(max(count, 0)):
        if pos + 8 > len(raw):
            raise HistogramCodecError("Buffer underflow.")
        order, bounds = _stored_bounds(raw[pos:pos + 8])
        if pos + 8 < len(raw) and raw[pos + 8] < 0x80:  # a one-byte count: the common case
            buckets[order], pos = (bounds, raw[pos + 8]), pos + 9
        else:
            value, pos = read_varlong(raw, pos + 8)
            buckets[order] = (bounds, value)
    histogram.underflow, pos = read_varlong(raw, pos)
    histogram.overflow, pos = read_varlong(raw, pos)
    return histogram


@lru_cache(maxsize=4096)  # the same bucket layout comes back cell after cell
def _stored_bounds(raw: bytes) -> tuple[tuple[int, int], Bounds]:
    """Two stored floats → (the bucket's order key, its bounds)."""
    lower, upper = struct.unpack(">ff", raw)
    return (float_order(lower), float_order(upper)), (float(lower), float(upper))


def _pretty(raw: bytes) -> str:
    """asynchbase's ``Bytes.pretty``: a quoted string, non-printable bytes as ``\\xNN``."""
    text = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\x{b:02X}"
                   if b not in (34, 92) else "\\" + chr(b) for b in raw)
    return f'"{text}"'


# --- tsd.core.histograms.config -----------------------------------------------------------


@dataclass(frozen=True)
class HistogramCodecs:
    """``HistogramCodecManager``: codec class name by id. Only the simple codec is built in;
    cells of another configured codec are skipped on read and refused on write."""

    names: Mapping[int, str]

    @property
    def enabled(self) -> bool:
        return bool(self.names)

    def simple_id(self) -> int:
        for codec_id, name in self.names.items():
            if name == SIMPLE_CODEC:
                return codec_id
        raise HistogramCodecError(f"No codec ID assigned to class class {SIMPLE_CODEC}")

    def decode(self, raw: bytes, codec_id: int | None = None,
               includes_id: bool = True) -> SimpleHistogram:
        """A stored value (``includes_id``) or a client's bytes of codec ``codec_id``."""
        if codec_id is None:
            if not raw:
                raise HistogramCodecError("The data array cannot be empty.")
            codec_id = raw[0]
        if self.names.get(codec_id) != SIMPLE_CODEC:
            raise HistogramCodecError(f"No codec found mapped to ID {codec_id}")
        return decode_simple(raw, codec_id, includes_id)


def parse_codecs(setting: str) -> HistogramCodecs:
    """``tsd.core.histograms.config``: a JSON map of codec class to id, or a ``.json`` path.

    Empty: histograms are off (writes answer 503, reads find nothing).
    """
    text = setting.strip()
    if not text:
        return HistogramCodecs({})
    if text.endswith(".json"):
        text = Path(text).read_text(encoding="utf-8")
    try:
        mappings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistogramCodecError(f"Invalid tsd.core.histograms.config: {exc}") from None
    if not isinstance(mappings, dict):
        raise HistogramCodecError("tsd.core.histograms.config must map codec classes to IDs")
    names: dict[int, str] = {}
    for name, codec_id in _pairs(mappings.items()):
        if not 0 <= codec_id <= 255:
            raise HistogramCodecError(f"ID for codec '{name}' must be from 0 to 255.")
        if codec_id in names:
            raise HistogramCodecError(f"Duplicate ID found for codec '{name}': {codec_id}")
        names[codec_id] = name
    return HistogramCodecs(names)


def _pairs(items: Iterable[tuple[object, object]]) -> Iterable[tuple[str, int]]:
    for name, codec_id in items:
        if isinstance(codec_id, bool) or not isinstance(codec_id, int):
            raise HistogramCodecError(f"ID for codec '{name}' must be from 0 to 255.")
        yield str(name), codec_id
