"""The storage contract, run against every backend: what UIDs, put and query rely on."""

from __future__ import annotations

import time

import pytest

from app.storage.base import Table, prefix_stop
from app.tsdb import TSDB


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
