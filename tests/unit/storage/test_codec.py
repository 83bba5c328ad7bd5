"""Golden tests of app.storage.codec: bytes from OpenTSDB's own unit tests and by hand.

Expected bytes come from OpenTSDB 2.4's tests (named in each test's comment: ``TestInternal``,
``TestCompactionQueue``, ``TestRowKey``, ``TestAppendDataPoints``), from the spec
(notes/opentsdb-api-spec.md §7.6) or are worked out by hand in a comment. No expected value is
computed with the code under test.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from app.storage.codec import (
    APPEND_QUALIFIER,
    DecodedRow,
    IllegalDataError,
    RowKeyLayout,
    RowKeyParts,
    annotation_offset_ms,
    annotation_qualifier,
    append_entry,
    base_time_s,
    build_qualifier,
    compact_cells,
    decode_row,
    decode_rows,
    encode_value,
    is_annotation_qualifier,
    java_array_hash,
    point_cell,
    salt_bucket,
)
from app.storage.codec_decode import decode_stored_rows
from app.storage.codec_singles import joined_singles
from app.storage.packed_cells import PackedCells


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def long(value: int) -> bytes:
    """Java's ``Bytes.fromLong``."""
    return value.to_bytes(8, "big", signed=True)


def points(row: DecodedRow) -> list[tuple[int, float]]:
    return list(zip(row.ts_ms.tolist(), row.values.tolist(), strict=True))


BASE = 1356998400  # 2013-01-01T00:00:00Z = 0x50E22700, the base time of OpenTSDB's tests
ZERO = b"\x00"  # TestCompactionQueue.ZERO: the meta byte of a compacted column
MIXED = b"\x01"  # TestCompactionQueue.MIXED_FLAG (Const.MS_MIXED_COMPACT)


# --- row keys ------------------------------------------------------------------------------


def test_row_key_of_the_put_example() -> None:
    # sys.cpu.nice 1346846400 18 host=web01, all uids 000001: 1346846400 = 0x50473EC0.
    layout = RowKeyLayout()
    key = layout.row_key(h("000001"), 1346846400, [(h("000001"), h("000001"))])
    assert key == h("000001 50473EC0 000001 000001")
    assert point_cell(1346846400, 18) == (1346846400, h("0000"), h("12"))


def test_row_key_from_tsuid() -> None:
    # TestRowKey#rowKeyFromTSUID and #rowKeyFromTSUIDNoTags
    layout = RowKeyLayout()
    tsuid = h("000001 000001 000002")
    assert layout.row_key_from_tsuid(tsuid, BASE) == h("000001 50E22700 000001 000002")
    assert layout.row_key_from_tsuid(h("000001"), BASE) == h("000001 50E22700")
    assert layout.row_key_from_tsuid(tsuid, 0) == h("000001 00000000 000001 000002")


def test_row_key_sorts_tags_by_tagk_uid() -> None:
    layout = RowKeyLayout()
    tags = [(h("000003"), h("000001")), (h("000002"), h("0000FF"))]
    key = layout.row_key(h("000001"), BASE, tags)
    assert key == h("000001 50E22700 000002 0000FF 000003 000001")


def test_parse_row_key_and_tsuid() -> None:
    layout = RowKeyLayout(salt_width=1)
    key = h("08 000001 50E22700 000001 000001 000002 000003")
    assert layout.parse_row_key(key) == RowKeyParts(
        h("08"), h("000001"), BASE, ((h("000001"), h("000001")), (h("000002"), h("000003"))))
    assert layout.tsuid(key) == h("000001 000001 000001 000002 000003")
    with pytest.raises(ValueError):
        layout.parse_row_key(key[:-1])


def test_row_key_rejects_bad_input() -> None:
    layout = RowKeyLayout()
    with pytest.raises(ValueError):
        layout.row_key(h("0001"), BASE, [])  # metric uid too short
    with pytest.raises(ValueError):
        layout.row_key(h("000001"), BASE + 1, [])  # not an hour boundary
    with pytest.raises(ValueError):
        layout.row_key(h("000001"), BASE, [(h("000001"), h("01")), (h("000001"), h("02"))])


def test_java_array_hash_worked_example() -> None:
    # Arrays.hashCode(byte[]): h = 1; h = 31*h + b for each signed byte, in int32.
    # [00 00 01 00 00 01 00 00 01]:
    #   1 -> 31 -> 961 -> 29792 -> 923552 -> 28630112 -> 887533473
    #   -> 27513537663 mod 2^32 = 1743733887 -> 31*1743733887 = 54055750497 mod 2^32
    #   = 2516142945 = -1778824351 as int32 -> 31*(-1778824351) + 1 = -55143554880
    #   mod 2^32 = 691019968.  691019968 % 20 = 8.
    assert java_array_hash(h("000001 000001 000001")) == 691019968
    assert salt_bucket(h("000001 000001 000001"), 20) == 8
    # Closed form: h = 31^n + sum(b_i * 31^(n-1-i)), taken mod 2^32 as a signed int32.
    # [FF] -> 31 - 1 = 30. [80 00 00 00 00 00 00] -> 31^7 - 128 * 31^6 = 27512614111
    # - 113600471168 = -86087857057 -> + 21 * 2^32 = 4106456159 -> -188511137 as int32;
    # Java: -188511137 % 20 = -17, made positive: 17.
    assert java_array_hash(h("FF")) == 30
    assert java_array_hash(h("80000000000000")) == -188511137
    assert salt_bucket(h("80000000000000"), 20) == 17


