"""Property tests of app.storage.codec: round trips, agreement of cell kinds, duplicates.

Expectations are derived from the generated inputs alone: a point written as ``value`` must read
back as ``float(value)`` (ints round to nearest like Java's ``(double) long``; a float is stored
as float32 only when that is exact), at its timestamp in ms; duplicates resolve by the rule
stated in ``decode_row``'s docstring, re-implemented here on the inputs.
"""

from __future__ import annotations

import ctypes
import random
from collections.abc import Sequence
from itertools import accumulate

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.storage.codec import (
    APPEND_QUALIFIER,
    DecodedRow,
    RowKeyLayout,
    append_entry,
    build_qualifier,
    compact_cells,
    decode_row,
    decode_rows,
    encode_value,
    java_array_hash,
    point_cell,
    salt_bucket,
)
from app.storage.codec_decode import decode_stored_rows
from app.storage.packed_cells import PackedCells

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

Point = tuple[int, int | float]  # (timestamp in s or ms, value)

values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-40000, 40000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
)
# Hour-aligned base times from 2001 to 2033: ms timestamps there are all >= 2**32.
bases = st.integers(1_000_000_000 // 3600 + 1, 2_000_000_000 // 3600).map(lambda k: k * 3600)


def ts_in_hour(base_s: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 3599).map(lambda s: base_s + s),
                     st.integers(0, 3_599_999).map(lambda ms: base_s * 1000 + ms))


def ts_ms(ts: int) -> int:
    return ts if ts >= 2**32 else ts * 1000


@st.composite
def hour_points(draw: st.DrawFn, min_size: int = 1, max_size: int = 40) -> tuple[int, list[Point]]:
    """A base time and points of distinct timestamps (in ms) within its hour."""
    base = draw(bases)
    pts = draw(st.lists(st.tuples(ts_in_hour(base), values), min_size=min_size,
                        max_size=max_size, unique_by=lambda p: ts_ms(p[0])))
    return base, pts


def expected(pts: Sequence[Point]) -> list[tuple[int, float, bool]]:
    return sorted((ts_ms(ts), float(v), isinstance(v, int)) for ts, v in pts)


def observed(row: DecodedRow) -> list[tuple[int, float, bool]]:
    return list(zip(row.ts_ms.tolist(), row.values.tolist(), row.is_int.tolist(), strict=True))


def single_cells(pts: Sequence[Point]) -> list[tuple[bytes, bytes]]:
    return [point_cell(ts, v)[1:] for ts, v in pts]


@SETTINGS
@given(hour_points(max_size=1))
def test_a_point_reads_back(case: tuple[int, list[Point]]) -> None:
    base, pts = case
    ((ts, value),) = pts
    row_base, qualifier, raw = point_cell(ts, value)
    assert row_base == base
    assert observed(decode_row(base, [(qualifier, raw)])) == expected(pts)


@SETTINGS
@given(hour_points(), st.randoms(use_true_random=False))
def test_single_compacted_and_append_cells_agree(case: tuple[int, list[Point]],
                                                 rnd: random.Random) -> None:
    base, pts = case
    cells = single_cells(pts)
    rnd.shuffle(cells)
    want = expected(pts)
    assert observed(decode_row(base, cells)) == want
    column = compact_cells(cells)
    assert column is not None
    assert observed(decode_row(base, [column])) == want
    appended = b"".join(append_entry(ts, v) for ts, v in pts)
    assert observed(decode_row(base, [(APPEND_QUALIFIER, appended)])) == want


@SETTINGS
@given(st.lists(hour_points(max_size=30), min_size=1, max_size=8))
def test_decode_rows_is_every_row_in_order(hours: list[tuple[int, list[Point]]]) -> None:
    by_base = {base: pts for base, pts in hours}  # one row per hour
    rows = []
    for base, pts in by_base.items():
        column = compact_cells(single_cells(pts))
        assert column is not None
        rows.append((base, [column]))
    want = expected([p for pts in by_base.values() for p in pts])
    assert observed(decode_rows(rows)) == want
    assert observed(decode_rows(reversed(rows))) == want


