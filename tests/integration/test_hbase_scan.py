"""HBase scans fetch the next batch while the caller reads the last (``hbase_scan.Scanner``
with the store's prefetch threads): rows in key order, limits exact, a scan left early ends
its call in flight and frees its connection. Through Thrift (``scan_rpc=thrift``): its
connections and replies are what these tests watch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import happybase  # noqa: F401  (registers Hbase_thrift)
import pytest
from Hbase_thrift import IllegalArgument

from app.errors import StorageError
from app.storage import hbase_reply
from app.storage.hbase import HBaseTable
from app.tsdb import TSDB
from tests.conftest import backend_config, drop_tables, make_tsdb

ROWS = 700  # calls of 100 rows (rows of unknown size), then up to 1 000: two calls
CELLS_PER_ROW = 40


@pytest.fixture
def one_connection(tmp_path: Path) -> Iterator[TSDB]:
    """Recycled test tables behind a pool of one Thrift connection: a prefetch that kept its
    connection, or a scan left with a call in flight, would starve the next call."""
    config = backend_config("hbase", tmp_path, {"tsd.storage.hbase.pool_size": 1,
                                                "tsd.storage.hbase.timeout_ms": 3000,
                                                "tsd.storage.hbase.scan_rpc": "thrift"})
    tsdb = make_tsdb(config)
    yield tsdb
    drop_tables(tsdb)


def keys(count: int) -> list[bytes]:
    return [i.to_bytes(2, "big") for i in range(count)]


def test_prefetched_batches_keep_key_order_and_limits(one_connection: TSDB) -> None:
    table = one_connection.data_table()
    table.put_many((key, {b"t:" + i.to_bytes(2, "big"): b"\x01" for i in range(CELLS_PER_ROW)})
                   for key in keys(ROWS))
    assert [key for key, _ in table.scan()] == keys(ROWS)
    rows = list(table.scan(row_start=keys(ROWS)[10], limit=150))
    assert [key for key, _ in rows] == keys(160)[10:]
    assert all(len(cells) == CELLS_PER_ROW for _, cells in rows)


def test_a_scan_left_early_frees_its_connection(one_connection: TSDB) -> None:
    table = one_connection.data_table()
    table.put_many((key, {b"t:\x00\x00": b"\x01"}) for key in keys(ROWS))
    for _ in range(3):
        scan = table.scan(batch_size=100)
        assert [next(scan)[0] for _ in range(101)] == keys(101)  # the 2nd batch is in flight
        scan.close()  # type: ignore[attr-defined]
    # Three scans left with a call in flight each, one connection: it is free again.
    assert table.row(keys(ROWS)[-1]) == {b"t:\x00\x00": b"\x01"}


def test_a_failed_scan_call_is_a_storage_error_and_the_connection_still_works(
        one_connection: TSDB) -> None:
    """The gateway's IllegalArgument for a scanner it does not know, read from the raw reply
    (``hbase_reply``), is the StorageError it was through thriftpy2; the one connection then
    serves the next call (the reply was read to its end)."""
    table = one_connection.data_table()
    assert isinstance(table, HBaseTable)
    table.put_many([(key, {b"t:\x00\x00": b"\x01"}) for key in keys(3)])
    with pytest.raises(StorageError) as failed:
        table.scanner_rows(2_000_000_000, 10)
    assert isinstance(failed.value.__cause__, IllegalArgument)
    address = table.store.address
    assert failed.value.message == f"HBase failed to scan tsdb (Thrift server at {address})"
    assert [key for key, _ in table.scan()] == keys(3)


class Abort(BaseException):
    """Not an ``Exception``: what a KeyboardInterrupt or a thread's forced end looks like."""


def test_a_call_cut_short_never_leaves_its_reply_for_the_next(
        one_connection: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``scannerGetList`` abandoned before its reply is read leaves that reply on the
    socket: the connection is dropped, not handed to the next call (which would read the
    old reply as its own, or wait for bytes that never come)."""
    table = one_connection.data_table()
    table.put_many((key, {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}) for key in keys(50))
    need = hbase_reply.ReplyReader.need
    cut = [True]

    def need_once_cut(reader: hbase_reply.ReplyReader, size: int) -> None:
        if cut.pop() if cut else False:
            raise Abort
        need(reader, size)

    monkeypatch.setattr(hbase_reply.ReplyReader, "need", need_once_cut)
    with pytest.raises(Abort):
        list(table.scan())
    assert table.row(keys(50)[7]) == {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}
    assert [key for key, _ in table.scan()] == keys(50)
    assert [key for key, _ in table.scan(row_start=keys(50)[40])] == keys(50)[40:]