def test_java_array_hash_matches_an_int32_reference() -> None:
    def reference(data: bytes) -> int:
        acc = ctypes.c_int32(1)
        for b in data:
            acc = ctypes.c_int32(31 * acc.value + ctypes.c_int8(b).value)
        return acc.value

    rng = np.random.default_rng(3)
    for size in (0, 1, 3, 9, 15, 27, 51):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert java_array_hash(data) == reference(data)


@pytest.mark.parametrize(("metric", "tags", "salt"), [
    # TestRowKey#prefixKeyWithSaltSameMetricDifferentTags (1 salt byte, 20 buckets)
    ("000001", [("000001", "000001")], "08"),
    ("000001", [("000001", "000002")], "09"),
    ("000001", [("000001", "000001"), ("000002", "000003")], "03"),
    ("000001", [], "0C"),
    # TestRowKey#prefixKeyWithSaltDifferentMetricSameTags
    ("000002", [("000001", "000001")], "09"),
    ("000003", [("000001", "000001")], "06"),
    ("0B1420", [("000001", "000001")], "06"),
])
def test_salt_from_opentsdb_tests(metric: str, tags: list[tuple[str, str]], salt: str) -> None:
    layout = RowKeyLayout(salt_width=1, salt_buckets=20)
    key = layout.row_key(h(metric), BASE, [(h(k), h(v)) for k, v in tags])
    assert key == h(salt) + h(metric) + h("50E22700") + b"".join(h(k) + h(v) for k, v in tags)


def test_salt_ignores_time_and_spans_the_width() -> None:
    # TestRowKey#prefixKeyWithSaltSameMetricSameTagsDifferentTimestamp: the salt is 0x08 at
    # any base time; TestRowKey#getSalt: 2 salt bytes hold bucket 8 as 00 08.
    one = RowKeyLayout(salt_width=1)
    two = RowKeyLayout(salt_width=2)
    tags = [(h("000001"), h("000001"))]
    for base in (0, BASE, BASE + 3600 * 1000):
        assert one.row_key(h("000001"), base, tags)[:1] == h("08")
        assert two.row_key(h("000001"), base, tags)[:2] == h("0008")
    # TestRowKey#prefixKeyWithSaltSameMetricDifferentTags: two identical tag pairs -> 0x10
    assert salt_bucket(h("000001 000001 000001 000001 000001"), 20) == 0x10


def test_global_annotation_row_is_never_salted() -> None:
    # TestRowKey#prefixKeyWithSaltGlobalAndNoOps: 00 000000 50E22700 stays as it is.
    layout = RowKeyLayout(salt_width=1)
    assert layout.global_annotation_row(BASE) == h("00 000000 50E22700")
    assert layout.row_key(h("000000"), BASE, []) == h("00 000000 50E22700")
    assert RowKeyLayout(salt_width=2).global_annotation_row(BASE) == h("0000 000000 50E22700")


def test_salt_prefixes() -> None:
    assert RowKeyLayout().salt_prefixes() == [b""]
    assert RowKeyLayout(salt_width=1).salt_prefixes() == [bytes([i]) for i in range(20)]
    assert RowKeyLayout(salt_width=2, salt_buckets=3).salt_prefixes() == [
        h("0000"), h("0001"), h("0002")]


def test_metric_scan_range_covers_whole_hours() -> None:
    layout = RowKeyLayout(salt_width=1)
    # 1356998400+10 .. +7200+5: hours 0x50E22700, 0x50E23510, 0x50E24320 -> stop 0x50E25130
    start, stop = layout.metric_scan_range(h("07"), h("000001"), BASE + 10, BASE + 7205)
    assert (start, stop) == (h("07 000001 50E22700"), h("07 000001 50E25130"))
    # the last hour 0xFFFFF1F0 has no next base time: stop at the next metric instead
    assert layout.metric_scan_range(h("07"), h("000001"), 0, 2**32 + 5) == (
        h("07 000001 00000000"), h("07 000002"))


# --- timestamps, values, qualifiers --------------------------------------------------------


