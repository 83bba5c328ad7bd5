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
