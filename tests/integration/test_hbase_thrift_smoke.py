"""The happybase/Thrift1 features pytsd relies on, against a real HBase Thrift1 server.

Run with a server from ``scripts/hbase/hbase.sh start`` (or ``make hbase-up``):
    TSD_TEST_HBASE=127.0.0.1:9090 python -m pytest tests/integration/test_hbase_thrift_smoke.py

Expected values come from HBase's documented semantics (stop row exclusive, rows sorted by
unsigned bytes, Increment stores an 8-byte big-endian long, KeyOnlyFilter strips values,
FirstKeyOnlyFilter keeps the lowest column of each row) and from Hbase.thrift's checkAndPut
contract ("if not provided the check is for the non-existence of the column").
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator

import happybase
import pytest
from Hbase_thrift import Mutation  # registered by `import happybase` (thriftpy2 module)

FAMILIES = {"id": {"max_versions": 1}, "name": {"max_versions": 1}, "t": {"max_versions": 1}}
CONNECT_TIMEOUT_MS = 30_000


def _address() -> tuple[str, int]:
    address = os.environ.get("TSD_TEST_HBASE")
    if not address:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the HBase tests: TSD_TEST_HBASE is not set")
        pytest.skip(
            "needs a real HBase Thrift1 server: set TSD_TEST_HBASE=127.0.0.1:9090 "
            "after `scripts/hbase/hbase.sh start`"
        )
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


@pytest.fixture(scope="module")
def connection() -> Iterator[happybase.Connection]:
    host, port = _address()
    # A unique prefix keeps parallel runs and leftovers of crashed runs apart.
    conn = happybase.Connection(
        host, port, timeout=CONNECT_TIMEOUT_MS, table_prefix=f"smoke{uuid.uuid4().hex[:8]}"
    )
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def table(connection: happybase.Connection) -> Iterator[happybase.Table]:
    connection.create_table("tsdb", FAMILIES)
    yield connection.table("tsdb")
    connection.delete_table("tsdb", disable=True)


@pytest.fixture
def key(request: pytest.FixtureRequest) -> bytes:
    """A row-key prefix private to one test, so tests sharing the table do not see each other."""
    return request.node.name.encode() + b"/"


def test_create_table_with_families(
    connection: happybase.Connection, table: happybase.Table
) -> None:
    assert table.name in connection.client.getTableNames()
    families = table.families()
    assert set(families) == {b"id", b"name", b"t"}
    assert families[b"t"]["max_versions"] == 1


def test_put_row_rows(table: happybase.Table, key: bytes) -> None:
    table.put(key + b"a", {b"t:q1": b"v1", b"t:q2": b"v2", b"name:n": b"x"})
    table.put(key + b"b", {b"t:q1": b"w1"})
    assert table.row(key + b"a") == {b"t:q1": b"v1", b"t:q2": b"v2", b"name:n": b"x"}
    assert table.row(key + b"a", columns=[b"t:q2"]) == {b"t:q2": b"v2"}
    assert table.row(key + b"a", columns=[b"t"]) == {b"t:q1": b"v1", b"t:q2": b"v2"}
    assert table.row(key + b"missing") == {}
    # rows() skips absent rows and keeps the requested order
    got = table.rows([key + b"b", key + b"missing", key + b"a"], columns=[b"t:q1"])
    assert got == [(key + b"b", {b"t:q1": b"w1"}), (key + b"a", {b"t:q1": b"v1"})]


def test_binary_keys_and_values_round_trip(table: happybase.Table, key: bytes) -> None:
    row = key + bytes([0x00, 0x80, 0xFF, 0x27])  # NUL, non-UTF-8 bytes and a quote
    qualifier = b"t:" + bytes([0xFF, 0x00])
    table.put(row, {qualifier: bytes(range(256))})
    assert table.row(row) == {qualifier: bytes(range(256))}


def _put_rows(table: happybase.Table, key: bytes, suffixes: list[bytes]) -> None:
    with table.batch() as batch:
        for suffix in suffixes:
            batch.put(key + suffix, {b"t:a": b"1", b"t:b": b"2", b"id:c": b"3"})


def test_scan_ranges_prefix_batch_and_limit(table: happybase.Table, key: bytes) -> None:
    _put_rows(table, key, [b"\x01", b"\x02", b"\x02\x00", b"\x03", b"\x80", b"\xff"])

    def rows(**kwargs: object) -> list[bytes]:
        return [row for row, _ in table.scan(**kwargs)]

    # stop row is exclusive; order is unsigned-byte order (0x80 and 0xff sort last)
    assert rows(row_start=key + b"\x02", row_stop=key + b"\x80") == [
        key + b"\x02",
        key + b"\x02\x00",
        key + b"\x03",
    ]
    assert rows(row_prefix=key + b"\x02") == [key + b"\x02", key + b"\x02\x00"]
    assert rows(row_prefix=key) == [
        key + s for s in [b"\x01", b"\x02", b"\x02\x00", b"\x03", b"\x80", b"\xff"]
    ]
    # batch_size (scanner caching) smaller than the result still returns every row
    assert len(rows(row_prefix=key, batch_size=2)) == 6
    assert rows(row_prefix=key, limit=2) == [key + b"\x01", key + b"\x02"]
    cells = dict(table.scan(row_prefix=key + b"\x03", columns=[b"t:b", b"id"]))
    assert cells == {key + b"\x03": {b"t:b": b"2", b"id:c": b"3"}}


def test_scan_key_only_and_first_key_only_filters(table: happybase.Table, key: bytes) -> None:
    _put_rows(table, key, [b"1", b"2"])
    key_only = dict(table.scan(row_prefix=key, filter=b"KeyOnlyFilter()"))
    assert key_only == {
        key + b"1": {b"id:c": b"", b"t:a": b"", b"t:b": b""},
        key + b"2": {b"id:c": b"", b"t:a": b"", b"t:b": b""},
    }
    # the first cell of a row is the lowest family:qualifier, here id:c
    first = dict(table.scan(row_prefix=key, filter=b"FirstKeyOnlyFilter()"))
    assert first == {key + b"1": {b"id:c": b"3"}, key + b"2": {b"id:c": b"3"}}
    both = dict(table.scan(row_prefix=key, filter=b"KeyOnlyFilter() AND FirstKeyOnlyFilter()"))
    assert both == {key + b"1": {b"id:c": b""}, key + b"2": {b"id:c": b""}}


def test_prefix_filter_is_byte_exact(table: happybase.Table, key: bytes) -> None:
    _put_rows(table, key, [b"\xff'\x00", b"\xff'\x01", b"\xfe'\x00"])
    # in the filter language a quote inside a quoted argument is doubled
    quoted = (key + b"\xff'").replace(b"'", b"''")
    got = [row for row, _ in table.scan(filter=b"PrefixFilter('" + quoted + b"')")]
    assert got == [key + b"\xff'\x00", key + b"\xff'\x01"]


def test_counter_inc(table: happybase.Table, key: bytes) -> None:
    row = key + b"\x00"  # OpenTSDB's MAXID row is a single 0x00 byte
    assert table.counter_inc(row, b"id:metrics") == 1
    assert table.counter_inc(row, b"id:metrics", value=5) == 6
    assert table.counter_dec(row, b"id:metrics") == 5
    assert table.counter_get(row, b"id:metrics") == 5
    # HBase stores counters as 8-byte big-endian signed longs
    assert table.row(row) == {b"id:metrics": struct.pack(">q", 5)}


def test_delete_row_and_columns(table: happybase.Table, key: bytes) -> None:
    table.put(key + b"r", {b"t:a": b"1", b"t:b": b"2", b"id:c": b"3"})
    table.delete(key + b"r", columns=[b"t:a"])
    assert table.row(key + b"r") == {b"t:b": b"2", b"id:c": b"3"}
    table.delete(key + b"r")
    assert table.row(key + b"r") == {}


def test_include_timestamp(table: happybase.Table, key: bytes) -> None:
    table.put(key + b"r", {b"t:a": b"1"}, timestamp=1_356_998_400_000)
    assert table.row(key + b"r", include_timestamp=True) == {b"t:a": (b"1", 1_356_998_400_000)}
    scanned = list(table.scan(row_prefix=key, include_timestamp=True))
    assert scanned == [(key + b"r", {b"t:a": (b"1", 1_356_998_400_000)})]


def _check_and_put(
    table: happybase.Table, row: bytes, expected: bytes | None, value: bytes
) -> bool:
    """Hbase.thrift: checkAndPut(1:tableName, 2:row, 3:column, 5:value, 6:mput, 7:attributes).

    ``table.name`` already carries the connection's table prefix.
    """
    mutation = Mutation(column=b"id:metrics", value=value)
    return bool(
        table.connection.client.checkAndPut(table.name, row, b"id:metrics", expected, mutation, {})
    )


def test_check_and_put_must_not_exist(table: happybase.Table, key: bytes) -> None:
    row = key + b"sys.cpu"
    assert _check_and_put(table, row, None, b"\x00\x00\x01") is True
    assert _check_and_put(table, row, None, b"\x00\x00\x02") is False
    assert table.row(row) == {b"id:metrics": b"\x00\x00\x01"}


def test_check_and_put_expected_value(table: happybase.Table, key: bytes) -> None:
    row = key + b"r"
    table.put(row, {b"id:metrics": b"old"})
    assert _check_and_put(table, row, b"other", b"new") is False
    assert table.row(row) == {b"id:metrics": b"old"}
    assert _check_and_put(table, row, b"old", b"new") is True
    assert table.row(row) == {b"id:metrics": b"new"}


def test_check_and_put_absent_also_matches_empty_value(table: happybase.Table, key: bytes) -> None:
    # Gotcha: HBase treats a null/empty expected value as "absent OR empty", so a cell that
    # holds b"" does not block a must-not-exist put; b"" as expected behaves like None.
    table.put(key + b"e1", {b"id:metrics": b""})
    assert _check_and_put(table, key + b"e1", None, b"x") is True
    assert _check_and_put(table, key + b"e2", b"", b"x") is True
    assert _check_and_put(table, key + b"e2", b"", b"y") is False