def test_base_time() -> None:
    assert base_time_s(1356998403) == BASE
    assert base_time_s(1357001999) == BASE
    assert base_time_s(1357001999999) == BASE  # >= 2**32: milliseconds
    assert base_time_s(BASE + 3600) == BASE + 3600


@pytest.mark.parametrize(("ts", "flags", "qualifier"), [
    # TestInternal#buildQualifierSecond*: offset 3 -> 0x003, EOH offset 3599 -> 0xE0F
    (1356998403, 7, "0037"), (1357001999, 7, "E0F7"),
    (1356998403, 5, "0035"), (1357001999, 5, "E0F5"),
    (1356998403, 3, "0033"), (1357001999, 3, "E0F3"),
    (1356998403, 1, "0031"), (1357001999, 1, "E0F1"),
    (1356998403, 0, "0030"), (1357001999, 0, "E0F0"),
    (1356998403, 0xF, "003F"), (1357001999, 0xF, "E0FF"),
    (1356998403, 0xB, "003B"), (1357001999, 0xB, "E0FB"),
    # TestInternal#buildQualifierMilliSecond*: 8 ms -> F0000200 | flags; 3599999 ms -> FDBB9FC0
    (1356998400008, 7, "F0000207"), (1357001999999, 7, "FDBB9FC7"),
    (1356998400008, 5, "F0000205"), (1357001999999, 5, "FDBB9FC5"),
    (1356998400008, 3, "F0000203"), (1357001999999, 3, "FDBB9FC3"),
    (1356998400008, 1, "F0000201"), (1357001999999, 1, "FDBB9FC1"),
    (1356998400008, 0, "F0000200"), (1357001999999, 0, "FDBB9FC0"),
    (1356998400008, 0xF, "F000020F"), (1357001999999, 0xF, "FDBB9FCF"),
    (1356998400008, 0xB, "F000020B"), (1357001999999, 0xB, "FDBB9FCB"),
])
def test_build_qualifier(ts: int, flags: int, qualifier: str) -> None:
    assert build_qualifier(ts, flags) == h(qualifier)


@pytest.mark.parametrize(("value", "flags", "raw"), [
    # spec §7.6 / acceptance case 53: smallest of 1, 2, 4, 8 bytes, flags = length - 1
    (42, 0x0, "2A"), (-1, 0x0, "FF"), (127, 0x0, "7F"), (-128, 0x0, "80"),
    (300, 0x1, "012C"), (-129, 0x1, "FF7F"), (32767, 0x1, "7FFF"),
    (70000, 0x3, "00011170"), (-32769, 0x3, "FFFF7FFF"),
    (5000000000, 0x7, "000000012A05F200"), (2**63 - 1, 0x7, "7FFFFFFFFFFFFFFF"),
    (-(2**63), 0x7, "8000000000000000"), (np.int64(70000), 0x3, "00011170"),
    # floats: 4 bytes when (float) d == d. 42.5 = 1.010101b x 2^5 -> 0 10000100 0101010.. =
    # 422A0000; 1.25 = 1.01b x 2^0 -> 3FA00000; 1e3 = 1.111101b x 2^9 -> 447A0000.
    (42.5, 0xB, "422A0000"), (1.25, 0xB, "3FA00000"), (1e3, 0xB, "447A0000"),
    (-0.0, 0xB, "80000000"),
    # 42.2 and 0.1 do not fit a float: 8-byte doubles (IEEE 754 of 42.2 is 404519999999999A)
    (42.2, 0xF, "404519999999999A"), (0.1, 0xF, "3FB999999999999A"),
    (1e300, 0xF, "7E37E43C8800759C"),  # beyond float range: (float) d is infinite
])
def test_encode_value(value: int | float, flags: int, raw: str) -> None:
    assert encode_value(value) == (flags, h(raw))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 2**63, -(2**63) - 1])
def test_encode_value_rejects(value: float) -> None:
    with pytest.raises(ValueError):
        encode_value(value)


def test_encode_value_rejects_non_numbers() -> None:
    with pytest.raises(TypeError):
        encode_value(True)
    with pytest.raises(TypeError):
        encode_value("42")  # type: ignore[arg-type]


def test_append_entry_is_qualifier_then_value() -> None:
    # TestAppendDataPoints#toByteArray: qualifier + value
    assert append_entry(BASE + 2, 42) == h("0020 2A")
    assert append_entry(BASE * 1000 + 128, 42) == h("F0002000 2A")


# --- annotations ---------------------------------------------------------------------------


def test_annotation_qualifier() -> None:
    # Annotation.getQualifier (2.4): offset 0 in seconds is [1, 0, 0]; 1388450562 is 2562 s
    # (0x0A02) past 1388448000; 1388450562123 is 2562123 ms (0x0027184B) past it.
    assert annotation_qualifier(1388448000) == h("01 0000")
    assert annotation_qualifier(1388450562) == h("01 0A02")
    assert annotation_qualifier(1388450562123) == h("01 0027184B")
    assert annotation_offset_ms(h("01 0A02"), 1388448000) == 1388450562000
    assert annotation_offset_ms(h("01 0027184B"), 1388448000) == 1388450562123
    assert is_annotation_qualifier(h("01 0A02")) and is_annotation_qualifier(h("01 0027184B"))
    assert not is_annotation_qualifier(h("0A02")) and not is_annotation_qualifier(APPEND_QUALIFIER)


