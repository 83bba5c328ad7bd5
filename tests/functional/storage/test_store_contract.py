"""The storage contract, run against every backend: what UIDs, put and query rely on."""

from __future__ import annotations

import time
from typing import TypeVar

import numpy as np
import pytest

from app.storage.base import (
    ABILITIES,
    APPEND_MANY,
    HOUR_COLUMN,
    PUT_BLOCK,
    RANGE_STAMP,
    ROW_REGEX,
    SCAN_COLUMNS,
    SCAN_MANY,
    SCAN_PACKED,
    SCAN_STAMPED,
    SCAN_STAMPS,
    SCAN_STAMPS_PACKED,
    SCAN_STAMPS_SIZED,
    Ability,
    CellBlock,
    ColumnsPut,
    HourPut,
    Table,
    able,
    prefix_stop,
)
from app.tsdb import TSDB

A = TypeVar("A")


@pytest.fixture
def table(tsdb: TSDB) -> Table:
    return tsdb.data_table()


def test_put_then_row_returns_exact_bytes(table: Table) -> None:
    table.put(b"\x00\x01", {b"t:\x00\x00": b"\x12", b"t:\xff\xff": b""})
    assert table.row(b"\x00\x01") == {b"t:\x00\x00": b"\x12", b"t:\xff\xff": b""}
    assert table.row(b"\x00\x02") == {}


def test_scan_orders_rows_by_unsigned_bytes_and_stop_is_exclusive(table: Table) -> None:
    keys = [b"\x80", b"\x00\xff", b"\x01", b"\x00", b"\xff\x00"]
    table.put_many((key, {b"t:\x00\x00": key}) for key in keys)
    assert [k for k, _ in table.scan()] == [b"\x00", b"\x00\xff", b"\x01", b"\x80", b"\xff\x00"]
    assert [k for k, _ in table.scan(row_start=b"\x00\xff", row_stop=b"\x80")] == [
        b"\x00\xff", b"\x01"]
    assert [k for k, _ in table.scan(row_prefix=b"\x00")] == [b"\x00", b"\x00\xff"]
    assert [k for k, _ in table.scan(limit=2)] == [b"\x00", b"\x00\xff"]


def test_scan_columns_and_keys_only(table: Table) -> None:
    table.put(b"r", {b"t:\x00\x00": b"a", b"t:\x00\x10": b"b"})
    assert list(table.scan(columns=[b"t:\x00\x10"])) == [(b"r", {b"t:\x00\x10": b"b"})]
    keys = list(table.scan(keys_only=True))
    assert [k for k, _ in keys] == [b"r"]
    assert all(v == b"" for _, cells in keys for v in cells.values())


def test_scan_batches_many_rows(table: Table) -> None:
    table.put_many((i.to_bytes(2, "big"), {b"t:\x00\x00": b"x"}) for i in range(2500))
    rows = list(table.scan(batch_size=100))
    assert len(rows) == 2500
    assert rows[-1][0] == (2499).to_bytes(2, "big")


def test_rows_skips_missing_and_keeps_order(table: Table) -> None:
    table.put_many([(b"a", {b"t:\x00\x00": b"1"}), (b"c", {b"t:\x00\x00": b"3"})])
    assert table.rows([b"c", b"b", b"a"]) == [(b"c", {b"t:\x00\x00": b"3"}),
                                             (b"a", {b"t:\x00\x00": b"1"})]


def test_delete_columns_then_row(table: Table) -> None:
    table.put(b"r", {b"t:\x00\x00": b"a", b"t:\x00\x10": b"b"})
    table.delete(b"r", [b"t:\x00\x00"])
    assert table.row(b"r") == {b"t:\x00\x10": b"b"}
    table.delete(b"r")
    assert table.row(b"r") == {}


def test_delete_up_to_a_write_time_keeps_what_came_later(table: Table) -> None:
    table.put(b"r", {b"t:\x00\x00": b"a", b"t:\x00\x10": b"b"})
    seen_ms = max(table.row_write_times(b"r").values())
    time.sleep(0.005)  # write times are milliseconds: the overwrite must be strictly later
    table.put(b"r", {b"t:\x00\x10": b"c"})  # written after the time the delete is bounded by
    table.delete(b"r", [b"t:\x00\x00", b"t:\x00\x10"], up_to_ms=seen_ms)
    assert table.row(b"r") == {b"t:\x00\x10": b"c"}


def test_counter_inc_is_an_8_byte_big_endian_long(tsdb: TSDB) -> None:
    table = tsdb.uid_table()
    assert table.counter_inc(b"\x00", b"id:metrics") == 1
    assert table.counter_inc(b"\x00", b"id:metrics", 5) == 6
    assert table.row(b"\x00")[b"id:metrics"] == (6).to_bytes(8, "big")


