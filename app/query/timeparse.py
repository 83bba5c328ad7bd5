"""Query times and durations, as OpenTSDB's ``DateTime`` parses them.

Grammar (tried in this order; the result is epoch milliseconds)::

    time      = <digits> "ms"                      ; explicit milliseconds: "123123ms"
              | "now"                              ; case-insensitive
              | duration "-ago"                    ; relative: "1h-ago", "30s-AGO"
              | absolute                           ; contains "/" or ":"
              | <digits>                           ; <= 10 characters: seconds, else ms
              | <10 digits> "." <1-3 digits>       ; seconds with a millisecond fraction
    absolute  = yyyy/MM/dd | yyyy/MM/dd[-| ]HH:mm | yyyy/MM/dd[-| ]HH:mm:ss
    duration  = <digits> ("ms"|"s"|"m"|"h"|"d"|"w"|"n"|"y")   ; case-insensitive
                ; w = 7 d, n = 30 d, y = 365 d

Absolute dates are read in the given timezone (default UTC) and, like Java's lenient
``SimpleDateFormat``, out-of-range fields roll over (``2012/13/01`` is 2013/01/01).
Errors are :class:`BadRequestError` with OpenTSDB's messages. Two deliberate differences
(see ``docs/query-differences.md``): a duration must be exactly ``<digits><unit>`` (OpenTSDB
reads ``1.5h`` as ``1h``), and a dotted timestamp's fraction is milliseconds even with fewer
than three digits (OpenTSDB turns ``1355961603.41`` into a 1974 date).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.errors import BadRequestError

LONG_MAX = 2**63 - 1

_UNIT_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 7 * 86_400_000,
    "n": 30 * 86_400_000,
    "y": 365 * 86_400_000,
}

_DURATION = re.compile(r"([0-9]*)(.*)", re.DOTALL)
_EXPLICIT_MS = re.compile(r"[0-9]+ms")
_DOTTED_MS = re.compile(r"([0-9]{10})\.([0-9]{1,3})")
_ABSOLUTE = {
    10: re.compile(r"(\d+)/(\d+)/(\d+)", re.ASCII),
    16: re.compile(r"(\d+)/(\d+)/(\d+)[- ](\d+):(\d+)", re.ASCII),
    19: re.compile(r"(\d+)/(\d+)/(\d+)[- ](\d+):(\d+):(\d+)", re.ASCII),
}

# Java's short zone IDs that the IANA database does not carry; Java maps them like this.
_JAVA_ZONE_ALIASES = {
    "PST": "America/Los_Angeles",
    "CST": "America/Chicago",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "AET": "Australia/Sydney",
    "BST": "Asia/Dhaka",
    "CTT": "Asia/Shanghai",
    "ECT": "Europe/Paris",
}


def parse_duration_ms(text: str) -> int:
    """``1h`` → 3600000. Raises OpenTSDB's ``Invalid duration ...`` messages."""
    if not text:
        raise BadRequestError("Cannot parse null or empty duration")
    match = _DURATION.fullmatch(text)
    assert match is not None  # the pattern matches any string
    digits, unit = match.group(1), match.group(2).lower()
    if not unit:
        raise BadRequestError(f"Invalid duration, must have an integer and unit: {text}")
    if not digits or len(digits) > 19 or int(digits) > LONG_MAX:
        raise BadRequestError(f"Invalid duration (number): {text}")
    count = int(digits)
    if count <= 0:
        raise BadRequestError(f"Zero or negative duration: {text}")
    if unit not in _UNIT_MS:
        raise BadRequestError(f"Invalid duration (suffix): {text}")
    duration_ms = count * _UNIT_MS[unit]
    if duration_ms > LONG_MAX:
        raise BadRequestError(f"Duration must be < Long.MAX_VALUE ms: {text}")
    return duration_ms


def zone(tz: str) -> ZoneInfo:
    """The named timezone; raises ``KeyError`` for unknown names (callers pick the message)."""
    name = _JAVA_ZONE_ALIASES.get(tz, tz)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise KeyError(tz) from exc


def is_known_timezone(tz: str) -> bool:
    try:
        zone(tz)
    except KeyError:
        return False
    return True


def parse_time(text: str, now_ms: int, tz: str = "UTC") -> int:
    """Parse a query ``start``/``end`` value to epoch milliseconds (see the module grammar)."""
    if not text:
        raise BadRequestError("Missing time value")
    lowered = text.lower()
    if _EXPLICIT_MS.fullmatch(text):
        return int(text[:-2])
    if lowered == "now":
        return now_ms
    if lowered.endswith("-ago"):
        return now_ms - parse_duration_ms(text[:-4])
    if "/" in text or ":" in text:
        return _parse_absolute(text, tz)
    return _parse_numeric(text)


def _parse_absolute(text: str, tz: str) -> int:
    pattern = _ABSOLUTE.get(len(text))
    if pattern is None:
        raise BadRequestError(f"Invalid absolute date: {text}")
    try:
        tzinfo = zone(tz or "UTC")
    except KeyError:
        raise BadRequestError(f"Invalid timezone name: {tz}") from None
    match = pattern.fullmatch(text)
    if match is None:
        raise BadRequestError(f'Invalid date: {text}. Unparseable date: "{text}"')
    fields = [int(group) for group in match.groups()] + [0, 0, 0]
    year, month, day, hour, minute, second = fields[:6]
    try:
        # Lenient like SimpleDateFormat: month 13 is next January, day 0 the previous month's last.
        year += (month - 1) // 12
        wall = datetime(year, (month - 1) % 12 + 1, 1) + timedelta(
            days=day - 1, hours=hour, minutes=minute, seconds=second)
    except (ValueError, OverflowError):
        raise BadRequestError(f'Invalid date: {text}. Unparseable date: "{text}"') from None
    return int(wall.replace(tzinfo=tzinfo).timestamp()) * 1000


def _parse_numeric(text: str) -> int:
    if "." in text:
        match = _DOTTED_MS.fullmatch(text)
        if match is None:
            raise BadRequestError(
                f"Invalid time: {text}. Millisecond timestamps must be in the format "
                "<seconds>.<ms> where the milliseconds are limited to 3 digits")
        return int(match.group(1)) * 1000 + int(match.group(2).ljust(3, "0"))
    try:
        value = java_parse_long(text)
    except ValueError as exc:
        raise BadRequestError(f"Invalid time: {text}. {exc}") from None
    if value < 0:
        raise BadRequestError(f"Invalid time: {text}. Negative timestamps are not supported.")
    # OpenTSDB's rule: up to 10 characters are seconds, longer strings milliseconds.
    return value * 1000 if len(text) <= 10 else value


def java_parse_long(text: str) -> int:
    """OpenTSDB's ``Tags.parseLong``, with its error messages (raised as ``ValueError``)."""
    if not text:
        raise ValueError("Empty string")
    digits = text
    if text[0] in "+-":
        if len(text) == 1:
            raise ValueError(f"Just a sign, no value: {text}")
        if len(text) > 20:
            raise ValueError(f"Value too long: {text}")
        digits = text[1:]
    elif len(text) > 19:
        raise ValueError(f"Value too long: {text}")
    for char in digits:
        if not "0" <= char <= "9":
            raise ValueError(f"Invalid character '{char}' in {text}")
    value = -int(digits) if text[0] == "-" else int(digits)
    if not -(2**63) <= value <= LONG_MAX:
        raise ValueError(f"Overflow in {text}")
    return value