# --- decoding single cells -----------------------------------------------------------------


def test_decode_put_example() -> None:
    row = decode_row(1346846400, [(h("0000"), h("12"))])
    assert points(row) == [(1346846400000, 18.0)]
    assert row.is_int.tolist() == [True] and not row.has_duplicates
    assert (row.ts_ms.dtype, row.values.dtype, row.is_int.dtype) == (np.int64, np.float64, bool)


def test_decode_widens_float32_like_java() -> None:
    # spec §7.6: a 4-byte 0.1f reads back as 0.10000000149011612; 0.1f = 3DCCCCCD.
    row = decode_row(BASE, [(h("000B"), h("3DCCCCCD")), (h("001F"), h("404519999999999A"))])
    assert points(row) == [(BASE * 1000, 0.10000000149011612), (BASE * 1000 + 1000, 42.2)]
    assert row.is_int.tolist() == [False, False]


def test_decode_timestamps_from_qualifiers() -> None:
    # TestInternal#getTimestampFromQualifier(Ms), #getOffsetFromQualifierMs1ms
    row = decode_row(BASE, [(h("0037"), long(1)), (h("F0000207"), long(2)),
                            (h("F0000047"), long(3))])
    assert row.ts_ms.tolist() == [1356998400001, 1356998400008, 1356998403000]


def test_decode_fixes_qualifier_flags() -> None:
    # TestInternal#extractDataPointsFixQualifierFlags: lengths 8, "8" on 4 bytes, "4" on 8
    cells = [(h("0007"), long(4)), (h("0027"), (5).to_bytes(4, "big")), (h("0043"), long(6))]
    assert points(decode_row(BASE, cells)) == [
        (BASE * 1000, 4.0), (BASE * 1000 + 2000, 5.0), (BASE * 1000 + 4000, 6.0)]
    assert compact_cells(cells) == (h("0007 0023 0047"), long(4) + h("00000005") + long(6) + ZERO)


def test_decode_fixes_floating_point_values() -> None:
    # TestInternal#extractDataPointsFixFloatingPointValue: an 8-byte value flagged as a 4-byte
    # float keeps its last 4 bytes. Bits 00000001 as a float are 2^-149 = 1.401298464324817e-45;
    # as a double 2^-1074 = 5e-324.
    cells = [(h("000F"), h("0000000000000001")), (h("002B"), h("0000000000000001")),
             (h("004B"), h("00000001"))]
    assert decode_row(BASE, cells).values.tolist() == [5e-324, 1.401298464324817e-45,
                                                       1.401298464324817e-45]
    with pytest.raises(IllegalDataError):  # #extractDataPointsFixFloatingPointValueCorrupt
        decode_row(BASE, [(h("002B"), h("0002000000000001"))])


def test_decode_skips_annotations_and_unknown_columns() -> None:
    # TestInternal#extractDataPointsMixSecondsMs: the annotation column is not a data point
    cells = [(h("0027"), long(4)), (h("010002"), b'{"description":"x"}'),
             (h("0047"), long(6)), (h("01 0027184B"), b"{}"), (h("06 0000"), b"histogram")]
    assert points(decode_row(BASE, cells)) == [(BASE * 1000 + 2000, 4.0), (BASE * 1000 + 4000, 6.0)]
    assert len(decode_row(BASE, [])) == 0
    assert len(decode_row(BASE, [(h("010002"), b"{}")])) == 0


def test_decode_single_s_and_ms_cells() -> None:
    # TestInternal#extractDataPointsWithNonDataColumns(Sort): any cell order
    cells = [(h("0047"), long(6)), (h("F0000207"), long(5)), (h("0007"), long(4))]
    assert points(decode_row(BASE, cells)) == [
        (BASE * 1000, 4.0), (BASE * 1000 + 8, 5.0), (BASE * 1000 + 4000, 6.0)]


@pytest.mark.parametrize(("qualifier", "expected_ms"), [
    ("0007 0027 0047", [0, 2000, 4000]),  # TestInternal#extractDataPointsCompactSeconds
    ("0047 0007 0027", [0, 2000, 4000]),  # #extractDataPointsCompactSecondsSorting
    ("F0000007 F0000207 F0000707", [0, 8, 28]),  # #extractDataPointsCompactMs
    ("0007 F0000207 0047", [0, 8, 4000]),  # #extractDataPointsCompactSecAndMs (meta 00!)
])
def test_decode_compacted_columns(qualifier: str, expected_ms: list[int]) -> None:
    row = decode_row(BASE, [(h(qualifier), long(4) + long(5) + long(6) + ZERO)])
    assert row.ts_ms.tolist() == [BASE * 1000 + ms for ms in expected_ms]
    assert sorted(row.values.tolist()) == [4.0, 5.0, 6.0]