def test_check_and_put_requires_expected_value(tsdb: TSDB) -> None:
    table = tsdb.uid_table()
    assert table.check_and_put(b"name", b"id:metrics", None, b"\x00\x00\x01")
    assert not table.check_and_put(b"name", b"id:metrics", None, b"\x00\x00\x02")
    assert table.row(b"name")[b"id:metrics"] == b"\x00\x00\x01"
    assert table.check_and_put(b"name", b"id:metrics", b"\x00\x00\x01", b"\x00\x00\x03")
    assert table.row(b"name")[b"id:metrics"] == b"\x00\x00\x03"


def test_append_concatenates(table: Table) -> None:
    table.append(b"r", b"t:\x05\x00\x00", b"\x00\x00\x01")
    table.append(b"r", b"t:\x05\x00\x00", b"\x00\x10\x02")
    assert table.row(b"r") == {b"t:\x05\x00\x00": b"\x00\x00\x01\x00\x10\x02"}


def test_write_times_are_milliseconds_and_ordered(table: Table) -> None:
    table.put(b"r", {b"t:\x00\x00": b"a"})
    table.put(b"r", {b"t:\x00\x08": b"b"})
    times = table.row_write_times(b"r")
    assert set(times) == {b"t:\x00\x00", b"t:\x00\x08"}
    assert times[b"t:\x00\x00"] <= times[b"t:\x00\x08"]
    assert times[b"t:\x00\x00"] > 1_500_000_000_000


@pytest.mark.parametrize(("prefix", "stop"), [
    (b"\x00\x01", b"\x00\x02"), (b"\x00\xff", b"\x01"), (b"\xff\xff", None), (b"a", b"b")])
def test_prefix_stop(prefix: bytes, stop: bytes | None) -> None:
    assert prefix_stop(prefix) == stop


# --- optional abilities (app.storage.base.ABILITIES) ----------------------------------------
# Each is declared in the table's ``abilities`` exactly when the table has it, and answers
# as the plain scan would. A backend that lacks one is read through the plain path.


def test_declared_abilities_are_exactly_the_ones_the_table_has(table: Table) -> None:
    for ability in ABILITIES:
        has_it = isinstance(table, ability.protocol)  # type: ignore[arg-type]
        assert has_it == (ability.name in table.abilities), ability.name
    assert table.abilities <= {ability.name for ability in ABILITIES}


