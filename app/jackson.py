"""How Java and Jackson print values, for OpenTSDB's exact JSON (pure; imports nothing).

Annotations, meta data, trees and query answers all need the same pieces: a string literal as
Jackson's generator escapes it, a double as ``Double.toString`` prints it, ``String.hashCode``
(which names tree leaves) and the order a copied ``HashMap`` iterates its keys in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

_JACKSON_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                          "\f": "\\f", "\r": "\\r"}


def jackson_string(text: str) -> str:
    """A JSON string literal as Jackson's default generator writes it."""
    out = ['"']
    for char in text:
        escaped = _JACKSON_SHORT_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be", errors="surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_double(value: float) -> str:
    """Java's ``Double.toString`` (shortest digits), NaN/Infinity quoted as Jackson does."""
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        return repr(value)  # Python's shortest repr is positional in this range, like Java
    text = repr(magnitude)
    if "e" in text:
        mantissa, exp_text = text.split("e")
        digits, exponent = mantissa.replace(".", ""), int(exp_text)
    else:
        whole, frac = text.split(".")
        if whole != "0":
            digits, exponent = whole + frac, len(whole) - 1
        else:
            zeros = len(frac) - len(frac.lstrip("0"))
            digits, exponent = frac[zeros:], -(zeros + 1)
    digits = digits.rstrip("0") or "0"
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def java_hashmap_iteration(keys: Iterable[str], capacity: int = 16) -> list[str]:
    """``keys`` (insertion order, repeats ignored) in the order a Java 8+ ``HashMap`` made
    with ``capacity`` iterates them.

    Iteration goes bucket by bucket, the bucket being ``(h ^ (h >>> 16)) & (capacity - 1)`` of
    ``String.hashCode``; keys sharing a bucket keep their insertion order. The table doubles
    once it holds more than ``capacity * 0.75`` keys, and a resize splits buckets without
    reordering them, so the order follows from the final capacity alone.
    """
    unique = list(dict.fromkeys(keys))
    capacity = _table_size_for(max(capacity, 1))
    while len(unique) > int(capacity * 0.75):
        capacity <<= 1
    position = {key: i for i, key in enumerate(unique)}

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=lambda key: (bucket(key), position[key]))


def java_hashmap_order(keys: Iterable[str], capacity: int = 0) -> list[str]:
    """The iteration order of ``new HashMap<>(map)`` over these keys.

    OpenTSDB's ``setCustom`` copies the map it is given, so the table is sized by the copy
    constructor: ``tableSizeFor((int) (size / 0.75f + 1))``; ``capacity`` instead names a
    map made with that capacity (``new HashMap<>()``: 16). The keys go in sorted, so the order
    is a fixed point of OpenTSDB's parse-then-write round trip whatever order they came in.
    """
    ordered = sorted(keys)
    return java_hashmap_iteration(ordered, capacity or int(len(ordered) / 0.75 + 1))


def _table_size_for(wanted: int) -> int:
    capacity = 1
    while capacity < wanted:
        capacity <<= 1
    return capacity