@SETTINGS
@given(st.lists(hour_points(max_size=30), min_size=1, max_size=8), st.data())
def test_stored_rows_decode_their_data_family_only(hours: list[tuple[int, list[Point]]],
                                                   data: st.DataObject) -> None:
    """Rows as storage returns them (``{b"t:" + qualifier: value}``), each hour's points as
    compacted, single or appended cells, beside a note and another family's column."""
    by_base = {base: pts for base, pts in hours}
    rows = []
    for base, pts in by_base.items():
        kind = data.draw(st.sampled_from(["compacted", "single", "append"]))
        if kind == "compacted":
            column = compact_cells(single_cells(pts))
            assert column is not None
            cells = [column]
        elif kind == "single":
            cells = single_cells(pts)
        else:
            cells = [(APPEND_QUALIFIER, b"".join(append_entry(ts, v) for ts, v in pts))]
        stored = {b"t:" + q: v for q, v in cells}
        stored[b"t:\x01\x00\x00"] = b'{"description": "a note"}'  # not data: skipped
        stored[b"x:" + cells[0][0]] = cells[0][1]  # another family: skipped
        rows.append((base, stored))
    want = expected([p for pts in by_base.values() for p in pts])
    assert observed(decode_stored_rows(rows, b"t:")) == want


# --- duplicates ----------------------------------------------------------------------------

small_ts = st.integers(0, 5)  # few distinct offsets, so timestamps collide


@st.composite
def duplicate_row(draw: st.DrawFn) -> tuple[int, list[tuple[str, int, int | float]]]:
    """A base time and (kind, offset_s, value) entries in write order; kinds may collide."""
    base = draw(bases)
    entries = draw(st.lists(
        st.tuples(st.sampled_from(["single", "compacted", "append"]), small_ts, values),
        min_size=1, max_size=12))
    return base, entries


def build_cells(base: int, entries: Sequence[tuple[str, int, int | float]]
                ) -> tuple[list[tuple[bytes, bytes]], dict[int, float], bool]:
    """Cells as HBase would hold them, the expected value per offset, and whether any
    timestamp was written twice."""
    singles: dict[bytes, bytes] = {}  # qualifier -> value: a rewrite replaces the cell
    compacted: list[tuple[bytes, bytes]] = []
    appended = b""
    for kind, offset, value in entries:
        qualifier, raw = point_cell(base + offset, value)[1:]
        if kind == "single":
            singles[qualifier] = raw
        elif kind == "compacted":
            compacted.append((qualifier, raw))
        else:
            appended += qualifier + raw
    if len(compacted) == 1:  # one entry is not a compacted column: write it as a single
        singles.setdefault(*compacted.pop())
    cells = list(singles.items())
    if compacted:
        cells.append((b"".join(q for q, _ in compacted),
                      b"".join(v for _, v in compacted) + b"\x00"))
    if appended:
        cells.append((APPEND_QUALIFIER, appended))
    # Expected: append (last entry) > single (greatest qualifier) > compacted (last entry).
    winner: dict[int, tuple[tuple[int, bytes, int], float]] = {}
    written: dict[int, int] = {}
    for position, (q, v) in enumerate(compacted):
        _note(winner, written, q, v, (0, b"", position))
    for q, v in singles.items():
        _note(winner, written, q, v, (1, q, 0))
    i = position = 0
    while i < len(appended):
        q = appended[i:i + 2]
        length = (q[1] & 0x7) + 1
        _note(winner, written, q, appended[i + 2:i + 2 + length], (2, b"", position))
        i += 2 + length
        position += 1
    return cells, {o: v for o, (_, v) in winner.items()}, any(n > 1 for n in written.values())


def _note(winner: dict[int, tuple[tuple[int, bytes, int], float]], written: dict[int, int],
          q: bytes, raw: bytes, rank: tuple[int, bytes, int]) -> None:
    offset = int.from_bytes(q, "big") >> 4
    value = _value(q[-1] & 0xF, raw)
    written[offset] = written.get(offset, 0) + 1
    if offset not in winner or winner[offset][0] <= rank:
        winner[offset] = (rank, value)


def _value(flags: int, raw: bytes) -> float:
    import struct

    if flags & 0x8:
        return float(struct.unpack(">f" if len(raw) == 4 else ">d", raw)[0])
    return float(int.from_bytes(raw, "big", signed=True))