def test_decode_mixed_column_whose_meta_byte_says_otherwise() -> None:
    # +0 ms, +1 s, +1024 ms, +2 s, 1-byte values, meta 00. Read as 4-byte words the qualifiers
    # are F0000000 (1 byte), 0010F001 (flags 1: 2 bytes), 00000020 (1 byte): 4 bytes, exactly
    # the 4 value bytes there are, so only the qualifier widths can tell the column is mixed.
    row = decode_row(BASE, [(h("F0000000 0010 F0010000 0020"), h("01 02 03 04") + ZERO)])
    assert points(row) == [(BASE * 1000, 1.0), (BASE * 1000 + 1000, 2.0),
                           (BASE * 1000 + 1024, 3.0), (BASE * 1000 + 2000, 4.0)]


def test_decode_corrupt_compacted_column() -> None:
    # TestInternal#extractDataPointsCompactCorrupt: 0x0041 claims 2 bytes, 8 are there
    with pytest.raises(IllegalDataError):
        decode_row(BASE, [(h("0007 F0000207 0041"), long(4) + long(5) + long(6) + ZERO)])
    with pytest.raises(IllegalDataError):
        decode_row(BASE, [(h("0007 0017"), long(4))])


def test_decode_compacted_without_meta_byte() -> None:
    # Java refuses it; we read it: every byte is accounted for by the qualifiers.
    assert points(decode_row(BASE, [(h("0007 0017"), long(4) + long(5))])) == [
        (BASE * 1000, 4.0), (BASE * 1000 + 1000, 5.0)]


def test_decode_rejects_impossible_value_lengths() -> None:
    with pytest.raises(IllegalDataError):  # a 3-byte integer
        decode_row(BASE, [(h("0002 0010"), h("000001") + h("07") + ZERO)])
    with pytest.raises(IllegalDataError):  # a float on 2 bytes
        decode_row(BASE, [(h("0009 0010"), h("0001") + h("07") + ZERO)])
    with pytest.raises(IllegalDataError):  # a single cell with a 9-byte value
        decode_row(BASE, [(h("0007"), bytes(9))])


def test_decode_mixed_value_widths_in_one_column() -> None:
    # 1, 2, 4, 8-byte ints, a float32 and a double, in one compacted second column.
    qualifier = h("0000 0011 0023 0037 004B 005F")
    value = h("FF FF7F FFFF7FFF 8000000000000000 422A0000 404519999999999A 00")
    row = decode_row(BASE, [(qualifier, value)])
    assert row.values.tolist() == [-1.0, -129.0, -32769.0, -(2.0**63), 42.5, 42.2]
    assert row.is_int.tolist() == [True, True, True, True, False, False]


# --- append columns ------------------------------------------------------------------------


def test_decode_append_column() -> None:
    # TestAppendDataPoints#parseKeyValue: 00 20 -> +2 s, F0 00 20 00 -> +128 ms, out of order
    # and with duplicates; the odd qualifier 05 2A 2A is still an append column.
    s, ms, v1, v2 = h("0020"), h("F0002000"), h("2A"), h("18")
    expected = [(1356998400128, 42.0), (1356998402000, 24.0)]
    for value in (ms + v1 + s + v2, s + v2 + ms + v1, ms + v1 + s + v2 + s + v2,
                  s + v2 + ms + v1 + ms + v1 + s + v2 + ms + v1):
        assert points(decode_row(BASE, [(APPEND_QUALIFIER, value)])) == expected
    assert points(decode_row(BASE, [(h("052A2A"), ms + v1)])) == expected[:1]


def test_decode_append_later_entry_wins() -> None:
    value = append_entry(BASE + 2, 1) + append_entry(BASE + 2, 2)
    row = decode_row(BASE, [(APPEND_QUALIFIER, value)])
    assert points(row) == [(BASE * 1000 + 2000, 2.0)] and row.has_duplicates


@pytest.mark.parametrize("value", [
    # TestAppendDataPoints#parseKeyValueCorrupt: a missing value, trailing bytes, no qualifier
    "F0002000 0020 18", "F0002000 18 00000000", "18 F0002000",
])
def test_decode_corrupt_append_column(value: str) -> None:
    with pytest.raises(IllegalDataError):
        decode_row(BASE, [(APPEND_QUALIFIER, h(value))])


# --- duplicates ----------------------------------------------------------------------------


