"""How Java and Jackson print values, for OpenTSDB's exact JSON (pure; imports nothing).

Annotations, meta data, trees and query answers all need the same three: a string literal as
Jackson's generator escapes it, a double as ``Double.toString`` prints it, and
``String.hashCode`` (which orders Java's ``HashMap`` keys and names tree leaves).
"""

from __future__ import annotations

import math

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