@SETTINGS
@given(duplicate_row(), st.randoms(use_true_random=False))
def test_duplicates_resolve_as_documented(case: tuple[int, list[tuple[str, int, int | float]]],
                                          rnd: random.Random) -> None:
    base, entries = case
    cells, want, has_duplicates = build_cells(base, entries)
    rnd.shuffle(cells)  # cell order must not matter
    row = decode_row(base, cells)
    assert dict(zip((row.ts_ms // 1000 - base).tolist(), row.values.tolist(), strict=True)) == want
    assert row.ts_ms.tolist() == sorted((base + o) * 1000 for o in want)
    assert row.has_duplicates == has_duplicates
    column = compact_cells(cells)
    assert column is not None
    compacted = decode_row(base, [column])
    assert observed(compacted) == observed(row) and not compacted.has_duplicates


@SETTINGS
@given(bases, st.lists(st.tuples(small_ts, values, st.integers(0, 50)), min_size=1,
                       max_size=10))
def test_newest_write_wins_with_write_times(base: int,
                                            writes: list[tuple[int, int | float, int]]) -> None:
    cells: dict[bytes, bytes] = {}
    write_ts: dict[bytes, int] = {}
    for offset, value, when in writes:
        qualifier, raw = point_cell(base + offset, value)[1:]
        if qualifier in cells and write_ts[qualifier] > when:
            continue  # HBase keeps the newest version of one cell
        cells[qualifier], write_ts[qualifier] = raw, when
    # Per offset: the newest cell, and between equally new cells the greatest qualifier.
    best: dict[int, tuple[tuple[int, bytes], float]] = {}
    for qualifier, raw in cells.items():
        offset, key = int.from_bytes(qualifier, "big") >> 4, (write_ts[qualifier], qualifier)
        if offset not in best or best[offset][0] < key:
            best[offset] = (key, _value(qualifier[-1] & 0xF, raw))
    row = decode_row(base, list(cells.items()), write_ts=write_ts)
    got = dict(zip((row.ts_ms // 1000 - base).tolist(), row.values.tolist(), strict=True))
    assert got == {o: v for o, (_, v) in best.items()}


# --- values and row keys -------------------------------------------------------------------


@SETTINGS
@given(values)
def test_encode_value_is_the_smallest_exact_encoding(value: int | float) -> None:
    import struct

    flags, raw = encode_value(value)
    assert len(raw) == (flags & 0x7) + 1
    if isinstance(value, int):
        assert flags & 0x8 == 0 and int.from_bytes(raw, "big", signed=True) == value
        assert len(raw) == 1 or not -(2 ** (4 * len(raw) - 1)) <= value < 2 ** (4 * len(raw) - 1)
    else:
        assert flags & 0x8 and _value(flags, raw) == value
        single_fits = struct.unpack(">f", struct.pack(">f", value))[0] == value \
            if abs(value) <= 3.4028234663852886e38 else False
        assert len(raw) == (4 if single_fits else 8)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(0, 0xF))
def test_second_qualifier_fields(ts: int, flags: int) -> None:
    word = int.from_bytes(build_qualifier(ts, flags), "big")
    assert word & 0xF == flags and word >> 4 == ts % 3600


@SETTINGS
@given(st.integers(2**32, 9_999_999_999_999), st.integers(0, 0xF))
def test_millisecond_qualifier_fields(ts: int, flags: int) -> None:
    word = int.from_bytes(build_qualifier(ts, flags), "big")
    assert word >> 28 == 0xF and word & 0xF == flags and (word >> 4) & 0x3 == 0
    assert (word & 0x0FFFFFC0) >> 6 == ts % 3_600_000


@SETTINGS
@given(st.binary(max_size=64))
def test_java_array_hash_is_int32_arithmetic(data: bytes) -> None:
    acc = ctypes.c_int32(1)
    for b in data:
        acc = ctypes.c_int32(31 * acc.value + ctypes.c_int8(b).value)
    assert java_array_hash(data) == acc.value
    assert salt_bucket(data, 20) == abs(acc.value) % 20


@st.composite
def layouts_and_keys(draw: st.DrawFn) -> tuple[RowKeyLayout, bytes, int, list[tuple[bytes, bytes]]]:
    salt_width = draw(st.integers(0, 2))
    layout = RowKeyLayout(metric_width=draw(st.integers(1, 4)), tagk_width=draw(st.integers(1, 4)),
                          tagv_width=draw(st.integers(1, 4)), salt_width=salt_width,
                          salt_buckets=draw(st.integers(1, 256 if salt_width == 1 else 300)))
    metric = draw(st.binary(min_size=layout.metric_width, max_size=layout.metric_width))
    tagks = draw(st.lists(st.binary(min_size=layout.tagk_width, max_size=layout.tagk_width),
                          max_size=8, unique=True))
    tags = [(k, draw(st.binary(min_size=layout.tagv_width, max_size=layout.tagv_width)))
            for k in tagks]
    return layout, metric, draw(st.integers(0, 2**32 // 3600 - 1)) * 3600, tags


@SETTINGS
@given(layouts_and_keys())
def test_row_key_round_trip(case: tuple[RowKeyLayout, bytes, int, list[tuple[bytes, bytes]]]
                            ) -> None:
    layout, metric, base, tags = case
    key = layout.row_key(metric, base, tags)
    parts = layout.parse_row_key(key)
    assert (parts.metric_uid, parts.base_time_s, parts.tags) == (metric, base, tuple(sorted(tags)))
    assert layout.tsuid(key) == metric + b"".join(k + v for k, v in sorted(tags))
    assert layout.row_key_from_tsuid(layout.tsuid(key), base) == key
    assert parts.salt in layout.salt_prefixes()
    start, stop = layout.metric_scan_range(parts.salt, metric, base, base)
    assert start <= key < stop


def test_an_int_whose_bits_are_a_float_nan_decodes_beside_floats() -> None:
    # 0x7F800001 read as a float32 is a signalling NaN; among mostly-float cells the decoder
    # reads all windows as floats first, which must neither warn nor leak into the int.
    base = 1356998400
    pts: list[Point] = [(base, 1.5), (base + 1, 2.5), (base + 2, 0x7F800001)]
    row = decode_row(base, [compact_cells(single_cells(pts))])
    assert observed(row) == [(base * 1000, 1.5, False), ((base + 1) * 1000, 2.5, False),
                             ((base + 2) * 1000, 2139095041.0, True)]


@st.composite
def second_points(draw: st.DrawFn) -> tuple[int, list[Point]]:
    """A base time and 0-40 points at distinct whole seconds of its hour."""
    base = draw(bases)
    offsets = draw(st.lists(st.integers(0, 3599), max_size=40, unique=True))
    return base, [(base + offset, draw(values)) for offset in offsets]


@SETTINGS
@given(st.lists(st.one_of(second_points(), hour_points(max_size=30)), min_size=1, max_size=6),
       st.booleans())
def test_rows_not_compacted_yet_decode_as_their_cells(hours: list[tuple[int, list[Point]]],
                                                      column_order: bool) -> None:
    """Rows of single cells only, as an hour not compacted yet is stored (one cell per point),
    in HBase's column order or any other: each point as written."""
    by_base = {base: pts for base, pts in hours}
    rows = []
    for base, pts in by_base.items():
        cells = single_cells(pts)
        rows.append((base, {b"t:" + q: v for q, v in (sorted(cells) if column_order else cells)}))
    want = expected([p for pts in by_base.values() for p in pts])
    assert observed(decode_stored_rows(rows, b"t:")) == want


def as_read(cells: list[tuple[bytes, bytes]], packed: bool) -> dict[bytes, bytes]:
    """A row's cells as a store returns them: a dict, or joined as HBase's reply carried them."""
    if not packed:
        return dict(cells)
    columns, row_values = [c for c, _ in cells], [v for _, v in cells]
    return PackedCells(b"".join(columns), list(accumulate(map(len, columns))),
                       b"".join(row_values), list(accumulate(map(len, row_values))))


@SETTINGS
@given(st.lists(st.tuples(second_points(), st.booleans(), st.booleans(), st.booleans()),
                min_size=1, max_size=8))
def test_rows_of_single_cells_decode_as_their_cells_whatever_the_rows_beside_them(
        rows_drawn: list[tuple[tuple[int, list[Point]], bool, bool, bool]]) -> None:
    """Many rows in one call, each of single cells (dicts, or joined as HBase reads them) in
    column order or not, some with a cell of another resolution or a note: the rows checked
    together for the bulk path must each decode exactly as its own cells."""
    by_base: dict[int, tuple[list[Point], dict[bytes, bytes]]] = {}
    for (base, pts), packed, shuffled, odd in rows_drawn:
        cells = [(b"t:" + q, v) for q, v in single_cells(pts)]
        cells = cells[::-1] if shuffled else sorted(cells)
        if odd:  # an ms point at +0.5 s (its own timestamp), then a note
            pts = [*pts, (base * 1000 + 500, 7)]
            cells = [*cells, (b"t:" + point_cell(base * 1000 + 500, 7)[1], point_cell(
                base * 1000 + 500, 7)[2]), (b"t:\x01\x00\x00", b"{}")]
        by_base[base] = (pts, as_read(cells, packed))
    want = expected([p for pts, _ in by_base.values() for p in pts])
    rows = [(base, cells) for base, (_, cells) in by_base.items()]
    assert observed(decode_stored_rows(rows, b"t:")) == want