def test_duplicates_single_beats_compacted_append_beats_both() -> None:
    compacted = (h("0007 0027"), long(4) + long(5) + ZERO)
    single = (h("0007"), long(6))
    appended = (APPEND_QUALIFIER, h("0000") + h("07"))
    row = decode_row(BASE, [compacted, single])
    assert points(row) == [(BASE * 1000, 6.0), (BASE * 1000 + 2000, 5.0)] and row.has_duplicates
    row = decode_row(BASE, [appended, single, compacted])
    assert points(row) == [(BASE * 1000, 7.0), (BASE * 1000 + 2000, 5.0)]


def test_duplicate_singles_later_qualifier_wins_unless_write_times_say() -> None:
    # TestCompactionQueue#overlappingDataPoints: 0007 (8 bytes) then 0003 (4 bytes) at +0 s;
    # OpenTSDB keeps the newer cell. Without write times, 0007 > 0003 in byte order.
    cells = [(h("0007"), long(4)), (h("0003"), (9).to_bytes(4, "big"))]
    assert points(decode_row(BASE, cells)) == [(BASE * 1000, 4.0)]
    newer = decode_row(BASE, cells, write_ts={h("0007"): 1, h("0003"): 2})
    assert points(newer) == [(BASE * 1000, 9.0)] and newer.has_duplicates
    # TestCompactionQueue#msSameAsSecond: 0007 and F0000007 are both +0 ms
    cells = [(h("0007"), long(4)), (h("F0000007"), long(5))]
    assert points(decode_row(BASE, cells)) == [(BASE * 1000, 5.0)]
    assert points(decode_row(BASE, cells, write_ts={h("0007"): 9, h("F0000007"): 1})) == [
        (BASE * 1000, 4.0)]


def test_duplicates_within_a_compacted_column_later_entry_wins() -> None:
    row = decode_row(BASE, [(h("0007 0007 0017"), long(1) + long(2) + long(3) + ZERO)])
    assert points(row) == [(BASE * 1000, 2.0), (BASE * 1000 + 1000, 3.0)] and row.has_duplicates


def test_write_times_of_fixed_single_cells_are_looked_up_by_stored_qualifier() -> None:
    cells = [(h("0003"), long(4)), (h("0007"), long(5))]  # 0003 is fixed to 0007 on read
    assert points(decode_row(BASE, cells, write_ts={h("0003"): 2, h("0007"): 1})) == [
        (BASE * 1000, 4.0)]


def test_decode_rows_concatenates_hours_in_order() -> None:
    later = (BASE + 3600, [(h("0007 0017"), long(3) + long(4) + ZERO)])
    earlier = (BASE, [(h("0007"), long(1)), (h("F0000107"), long(2))])
    row = decode_rows([later, earlier])
    assert points(row) == [(BASE * 1000, 1.0), (BASE * 1000 + 4, 2.0),
                           (BASE * 1000 + 3600000, 3.0), (BASE * 1000 + 3601000, 4.0)]
    assert not row.has_duplicates
    assert len(decode_rows([])) == 0


# --- rows not compacted yet: one cell per point ----------------------------------------------

# Eight single second-resolution cells, in HBase's column order: offsets 0..7 s, flags by hand:
# 1-byte int 5 (0000), 2-byte int -2 (0011), 4-byte int 70000 (0023), 8-byte int 2**40 (0037),
# 4-byte float 0.5 = 3F000000 (004B), 8-byte float 42.2 (005F), 1-byte int -1 (0060),
# 2-byte int 300 = 012C (0071).
FRESH = [(h("0000"), h("05")), (h("0011"), h("FFFE")), (h("0023"), h("00011170")),
         (h("0037"), long(2**40)), (h("004B"), h("3F000000")), (h("005F"), h("404519999999999A")),
         (h("0060"), h("FF")), (h("0071"), h("012C"))]
FRESH_POINTS = [(BASE * 1000, 5.0), (BASE * 1000 + 1000, -2.0), (BASE * 1000 + 2000, 70000.0),
                (BASE * 1000 + 3000, float(2**40)), (BASE * 1000 + 4000, 0.5),
                (BASE * 1000 + 5000, 42.2), (BASE * 1000 + 6000, -1.0),
                (BASE * 1000 + 7000, 300.0)]


