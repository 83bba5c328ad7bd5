"""The line protocol's ``put`` parser: PutDataPointRpc.importDataPoint's order and messages."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.lineproto.parse import InvalidValue, PutParser, parse_long, parse_tags
from app.tsdb.points import PointBatch, java_bytes_text, java_hashmap_text


def parse(*lines: str) -> PointBatch:
    batch = PointBatch()
    parser = PutParser()
    for line in lines:
        parser.add(line.split(), batch)
    return batch


def messages(batch: PointBatch) -> list[str | None]:
    return [None if e is None else e.message for e in batch.errors]


def test_good_lines_become_columns() -> None:
    batch = parse("put sys.cpu 1356998400 42 host=a cpu=0",
                  "put sys.cpu 1356998401.500 -1.5 host=a cpu=0",
                  "put  sys.cpu   1356998402\t7e2 host=b")
    assert messages(batch) == [None, None, None]
    assert batch.timestamps == [1356998400, 1356998401500, 1356998402]
    assert batch.values == [42, -1.5, 700.0]
    assert [type(v) for v in batch.values] == [int, float, float]
    assert batch.series[batch.series_of[0]] == ("sys.cpu", (("host", "a"), ("cpu", "0")))
    assert batch.series_of[0] == batch.series_of[1] != batch.series_of[2]


@pytest.mark.parametrize(("line", "message", "kind"), [
    ("put", "not enough arguments (need least 4, got 0)", BadRequestError),
    ("put m 1356998400 1", "not enough arguments (need least 4, got 3)", BadRequestError),
    ("put m x 1 a=b", "Invalid character 'x' in x", InvalidValue),
    ("put m 12345678901234567890 1 a=b", "Value too long: 12345678901234567890", InvalidValue),
    ("put m -5 1 a=b", "invalid timestamp: -5", BadRequestError),
    ("put m 0 1 a=b", "invalid timestamp: 0", BadRequestError),
    ("put m 1356998400 1 a", "invalid tag: a", BadRequestError),
    ("put m 1356998400 1 a=", "invalid tag: a=", BadRequestError),
    ("put m 1356998400 1 =b", "invalid tag: =b", BadRequestError),
    ("put m 1356998400 1 a=b=c", "invalid tag: a=b=c", BadRequestError),
    ("put m 1356998400 1 a=b a=c", "duplicate tag: a=c, tags={a=b}", BadRequestError),
    ("put m 1356998400 1x a=b", "Invalid character 'x' in 1x", InvalidValue),
    ("put m 1356998400 NaN a=b", "Invalid character 'N' in NaN", InvalidValue),
    ("put m 1356998400 - a=b", "Just a sign, no value: -", InvalidValue),
    ("put m 1356998400 9223372036854775808 a=b", "Overflow in 9223372036854775808",
     InvalidValue),
    ("put m 1356998400 1.2.3 a=b", 'For input string: "1.2.3"', InvalidValue),
    ("put m 1356998400 1e999 a=b",
     "value is NaN or Infinite: Infinity for metric=m timestamp=1356998400", BadRequestError),
    # Tags are parsed before the value, as OpenTSDB does.
    ("put m 1356998400 x a", "invalid tag: a", BadRequestError),
])
def test_bad_lines(line: str, message: str, kind: type[Exception]) -> None:
    batch = parse("put m 1356998400 1 a=b", line, "put m 1356998401 2 a=b")
    assert messages(batch) == [None, message, None]
    assert type(batch.errors[1]) is kind
    assert batch.values[0::2] == [1, 2]


def test_same_value_twice_is_not_a_duplicate_tag() -> None:
    assert parse_tags(["a=b", "a=b"]) == (("a", "b"),)


def test_long_words_are_not_echoed_in_full() -> None:
    batch = parse("put m 1356998400 1 " + "x" * 100_000)
    [error] = messages(batch)
    assert error is not None and len(error) < 400 and error.startswith("invalid tag: xxx")


@pytest.mark.parametrize(("text", "value"), [
    ("+17", 17), ("-9223372036854775808", -2**63), ("9223372036854775807", 2**63 - 1)])
def test_parse_long(text: str, value: int) -> None:
    assert parse_long(text) == value


def test_java_hashmap_order() -> None:
    # String.hashCode: "host" = 3208616, "cpu" = 98728, "dc" = 3199; spread (h ^ h >>> 16)
    # and masked to 16 buckets: host 8, cpu 9, dc 15, whatever the insertion order.
    assert java_hashmap_text((("dc", "x"), ("cpu", "0"), ("host", "a"))) == \
        "{host=a, cpu=0, dc=x}"
    assert java_hashmap_text(()) == "{}"


def test_java_bytes_text() -> None:
    assert java_bytes_text(bytes.fromhex("3FF80000000000FF")) == "[63, -8, 0, 0, 0, 0, 0, -1]"


# Lines of one known series in every spelling the raw-line fast path must treat exactly as
# the word path does: each is parsed twice (the second time the series is known).
RAW_LINES = [
    b"put m 1356998400 42 host=a cpu=0",
    b"put m 1356998401 -7 host=a cpu=0",
    b"put m 1356998402 1.5 host=a cpu=0",
    b"put m 1356998403 007 host=a cpu=0",
    b"put m 0 1 host=a cpu=0",
    b"put m 01356998404 1 host=a cpu=0",
    b"put m 1356998405.250 3 host=a cpu=0",
    b"put m 1356998406 1x host=a cpu=0",
    b"put m 1356998407 1e999 host=a cpu=0",
    b"put m 1356998408 99999999999999999999 host=a cpu=0",
    b"put m 1356998409 5 host=a cpu=0 ",
    b"put m 1356998410 6 host=a  cpu=0",
    b"put m\t1356998411 7 host=a cpu=0",
    b"put m 1356998412 8 host=a\tcpu=0",
    b"put m 1356998413 9 host=a cpu=0 cpu=1",
    b"put m 1356998414 10 host=\xff cpu=0",
    b"put m 1356998415",
    # Decimal values, which add_lines takes inline for a known series.
    b"put m 1356998416 0.25 host=a cpu=0",
    b"put m 1356998417 1. host=a cpu=0",
    b"put m 1356998418 .5 host=a cpu=0",
    b"put m 1356998419 -.5 host=a cpu=0",
    b"put m 1356998420 -0 host=a cpu=0",
    b"put m 1356998421 -0.0 host=a cpu=0",
    b"put m 1356998422 1.2.3 host=a cpu=0",
    b"put m 1356998423 - host=a cpu=0",
    b"put m 1356998424 . host=a cpu=0",
    b"put m 1356998425 --5 host=a cpu=0",
    b"put m 1356998426 -.  host=a cpu=0",
    b"put m 1356998427 12345678901234567.5 host=a cpu=0",
    b"put m 1356998428 -999999999999999999 host=a cpu=0",
    b"put m 1356998429 +5 host=a cpu=0",
    b"put m 1356998430 5.-1 host=a cpu=0",
]


@pytest.mark.parametrize("together", [False, True], ids=["add_line", "add_lines"])
def test_raw_lines_parse_as_their_words_do(together: bool) -> None:
    lines = RAW_LINES + RAW_LINES  # the second round finds every good series known
    by_words, raw = PointBatch(), PointBatch()
    words_parser, raw_parser = PutParser(), PutParser()
    for line in lines:
        words_parser.add(line.decode("utf-8", "replace").split(), by_words)
    if together:  # a block's lines at once, as the server hands them over
        raw_parser.add_lines(lines[:len(RAW_LINES)], raw)
        raw_parser.add_lines(lines[len(RAW_LINES):], raw)
    else:
        for line in lines:
            raw_parser.add_line(line, raw)
    assert messages(raw) == messages(by_words)
    assert [type(e) for e in raw.errors] == [type(e) for e in by_words.errors]
    assert raw.timestamps == by_words.timestamps
    assert raw.values == by_words.values
    assert [type(v) for v in raw.values] == [type(v) for v in by_words.values]
    assert [None if k is None else raw.series[k] for k in raw.series_of] == \
        [None if k is None else by_words.series[k] for k in by_words.series_of]
    # Spelled out, not computed by the parser: the good points of one round.
    good = [(t, v) for t, v, e in zip(raw.timestamps, raw.values, raw.errors) if e is None]
    assert good[:8] == [(1356998400, 42), (1356998401, -7), (1356998402, 1.5),
                        (1356998403, 7), (1356998404, 1), (1356998405250, 3),
                        (1356998409, 5), (1356998410, 6)]


def test_a_known_series_still_checks_timestamp_and_value() -> None:
    batch, parser = PointBatch(), PutParser()
    for line in (b"put m 1356998400 1 a=b", b"put m 0 1 a=b", b"put m 1356998401 x a=b",
                 b"put m 1356998402 2 a=b"):
        parser.add_line(line, batch)
    assert messages(batch) == [None, "invalid timestamp: 0", "Invalid character 'x' in x",
                               None]
    assert batch.values[0::3] == [1, 2]


def test_a_known_series_decimal_values_take_no_call_per_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A block of a known series' lines with plain decimal values (what collectors send:
    ``-3``, ``0.25``) is parsed inline by add_lines, not line by line through add_line."""
    parser = PutParser()
    parser.add_lines([b"put m 1356998400 1 host=a"], PointBatch())  # the series is known now

    def no_call(*args: object) -> None:
        raise AssertionError("add_line was called")

    monkeypatch.setattr(parser, "add_line", no_call)
    batch = PointBatch()
    parser.add_lines([b"put m 1356998401 0.25 host=a", b"put m 1356998402 -3 host=a",
                      b"put m 1356998403 -1.5 host=a", b"put m 1356998404 7 host=a"], batch)
    assert messages(batch) == [None] * 4
    assert batch.values == [0.25, -3, -1.5, 7]
    assert [type(v) for v in batch.values] == [float, int, float, int]
