"""The histogram codec against OpenTSDB 2.4's test vectors (``TestSimpleHistogram``,
``TestHistogramDataPointRpc``) and Kryo 2.21's varlong layout; expected bytes written by hand."""

from __future__ import annotations

import pytest

from app.storage.codec_histogram import (
    HistogramCodecError,
    SimpleHistogram,
    decode_simple,
    encode_simple,
    histogram_qualifier,
    histogram_time_ms,
    is_histogram_qualifier,
    java_float_text,
    parse_codecs,
    read_varlong,
    write_varlong,
)

# TestSimpleHistogram#testToFromBytes: id 42, buckets 1-2 .. 8-9 with 5, 5, 5, then zeros,
# underflow 0, overflow 2.
GOLDEN = bytes.fromhex(
    "2a" "0008"
    "3f800000" "40000000" "05"
    "40000000" "40400000" "05"
    "40400000" "40800000" "05"
    "40800000" "40a00000" "00"
    "40a00000" "40c00000" "00"
    "40c00000" "40e00000" "00"
    "40e00000" "41000000" "00"
    "41000000" "41100000" "00"
    "00" "02")


def test_golden_bytes_round_trip() -> None:
    histogram = decode_simple(GOLDEN, 42)
    assert [bounds for bounds, _ in histogram.ordered()][:2] == [(1.0, 2.0), (2.0, 3.0)]
    assert histogram.overflow == 2 and histogram.underflow == 0
    assert encode_simple(histogram) == GOLDEN
    assert encode_simple(histogram, include_id=False) == GOLDEN[1:]
    assert encode_simple(decode_simple(GOLDEN[1:], 42, includes_id=False)) == GOLDEN


def test_buckets_are_written_in_bound_order_whatever_the_input_order() -> None:
    histogram = SimpleHistogram(0)
    histogram.add_bucket(5, 10, 1)
    histogram.add_bucket(0, 1, 300)
    assert encode_simple(histogram) == bytes.fromhex(
        "00" "0002" "00000000" "3f800000" "ac02" "40a00000" "41200000" "01" "00" "00")


@pytest.mark.parametrize(("value", "raw"), [
    (0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**56, "808080808080808001"),
    (-1, "ffffffffffffffffff"), (2**63 - 1, "ffffffffffffffff7f")])
def test_kryo_varlong(value: int, raw: str) -> None:
    assert write_varlong(value).hex() == raw
    assert read_varlong(bytes.fromhex(raw), 0) == (value, len(raw) // 2)


def test_qualifiers_seconds_and_milliseconds() -> None:
    # TestHistogramDataPointRpc: a point at the row's base time has qualifier 06 00 00
    assert histogram_qualifier(1356998400) == (1356998400, b"\x06\x00\x00")
    assert histogram_qualifier(1356998400 + 3599) == (1356998400, b"\x06\x0e\x0f")
    assert histogram_qualifier(1356998400500) == (1356998400, b"\x06\x00\x00\x01\xf4")
    assert histogram_time_ms(1356998400, b"\x06\x0e\x0f") == (1356998400 + 3599) * 1000
    assert histogram_time_ms(1356998400, b"\x06\x00\x00\x01\xf4") == 1356998400500
    assert is_histogram_qualifier(b"\x06\x00\x00")
    assert not is_histogram_qualifier(b"\x01\x00\x00")  # an annotation
    assert not is_histogram_qualifier(b"\x06\x00")      # a numeric point's qualifier


def test_percentile_is_the_middle_of_the_first_bucket_reaching_it() -> None:
    histogram = SimpleHistogram(0)
    for lower, upper, count in ((0, 1, 5), (1, 5, 10), (5, 10, 1)):
        histogram.add_bucket(lower, upper, count)
    histogram.overflow = 1000  # not counted
    assert histogram.percentile(50) == 3.0     # 15 of 16 reached in [1, 5]
    assert histogram.percentile(31.25) == 0.5  # exactly 5 of 16
    assert histogram.percentile(99.9) == 7.5
    assert histogram.percentile(100) == 7.5
    assert histogram.percentile(0.5) == -1.0   # below 1: OpenTSDB's -1
    assert SimpleHistogram(0).percentile(50) == 0.0


def test_sum_merges_equal_buckets_and_keeps_new_ones() -> None:
    a, b = SimpleHistogram(0), SimpleHistogram(0)
    a.add_bucket(0, 1, 2)
    b.add_bucket(0, 1, 3)
    b.add_bucket(1, 2, 4)
    b.underflow, b.overflow = 1, 2
    a.add(b)
    assert a.ordered() == [((0.0, 1.0), 5), ((1.0, 2.0), 4)]
    assert (a.underflow, a.overflow) == (1, 2)


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0.0"), (1.5, "1.5"), (100.0, "100.0"), (99.9, "99.9"), (0.001, "0.001"),
    (1e-4, "1.0E-4"), (1e7, "1.0E7"), (12345678.0, "1.2345678E7"), (-2.5, "-2.5"),
    (-0.0, "-0.0"), (3.4028234663852886e38, "3.4028235E38"), (0.1, "0.1")])
def test_java_float_text(value: float, text: str) -> None:
    assert java_float_text(value) == text


def test_codec_config() -> None:
    codecs = parse_codecs('{"net.opentsdb.core.SimpleHistogramDecoder": 7}')
    assert codecs.enabled and codecs.simple_id() == 7
    assert not parse_codecs("").enabled
    with pytest.raises(HistogramCodecError, match="must be from 0 to 255"):
        parse_codecs('{"net.opentsdb.core.SimpleHistogramDecoder": 256}')
    with pytest.raises(HistogramCodecError, match="Duplicate ID"):
        parse_codecs('{"a.B": 1, "net.opentsdb.core.SimpleHistogramDecoder": 1}')
    with pytest.raises(HistogramCodecError, match="No codec found mapped to ID 3"):
        codecs.decode(b"\x03" + GOLDEN[1:])


def test_short_or_truncated_bytes_are_refused() -> None:
    with pytest.raises(HistogramCodecError, match="shorter than 6 bytes"):
        decode_simple(b"\x00\x00\x01", 0)
    with pytest.raises(HistogramCodecError, match="Buffer underflow"):
        decode_simple(GOLDEN[:20], 42)
