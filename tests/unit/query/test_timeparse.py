"""Query time parsing: spec §3 and §9 F, cases from OpenTSDB's ``test/utils/TestDateTime.java``."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.query.timeparse import parse_duration_ms, parse_time

NOW_MS = 1357041600000  # an arbitrary "now": 2013-01-01T12:00:00Z
DAY_MS = 86_400_000


@pytest.mark.parametrize(("text", "expected_ms"), [
    # TestDateTime#parseDateTimeStringAbsolute* (GMT): hand-checked epoch values
    ("2012/12/20", 1355961600000),
    ("2012/12/20 12:42", 1356007320000),
    ("2012/12/20-12:42", 1356007320000),
    ("2012/12/20 12:42:42", 1356007362000),
    ("2012/12/20-12:42:42", 1356007362000),
    # SimpleDateFormat is lenient: month 13 rolls into the next year (spec §3 item 5)
    ("2012/13/01", 1356998400000),
    # #parseDateTimeStringShortExplicitMS, #parseDateTimeStringNow
    ("123123ms", 123123),
    ("now", NOW_MS),
    ("NOW", NOW_MS),
    # relative: #parseDateTimeStringRelative{S,M,H,D,W,N,Y}
    ("60s-ago", NOW_MS - 60_000),
    ("1h-ago", NOW_MS - 3_600_000),
    ("1H-AGO", NOW_MS - 3_600_000),
    ("500ms-ago", NOW_MS - 500),
    ("2w-ago", NOW_MS - 14 * DAY_MS),
    ("2n-ago", NOW_MS - 2 * 30 * DAY_MS),
    ("2y-ago", NOW_MS - 2 * 365 * DAY_MS),
    # unix: up to 10 characters are seconds, longer is ms (#parseDateTimeStringUnixSeconds,
    # #parseDateTimeStringUnixSecondsInvalidLong, #parseDateTimeStringUnixMS)
    ("1355961600", 1355961600000),
    ("0", 0),
    ("13559616000", 13559616000),
    ("1355961600000", 1355961600000),
    ("1355961603.418", 1355961603418),
    # Deliberate difference (docs/query-differences.md): OpenTSDB gives 135596160341 and
    # 13559616034 here (#parseDateTimeStringUnixMSDotShorter, #...DotShortest).
    ("1355961603.41", 1355961603410),
    ("1355961603.4", 1355961603400),
])
def test_parse_time(text: str, expected_ms: int) -> None:
    assert parse_time(text, NOW_MS) == expected_ms


@pytest.mark.parametrize(("text", "tz", "expected_ms"), [
    # 2012-12-20 00:00 EST is 05:00 UTC: 1355961600000 + 5 h
    ("2012/12/20", "EST", 1355979600000),
    # 2013-01-01 00:00 in Denver (UTC-7) is 07:00 UTC
    ("2013/01/01", "America/Denver", 1357023600000),
    # a Java short zone id the IANA database lacks
    ("2013/01/01", "PST", 1357027200000),
    # relative and numeric times ignore the zone
    ("1355961600", "America/Denver", 1355961600000),
])
def test_parse_time_in_zone(text: str, tz: str, expected_ms: int) -> None:
    assert parse_time(text, NOW_MS, tz) == expected_ms


@pytest.mark.parametrize(("text", "message"), [
    ("2012/12/", "Invalid absolute date: 2012/12/"),  # #parseDateTimeStringBadAbsolute
    ("2012/12/2x", 'Invalid date: 2012/12/2x. Unparseable date: "2012/12/2x"'),
    ("1s", "Invalid time: 1s. Invalid character 's' in 1s"),  # #parseDateTimeStringBadRelative
    ("1355961603.4180", "Invalid time: 1355961603.4180. Millisecond timestamps must be in "
                        "the format <seconds>.<ms> where the milliseconds are limited to 3 "
                        "digits"),  # #parseDateTimeStringUnixMSDotInvalid2
    ("-1", "Invalid time: -1. Negative timestamps are not supported."),
    ("1355961603000000000000", "Invalid time: 1355961603000000000000. Value too long: "
                               "1355961603000000000000"),  # #parseDateTimeStringTooBig
    ("1x-ago", "Invalid duration (suffix): 1x"),
])
def test_parse_time_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_time(text, NOW_MS)
    assert info.value.message == message
    assert info.value.code == 400


def test_unknown_timezone_for_absolute_date() -> None:
    with pytest.raises(BadRequestError, match="^Invalid timezone name: Mars/Olympus$"):
        parse_time("2012/12/20", NOW_MS, "Mars/Olympus")


@pytest.mark.parametrize(("text", "expected_ms"), [
    ("1ms", 1), ("500ms", 500), ("1MS", 1), ("1s", 1000), ("1m", 60_000), ("1h", 3_600_000),
    ("1d", DAY_MS), ("1w", 7 * DAY_MS), ("1n", 30 * DAY_MS), ("1y", 365 * DAY_MS),
    ("15M", 900_000),
])
def test_parse_duration(text: str, expected_ms: int) -> None:
    assert parse_duration_ms(text) == expected_ms


@pytest.mark.parametrize(("text", "message"), [
    ("", "Cannot parse null or empty duration"),
    ("10", "Invalid duration, must have an integer and unit: 10"),
    ("h", "Invalid duration (number): h"),
    ("0s", "Zero or negative duration: 0s"),
    ("1x", "Invalid duration (suffix): 1x"),
    # OpenTSDB reads the leading digits and the last character, so "1.5h" is 1h there.
    ("1.5h", "Invalid duration (suffix): 1.5h"),
    ("999999999999y", "Duration must be < Long.MAX_VALUE ms: 999999999999y"),
])
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_duration_ms(text)
    assert info.value.message == message