@pytest.fixture
def three_rows(table: Table) -> tuple[int, int]:
    """Rows a (2 cells), b (1 cell), c (1 cell): the write-time bounds in ms."""
    before_ms = int(time.time() * 1000) - 1
    table.put(b"a", {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"})
    table.put(b"b", {b"t:\x00\x20": b"\x03"})
    table.put(b"c", {b"t:\x01\x00": b"\x04"})
    return before_ms, int(time.time() * 1000) + 1


def _declared(table: Table, ability: Ability[A]) -> A:
    able_table = able(table, ability)
    if able_table is None:
        pytest.skip(f"this backend has no {ability.name}")
    return able_table


def _within(bounds: tuple[int, int], newest_ms: int) -> bool:
    return bounds[0] <= newest_ms <= bounds[1]


def test_scan_stamps_counts_cells_without_values(table: Table,
                                                 three_rows: tuple[int, int]) -> None:
    rows = list(_declared(table, SCAN_STAMPS).scan_stamps(b"a", b"c", "t"))
    assert [(key, cells) for key, cells, _ in rows] == [(b"a", 2), (b"b", 1)]
    assert all(_within(three_rows, newest) for _, _, newest in rows)


def test_scan_stamped_returns_the_cells_with_their_stamp(table: Table,
                                                         three_rows: tuple[int, int]) -> None:
    rows = list(_declared(table, SCAN_STAMPED).scan_stamped(b"a", b"c", "t"))
    assert [(key, cells, count) for key, cells, count, _, _ in rows] == [
        (b"a", {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}, 2),
        (b"b", {b"t:\x00\x20": b"\x03"}, 1)]
    assert all(_within(three_rows, row[3]) and row[4] > 0 for row in rows)


def test_scan_stamps_sized_weighs_as_scan_stamped(table: Table,
                                                  three_rows: tuple[int, int]) -> None:
    sized = list(_declared(table, SCAN_STAMPS_SIZED).scan_stamps_sized(b"a", None, "t"))
    assert [(key, cells) for key, cells, _, _ in sized] == [(b"a", 2), (b"b", 1), (b"c", 1)]
    assert all(_within(three_rows, newest) for _, _, newest, _ in sized)
    stamped = able(table, SCAN_STAMPED)
    if stamped is not None:
        assert [row[3] for row in sized] == [
            row[4] for row in stamped.scan_stamped(b"a", None, "t")]


def test_scan_many_returns_each_range_in_order(table: Table,
                                               three_rows: tuple[int, int]) -> None:
    rows = list(_declared(table, SCAN_MANY).scan_many([(b"c", None), (b"a", b"b")]))
    assert [key for key, _ in rows] == [b"c", b"a"]
    assert rows[1][1] == {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}


def test_range_stamp_counts_cells_over_ranges(table: Table,
                                              three_rows: tuple[int, int]) -> None:
    cells, newest = _declared(table, RANGE_STAMP).range_stamp([(b"a", b"b"), (b"c", b"d")],
                                                               "t")
    assert cells == 3 and _within(three_rows, newest)


def test_scan_packed_joins_the_prefixed_cells(table: Table, three_rows: tuple[int, int]) -> None:
    rows = list(_declared(table, SCAN_PACKED).scan_packed(b"a", None, "t", [b"\x00"]))
    assert [(key, cells, qualifiers, values) for key, cells, _, qualifiers, values in rows] == [
        (b"a", 2, b"\x00\x00\x00\x10", b"\x01\x02"), (b"b", 1, b"\x00\x20", b"\x03")]
    assert all(_within(three_rows, row[2]) for row in rows)


def test_scan_stamps_packed_stamps_the_prefixed_cells(table: Table,
                                                      three_rows: tuple[int, int]) -> None:
    rows = list(_declared(table, SCAN_STAMPS_PACKED).scan_stamps_packed(b"a", None, "t",
                                                                         [b"\x01"]))
    assert [(key, cells) for key, cells, _ in rows] == [(b"c", 1)]
    assert _within(three_rows, rows[0][2])


def test_put_block_stores_the_cells_in_order_and_keeps_the_rest(
        table: Table, three_rows: tuple[int, int]) -> None:
    blocks = _declared(table, PUT_BLOCK)
    # Cells: (a, 0000) replaced, (d, 0010) new, then (d, 0010) again: the later one stays.
    blocks.put_block(CellBlock([b"a", b"d"], np.array([0, 1, 1], dtype=np.int64),
                               b"\x00\x00\x00\x10\x00\x10", np.array([2, 2, 2]),
                               b"\x09\x0a\x0b", np.array([1, 1, 1])))
    assert list(table.scan()) == [(b"a", {b"t:\x00\x00": b"\x09", b"t:\x00\x10": b"\x02"}),
                                  (b"b", {b"t:\x00\x20": b"\x03"}),
                                  (b"c", {b"t:\x01\x00": b"\x04"}),
                                  (b"d", {b"t:\x00\x10": b"\x0b"})]


def test_append_many_appends_in_order_within_a_cell(table: Table) -> None:
    table.append(b"r", b"t:\x05\x00\x00", b"\x00\x00\x01")
    table.put_many([])  # nothing to write: nothing happens (the batcher has no call to make)
    _declared(table, APPEND_MANY).append_many([])
    _declared(table, APPEND_MANY).append_many([
        (b"r", b"t:\x05\x00\x00", b"\x00\x10\x02"), (b"s", b"t:\x05\x00\x00", b"\x00\x20\x03"),
        (b"r", b"t:\x05\x00\x00", b"\x00\x30\x04")])
    assert table.row(b"r") == {b"t:\x05\x00\x00": bytes.fromhex("000001 001002 003004")}
    assert table.row(b"s") == {b"t:\x05\x00\x00": bytes.fromhex("002003")}


def test_with_row_regex_keeps_the_rows_whose_key_matches(table: Table) -> None:
    # tags: (tagk 1, tagv 2|3) and, in row d, a quote, a backslash-E and non-ASCII bytes
    head = b"\x00\x00\x01AAAA"  # metric 1, base time "AAAA"
    keys = [head + b"\x00\x00\x01\x00\x00\x02", head + b"\x00\x00\x01\x00\x00\x03",
            head + b"\x00\x00\x04\x00\x00\x02", head + b"'\\E\xc3\xa9\xff"]
    table.put_many((key, {b"t:\x00\x00": b"\x01"}) for key in keys)
    filtering = _declared(table, ROW_REGEX)
    pair = "\\x{0}\\x{0}\\x{1}\\x{0}\\x{0}\\x{2}"  # tagk 1 with tagv 2, as key_regex writes it
    filtered = filtering.with_row_regex(f"(?s)^.{{2,}}?{pair}")
    assert [key for key, _ in filtered.scan()] == [keys[0]]
    assert [row[0] for row in filtered.scan_stamps(b"\x00", None, "t")] == [keys[0]]
    odd = filtering.with_row_regex("(?s)'\\x{5c}E\\x{e9}\\x{fffd}$")
    assert [key for key, _ in odd.scan(keys_only=True)] == [keys[3]]
    assert [key for key, _ in table.scan()] == keys  # the table itself is not narrowed
def _blobs(joined: bytes) -> list[bytes]:
    """The 4-byte blobs the tests put, out of a part's join (in no promised order)."""
    return sorted(joined[i:i + 4] for i in range(0, len(joined), 4))


def test_scan_columns_returns_what_was_put_until_a_cell_of_the_row_changes(
        table: Table, three_rows: tuple[int, int]) -> None:
    columns = _declared(table, SCAN_COLUMNS)
    first = columns.scan_columns([(b"a", b"c")], [7])
    assert first.dirty == [(b"a", 0), (b"b", 0)]  # every row, before any put
    assert first.parts == {7: b""}
    kept = columns.put_columns([ColumnsPut(b"a", 0, [(7, b"a7.."), (8, b"a8..")]),
                                ColumnsPut(b"b", 0, [(7, b"b7..")])])
    assert kept == 2
    found = columns.scan_columns([(b"a", b"c")], [7, 8])
    assert found.dirty == []
    assert _blobs(found.parts[7]) == [b"a7..", b"b7.."] and found.parts[8] == b"a8.."
    # Any change to a cell of row a (a put, an append, a delete): its parts are not returned.
    for change in (lambda: table.put(b"a", {b"t:\x00\x30": b"\x05"}),
                   lambda: table.append(b"a", b"t:\x05\x00\x00", b"\x00\x40\x06"),
                   lambda: table.delete(b"a", [b"t:\x00\x30"])):
        change()
        found = columns.scan_columns([(b"a", b"c")], [7, 8])
        assert [key for key, _ in found.dirty] == [b"a"]
        assert found.parts == {7: b"b7..", 8: b""}
        generation = found.dirty[0][1]
        # Put with the generation read: current again (its earlier parts replaced).
        assert columns.put_columns([ColumnsPut(b"a", generation, [(7, b"A7..")])]) == 1
        found = columns.scan_columns([(b"a", b"c")], [7, 8])
        assert _blobs(found.parts[7]) == [b"A7..", b"b7.."] and found.parts[8] == b""


def test_put_columns_refuses_a_row_written_since_it_was_read(
        table: Table, three_rows: tuple[int, int]) -> None:
    columns = _declared(table, SCAN_COLUMNS)
    (key, generation), *_ = columns.scan_columns([(b"a", b"b")], [7]).dirty
    table.put(b"a", {b"t:\x00\x30": b"\x05"})  # after the read, before the put
    assert columns.put_columns([ColumnsPut(key, generation, [(7, b"old.")])]) == 0
    found = columns.scan_columns([(b"a", b"b")], [7])
    assert [row for row, _ in found.dirty] == [b"a"] and found.parts[7] == b""
    # A new row in the range is listed too.
    table.put(b"ab", {b"t:\x00\x00": b"\x01"})
    assert [row for row, _ in columns.scan_columns([(b"a", b"b")], [7]).dirty] == [b"a", b"ab"]


def test_hour_columns_are_kept_until_a_cell_of_their_hour_changes(table: Table) -> None:
    """Hours are key prefixes of 2 bytes here: rows h1a, h1b in hour h1, h2a in hour h2."""
    columns = _declared(table, HOUR_COLUMN)
    table.put(b"h1a", {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"})
    table.put(b"h1b", {b"t:\x00\x00": b"\x03"})
    table.put(b"h2a", {b"t:\x00\x00": b"\x04"})
    written = max(max(table.row_write_times(key).values()) for key in (b"h1a", b"h1b"))
    assert columns.hour_prefixes([(b"h", b"i")]) == []
    assert columns.put_hour_columns(2, [HourPut(b"h1", (3, written), b"one"),
                                        HourPut(b"h2", (1, 0), b"two")]) == 1  # h2: stale
    assert columns.hour_prefixes([(b"h", b"i")]) == [b"h1"]
    assert columns.hour_column(b"h1") == b"one" and columns.hour_column(b"h2") is None
    # Any change to a cell of the hour (a put, an append, a delete) drops its blob; a
    # change in another hour does not.
    for change in (lambda: table.put(b"h1b", {b"t:\x00\x30": b"\x05"}),
                   lambda: table.append(b"h1a", b"t:\x05\x00\x00", b"\x00\x40\x06"),
                   lambda: table.delete(b"h1b", [b"t:\x00\x30"])):
        cells = sum(len(table.row(key)) for key in (b"h1a", b"h1b"))
        newest = max(max(table.row_write_times(key).values()) for key in (b"h1a", b"h1b"))
        assert columns.put_hour_columns(2, [HourPut(b"h1", (cells, newest), b"one")]) == 1
        table.put(b"h2a", {b"t:\x00\x20": b"\x07"})
        assert columns.hour_column(b"h1") == b"one"
        change()
        assert columns.hour_column(b"h1") is None
        assert columns.hour_prefixes([(b"h", b"i")]) == []