def stored(cells: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    return {b"t:" + q: v for q, v in cells}


def test_decode_a_row_not_compacted_yet() -> None:
    row = decode_stored_rows([(BASE, stored(FRESH)), (BASE + 3600, stored(FRESH))], b"t:")
    assert points(row) == FRESH_POINTS + [(ts + 3600_000, v) for ts, v in FRESH_POINTS]
    assert row.is_int.tolist() == [True] * 4 + [False] * 2 + [True] * 2 + \
        [True] * 4 + [False] * 2 + [True] * 2
    assert not row.has_duplicates


def test_decode_a_row_not_compacted_yet_with_a_cell_to_fix() -> None:
    # TestInternal#extractDataPointsFixQualifierFlags: an 8-byte 6 flagged as 4 bytes (0083)
    row = decode_stored_rows([(BASE, stored([*FRESH, (h("0083"), long(6))]))], b"t:")
    assert points(row) == [*FRESH_POINTS, (BASE * 1000 + 8000, 6.0)]


def test_decode_a_row_not_compacted_yet_with_a_duplicate() -> None:
    # TestCompactionQueue#overlappingDataPoints: 0003 and 0007 at +0 s; without write times
    # the later qualifier in byte order (0007) wins
    row = decode_stored_rows([(BASE, stored([(h("0003"), h("00000009")), (h("0007"), long(4)),
                                             *FRESH[1:]]))], b"t:")
    assert points(row) == [(BASE * 1000, 4.0), *FRESH_POINTS[1:]] and row.has_duplicates


def test_decode_a_row_not_compacted_yet_beside_other_columns() -> None:
    # an ms point (+7500 ms << 6 = 0x75300: F007530B, a 4-byte float 1.0), a note, another family
    cells = {**stored(FRESH), b"t:" + h("F007530B"): h("3F800000"),
             b"t:" + h("010002"): b"{}", b"x:" + h("0000"): h("09")}
    row = decode_stored_rows([(BASE, cells)], b"t:")
    assert points(row) == [*FRESH_POINTS, (BASE * 1000 + 7500, 1.0)]


def test_rows_of_single_cells_are_joined_whole_when_every_cell_allows() -> None:
    """The bulk path's check, rows of several kinds side by side in one call: FRESH's cells
    (values of 1 to 8 bytes) joined whole, from a dict or joined as HBase reads them; not a
    row with two cells out of order, one with a cell to fix, one of too few cells, nor one
    with a 2-byte qualifier flagged as milliseconds."""
    quals, values = b"".join(q for q, _ in FRESH), b"".join(v for _, v in FRESH)
    columns = [b"t:" + q for q, _ in FRESH]
    packed = PackedCells(b"".join(columns), np.cumsum([len(c) for c in columns]), values,
                         np.cumsum([len(v) for _, v in FRESH]))
    swapped = stored([FRESH[1], FRESH[0], *FRESH[2:]])
    to_fix = stored([*FRESH, (h("0083"), long(6))])
    ms_flagged = stored([*FRESH, (h("F000"), h("01"))])  # 2 bytes, no second offset: odd
    rows = [(BASE, stored(FRESH)), (BASE, swapped), (BASE, packed), (BASE, to_fix),
            (BASE, stored(FRESH[:7])), (BASE, ms_flagged), (BASE, packed)]
    assert joined_singles(rows, b"t:") == [(quals, values), None, (quals, values), None, None,
                                           None, (quals, values)]


# --- compaction (TestCompactionQueue) ------------------------------------------------------

q1, q2, q3 = h("0007"), h("0017"), h("0027")
v1, v2, v3 = long(4), long(5), long(6)


@pytest.mark.parametrize(("name", "cells", "expected"), [
    ("twoCellRow", [(q1, v1), (q2, v2)], (q1 + q2, v1 + v2 + ZERO)),
    ("oneCellRowBadLength", [(h("0003"), long(42))], (h("0007"), long(42))),
    ("twoCellRowMS", [(h("F0000007"), v1), (h("F0000107"), v2)],
     (h("F0000007 F0000107"), v1 + v2 + ZERO)),
    ("sortMsAndS", [(q1, v1), (h("F0000207"), v2), (h("F0000107"), v2)],
     (h("0007 F0000107 F0000207"), v1 + v2 + v2 + MIXED)),
    ("secondsOutOfOrder", [(h("0207"), v1), (h("0007"), v2), (h("0107"), v3)],
     (h("0007 0107 0207"), v2 + v3 + v1 + ZERO)),
    ("msOutOfOrder", [(h("F0000207"), v1), (h("F0000007"), v2), (h("F0000107"), v3)],
     (h("F0000007 F0000107 F0000207"), v2 + v3 + v1 + ZERO)),
    ("secondAndMs", [(q1, v1), (h("F0000107"), v2)], (h("0007 F0000107"), v1 + v2 + MIXED)),
    ("fixQualifierFlags", [(h("0003"), v1), (q2, v2)], (q1 + q2, v1 + v2 + ZERO)),
    # 4.2f = 0x40866666, stored as Bytes.fromLong(floatToRawIntBits(4.2f)) with flags 0x1B
    ("fixFloatingPoint", [(q1, v1), (h("001B"), long(0x40866666))],
     (h("0007 001B"), v1 + h("40866666") + ZERO)),
    ("failedCompactNoop", [(q1, v1), (q2, v2), (q1 + q2, v1 + v2 + ZERO)],
     (q1 + q2, v1 + v2 + ZERO)),
    ("secondCompact", [(q1 + q3, v1 + v2 + ZERO), (q2, v3)], (q1 + q2 + q3, v1 + v3 + v2 + ZERO)),
    ("secondCompactMS", [(h("F0000007 F0000207"), v1 + v2 + ZERO), (h("F0000107"), v3)],
     (h("F0000007 F0000107 F0000207"), v1 + v3 + v2 + ZERO)),
    ("secondCompactMixedSecond", [(h("0007 F00A4107"), v1 + v2 + MIXED), (h("0057"), v3)],
     (h("0007 0057 F00A4107"), v1 + v3 + v2 + MIXED)),
    ("secondCompactMixedMS", [(h("0007 F00A4107"), v1 + v2 + MIXED), (h("F0000107"), v3)],
     (h("0007 F0000107 F00A4107"), v1 + v3 + v2 + MIXED)),
    ("secondCompactMixedMSAndS", [(h("F00A4107 00F7"), v1 + v2 + MIXED), (h("0007"), v3)],
     (h("0007 F00A4107 00F7"), v3 + v1 + v2 + MIXED)),
    ("secondCompactOverwrite", [(q1 + q3, v1 + v2 + ZERO), (q1, v3)], (q1 + q3, v3 + v2 + ZERO)),
    ("doubleFailedCompactNoop", [(q1, v1), (q1 + q2 + q3, v1 + v3 + v2 + ZERO),
                                 (q1 + q3, v1 + v2 + ZERO), (q2, v3), (q3, v2)],
     (q1 + q2 + q3, v1 + v3 + v2 + ZERO)),
    ("weirdOverlappingCompactedCells", [(q1, v1), (q1 + q3, v1 + v2 + ZERO),
                                        (q1 + q2, v1 + v3 + ZERO), (q2, v3), (q3, v2)],
     (q1 + q2 + q3, v1 + v3 + v2 + ZERO)),
    ("tripleCompactedOutOfOrder", [(h("0007 0027"), v1 + v2 + ZERO),
                                   (h("0057 0067"), long(8) + long(9) + ZERO),
                                   (h("0037 0047"), v3 + long(7) + ZERO)],
     (h("0007 0027 0037 0047 0057 0067"), v1 + v2 + v3 + long(7) + long(8) + long(9) + ZERO)),
    ("tripleCompactedSecondsAndMs", [(h("F0000007 0027"), v1 + v2 + ZERO),
                                     (h("0037 F0046507"), v3 + long(7) + ZERO),
                                     (h("F0055F07 0067"), long(8) + long(9) + ZERO)],
     (h("F0000007 0027 0037 F0046507 F0055F07 0067"),
      v1 + v2 + v3 + long(7) + long(8) + long(9) + MIXED)),
])
def test_compaction_like_opentsdb(name: str, cells: list[tuple[bytes, bytes]],
                                  expected: tuple[bytes, bytes]) -> None:
    assert compact_cells(cells) == expected, name
    # ... and the compacted column reads back exactly as the cells it came from
    merged = decode_row(BASE, [expected])
    original = decode_row(BASE, cells)
    assert points(merged) == points(original)
    assert merged.is_int.tolist() == original.is_int.tolist()


def test_compaction_full_row() -> None:
    # TestCompactionQueue#fullRowSeconds: 3600 points i << 4 | 7 -> Bytes.fromLong(i)
    cells = [(((i << 4) | 7).to_bytes(2, "big"), long(i)) for i in range(3600)]
    qualifier, value = compact_cells(reversed(cells)) or (b"", b"")
    assert qualifier == b"".join(q for q, _ in cells)
    assert value == b"".join(v for _, v in cells) + ZERO
    row = decode_row(BASE, [(qualifier, value)])
    assert row.ts_ms.tolist() == [BASE * 1000 + 1000 * i for i in range(3600)]
    assert row.values.tolist() == [float(i) for i in range(3600)]


def test_compaction_with_write_times() -> None:
    # TestCompactionQueue#msSameAsSecond: cells are written in order, the later one wins.
    cells = [(h("0007"), v1), (h("F0000007"), v2)]
    assert compact_cells(cells, write_ts={h("0007"): 0, h("F0000007"): 1}) == (h("F0000007"), v2)
    assert compact_cells(cells, write_ts={h("0007"): 1, h("F0000007"): 0}) == (h("0007"), v1)


def test_compaction_leaves_out_non_data() -> None:
    # TestCompactionQueue#emptyRow; annotations are kept by the caller
    assert compact_cells([]) is None
    assert compact_cells([(h("010002"), b"{}")]) is None
    assert compact_cells([(h("010002"), b"{}"), (q1, v1), (q2, v2)]) == (q1 + q2, v1 + v2 + ZERO)
    appended = (APPEND_QUALIFIER, h("0010") + h("07") + h("0000") + h("05"))
    assert compact_cells([appended]) == (h("0000 0010"), h("05 07") + ZERO)
