"""Data-table scans over HBase's native RPC (``tsd.storage.hbase.scan_rpc=native``,
``app/storage/hbase_native``) read the very rows the Thrift path reads: cells written by hand
and read back, ranges, a wide row, every filter pytsd's scans use, several regions (a table
split through the master's RPC, the client's cached regions then stale), and a query through
the Flask app answering the same JSON."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import load_config
from app.errors import StorageUnavailableError
from app.storage.hbase import HBaseStore, HBaseTable, row_regex_filter
from app.storage.hbase_native import messages, wire, zk
from app.storage.hbase_native.calls import NativeScannerCalls
from app.storage.hbase_native.client import META_REGION, NativeClient
from app.storage.hbase_native.rpc import Connection
from app.storage.hbase_native.scan import region_rows
from app.tsdb import TSDB
from tests.conftest import (
    app_over,
    backend_config,
    drop_tables,
    hbase_address,
    hbase_zk_quorum,
    make_tsdb,
)

ROWS = [  # written by Thrift; the expected cells below are written by hand
    (b"a1", {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02\x03", b"t:\x80\x00": b""}),
    (b"a2", {b"t:\x7f\xff": b"\xff" * 8}),
    (b"b1", {b"t:\x00\x07": b"\x00\x00\x00\x05"}),
]


def native_settings() -> dict[str, Any]:
    quorum = hbase_zk_quorum()
    if quorum is None:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    return {"tsd.storage.hbase.scan_rpc": "native", "tsd.storage.hbase.zk_quorum": quorum}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[TSDB, TSDB]]:
    """The same tables through Thrift and through the native client."""
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True})
    thrift = make_tsdb(config)
    native = TSDB(load_config({**config, **native_settings()}, environ={}))
    table = native.data_table()
    assert isinstance(table, HBaseTable)
    assert isinstance(table._scanner_calls(None), NativeScannerCalls)  # not Thrift again
    yield thrift, native
    native.close()
    drop_tables(thrift)


def listed(rows: Iterator[tuple[bytes, Any]]) -> list[tuple[bytes, list[tuple[bytes, bytes]]]]:
    return [(key, list(cells.items())) for key, cells in rows]


def test_rows_read_natively_are_the_cells_written(pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    thrift.data_table().put_many(ROWS)
    table = native.data_table()
    # HBase's order: rows and qualifiers as unsigned bytes.
    assert listed(table.scan()) == [
        (b"a1", [(b"t:\x00\x00", b"\x01"), (b"t:\x00\x10", b"\x02\x03"), (b"t:\x80\x00", b"")]),
        (b"a2", [(b"t:\x7f\xff", b"\xff\xff\xff\xff\xff\xff\xff\xff")]),
        (b"b1", [(b"t:\x00\x07", b"\x00\x00\x00\x05")]),
    ]
    assert listed(table.scan()) == listed(thrift.data_table().scan())
    assert listed(table.scan(row_start=b"a2", row_stop=b"b1")) == [
        (b"a2", [(b"t:\x7f\xff", b"\xff" * 8)])]
    assert [key for key, _ in table.scan(limit=2)] == [b"a1", b"a2"]
    assert [key for key, _ in table.scan(row_prefix=b"b")] == [b"b1"]


def test_an_empty_range_and_an_empty_table_read_no_rows(pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    assert list(native.data_table().scan()) == []
    thrift.data_table().put_many(ROWS)
    assert list(native.data_table().scan(row_start=b"a3", row_stop=b"b0")) == []
    assert list(native.data_table().scan(row_start=b"c")) == []


def test_a_wide_row_of_varied_values(pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    widths = (1, 2, 4, 8)
    cells = {b"t:" + i.to_bytes(2, "big"): bytes([i % 256]) * widths[i % 4]
             for i in range(5000)}
    thrift.data_table().put_many([(b"wide", cells), (b"x", {b"t:\x00\x00": b"\x09"})])
    rows = listed(native.data_table().scan())
    assert [key for key, _ in rows] == [b"wide", b"x"]
    wide = rows[0][1]
    assert len(wide) == 5000
    assert wide[0] == (b"t:\x00\x00", b"\x00")
    assert wide[1] == (b"t:\x00\x01", b"\x01\x01")
    assert wide[4999] == (b"t:\x13\x87", b"\x87" * 8)
    assert rows == listed(thrift.data_table().scan())


def test_every_filter_reads_what_thrift_reads(pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    thrift.data_table().put_many(ROWS)
    by_thrift, by_native = thrift.data_table(), native.data_table()
    assert listed(by_native.scan(keys_only=True)) == [
        (b"a1", [(b"t:\x00\x00", b""), (b"t:\x00\x10", b""), (b"t:\x80\x00", b"")]),
        (b"a2", [(b"t:\x7f\xff", b"")]), (b"b1", [(b"t:\x00\x07", b"")])]
    sized = list(by_native.scan_stamps_sized(b"", None, "t"))  # type: ignore[attr-defined]
    assert [(key, cells) for key, cells, _, _ in sized] == [(b"a1", 3), (b"a2", 1), (b"b1", 1)]
    assert [size for *_, size in sized] == [3 * 2 + 3 * 4 + 3, 2 + 4 + 8, 2 + 4 + 4]
    assert sized == list(by_thrift.scan_stamps_sized(b"", None, "t"))  # type: ignore[attr-defined]
    packed = list(by_native.scan_packed(b"", None, "t", [b"\x00"]))  # type: ignore[attr-defined]
    assert [(key, count, quals, values) for key, count, _, quals, values in packed] == [
        (b"a1", 2, b"\x00\x00\x00\x10", b"\x01\x02\x03"), (b"b1", 1, b"\x00\x07",
                                                            b"\x00\x00\x00\x05")]
    for method, args in (("scan_stamps", ("t",)), ("scan_stamped", ("t",)),
                         ("scan_packed", ("t", [b"\x7f", b"\x80"])),
                         ("scan_stamps_packed", ("t", [b"\x00\x10"]))):
        assert list(getattr(by_native, method)(b"", None, *args)) == list(
            getattr(by_thrift, method)(b"", None, *args)), method
    regex = "^a"
    assert [key for key, _ in by_native.with_row_regex(regex).scan()] == [  # type: ignore[attr-defined]
        b"a1", b"a2"]
    assert isinstance(by_native, HBaseTable)
    assert isinstance(by_native._scanner_calls(row_regex_filter(regex)), NativeScannerCalls)
    # A filter the native client does not express stays on Thrift.
    assert by_native._scanner_calls(b"PrefixFilter('a')") is by_native


def _master(quorum: str) -> tuple[str, int]:
    """The active master's RPC address: ``<basedir>/master`` = 0xFF, id, ``PBUF``, ``Master``
    (master 1 = ``ServerName``: host_name 1, port 2)."""
    host, port = zk.parse_quorum(quorum)[0]
    data = zk.get_data(host, port, "/hbase/master", 10)
    body = data[5 + int.from_bytes(data[1:5], "big") + len(b"PBUF"):]
    server = wire.message(wire.first_bytes(wire.message(body), 1))
    return wire.first_bytes(server, 1).decode(), wire.first_int(server, 2)


def split(client: NativeClient, table: bytes, at: bytes) -> None:
    """Split the table's only region at ``at`` (``MasterService.SplitRegion``:
    ``SplitTableRegionRequest`` region_info 1 = the ``RegionInfo`` from ``hbase:meta``,
    split_row 2) and wait for both daughters to be served."""
    host, port = zk.meta_server(client.zk_servers, client.zk_basedir, 10)
    meta = messages.Region(META_REGION, b"", b"", f"{host}:{port}")
    (row,) = region_rows(client.call, meta, table + b",,", table + b" ,,", [b"info"], 10)
    info = dict(zip(row.column_list(), row.value_list(), strict=True))[b"info:regioninfo"]
    master = Connection(*_master(client.zk_quorum), 30, service="MasterService")
    try:
        master.call("SplitRegion", wire.field_bytes(1, info[len(b"PBUF"):])
                    + wire.field_bytes(2, at))
    finally:
        master.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        regions = client.regions(table, refresh=True)
        if len(regions) == 2 and all(region.server for region in regions):
            return
        time.sleep(0.3)
    raise AssertionError(f"the split of {table!r} did not finish")


@pytest.fixture
def own_store() -> Iterator[HBaseStore]:
    """A table of its own (never recycled: it gets split)."""
    address, quorum = hbase_address(), hbase_zk_quorum()
    if not address or not quorum:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    store = HBaseStore(host, int(port), f"nsplit{uuid.uuid4().hex[:8]}_", writers=0,
                       native=NativeClient(quorum), native_tables=frozenset({"tsdb"}))
    store.create_table("tsdb", {"t": {}})
    yield store
    store.drop_tables()
    store.close()


def test_a_scan_across_regions_and_after_a_split_it_did_not_see(own_store: HBaseStore) -> None:
    table = own_store.table("tsdb")
    keys = [bytes([i * 20]) for i in range(10)]  # 0x00, 0x14, ... 0xb4
    table.put_many((key, {b"t:a": key}) for key in keys)
    assert [key for key, _ in table.scan()] == keys  # the regions are now known (one)
    assert own_store.native is not None
    split(own_store.native, table.full_name, b"\x64")
    # A new client sees two regions; the store's own still holds the parent's place and must
    # read hbase:meta again when the parent's server no longer serves it.
    fresh = NativeClient(own_store.native.zk_quorum)
    assert [(region.start, region.end) for region in fresh.regions(table.full_name)] == [
        (b"", b"\x64"), (b"\x64", b"")]
    fresh.close()
    assert [(key, dict(cells)) for key, cells in table.scan()] == [
        (key, {b"t:a": key}) for key in keys]
    assert [key for key, _ in table.scan(row_start=b"\x28", row_stop=b"\x8c")] == [
        b"\x28", b"\x3c", b"\x50", b"\x64", b"\x78"]
    assert [key for key, _ in table.scan(row_start=b"\x64")] == keys[5:]
    assert [key for key, _ in table.scan(row_stop=b"\x64")] == keys[:5]
    assert [key for key, _ in table.scan(row_start=b"\x65", row_stop=b"\x66")] == []
    assert [key for key, _ in table.scan(batch_size=3)] == keys  # batches span the regions


def test_an_unreachable_zookeeper_is_a_503() -> None:
    address = hbase_address()
    if not address:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    store = HBaseStore(host, int(port), "nozk_", writers=0,
                       native=NativeClient("127.0.0.1:1", timeout_s=2),
                       native_tables=frozenset({"tsdb"}))
    table = HBaseTable(store, "tsdb")
    with pytest.raises(StorageUnavailableError):
        list(table.scan())
    store.close()


def test_a_silent_zookeeper_is_a_503_after_the_timeout_not_a_hang() -> None:
    address = hbase_address()
    if not address:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        quorum = f"127.0.0.1:{silent.getsockname()[1]}"
        store = HBaseStore(host, int(port), "silentzk_", writers=0,
                           native=NativeClient(quorum, timeout_s=0.5),
                           native_tables=frozenset({"tsdb"}))
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            list(HBaseTable(store, "tsdb").scan())
        assert time.monotonic() - started < 5
        store.close()


def test_a_scan_left_early_closes_its_scanner_and_frees_its_connection(
        pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    thrift.data_table().put_many((i.to_bytes(2, "big"), {b"t:\x00\x00": b"\x01"})
                                 for i in range(1000))
    table = native.data_table()
    client = native.store.native  # type: ignore[attr-defined]
    calls: list[bytes] = []
    real_call = client.call

    def recording(server: str, method: str, request: bytes) -> tuple[bytes, bytes]:
        calls.append(request)
        return real_call(server, method, request)

    client.call = recording
    scan = table.scan(batch_size=100)
    assert [next(scan)[0] for _ in range(150)] == [i.to_bytes(2, "big") for i in range(150)]
    scan.close()  # type: ignore[attr-defined]
    # Rows are left in the region (batches of 100, the third prefetched at most), so the
    # last call closed the scanner: ScanRequest close_scanner (field 5) = true.
    assert wire.message(calls[-1]).get(5) == [1]
    assert sum(len(idle) for idle in client._idle.values()) >= 1
    assert len(list(table.scan())) == 1000


POINTS = [{"metric": "native.cpu", "timestamp": 1_700_000_000 + 10 * i, "value": value,
           "tags": {"host": host}}
          for i in range(12) for host, value in (("web01", i), ("web02", 0.5 + i))]


def test_a_query_answers_the_same_json_natively(pair: tuple[TSDB, TSDB]) -> None:
    thrift, native = pair
    by_thrift, by_native = app_over(thrift).test_client(), app_over(native).test_client()
    answer = by_thrift.post("/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 204
    for query in ("sum:1m-avg:native.cpu", "sum:native.cpu{host=web02}",
                  "none:native.cpu{host=*}"):
        url = f"/api/query?start=1700000000&end=1700000200&m={query}"
        thrift_answer, native_answer = by_thrift.get(url), by_native.get(url)
        assert thrift_answer.status_code == native_answer.status_code == 200
        assert native_answer.get_json() == thrift_answer.get_json(), query
    url = "/api/query?start=1699999980&end=1700000200&m=sum:1m-avg:native.cpu"
    # Minutes from 1699999980: points i = 0..3, 4..9, 10..11; each minute the sum of
    # web01's average of i and web02's average of 0.5 + i.
    dps = by_native.get(url).get_json()[0]["dps"]
    assert dps == {"1699999980": 1.5 + 2.0, "1700000040": 6.5 + 7.0, "1700000100": 10.5 + 11.0}


def test_a_note_among_single_points_of_several_widths_answers_the_same(
        pair: tuple[TSDB, TSDB]) -> None:
    # 2 series x 90 points, one cell each, values of 1, 2, 4 and 8 bytes (integers) and
    # floats: rows of many cells, cut in bulk; a note's cell in web01's row among them.
    values = [3, 300, 70_000, 2**40, 0.25]
    points = [{"metric": "native.mix", "timestamp": 1_700_000_000 + 10 * i,
               "value": values[i % 5], "tags": {"host": host}}
              for i in range(90) for host in ("web01", "web02")]
    thrift, native = pair
    by_thrift, by_native = app_over(thrift).test_client(), app_over(native).test_client()
    answer = by_thrift.post("/api/put", data=json.dumps(points), content_type="application/json")
    assert answer.status_code == 204
    tsuid = by_thrift.get("/api/query?start=1700000000&m=sum:native.mix{host=web01}"
                          "&show_tsuids").get_json()[0]["tsuids"][0]
    note = {"tsuid": tsuid, "startTime": 1_700_000_425, "description": "deploy"}
    assert by_thrift.post("/api/annotation", json=note).status_code == 200
    for query in ("sum:1m-avg:native.mix{host=*}", "none:native.mix{host=*}"):
        url = f"/api/query?start=1700000000&end=1700000900&m={query}"
        thrift_answer, native_answer = by_thrift.get(url), by_native.get(url)
        assert thrift_answer.status_code == native_answer.status_code == 200
        assert native_answer.get_json() == thrift_answer.get_json(), query
        web01, web02 = native_answer.get_json()
        assert [n["description"] for n in web01["annotations"]] == ["deploy"]
        assert "annotations" not in web02 or web02["annotations"] == []
    raw = by_native.get("/api/query?start=1700000000&end=1700000900"
                        "&m=none:native.mix{host=web02}").get_json()[0]["dps"]
    assert len(raw) == 90
    assert (raw["1700000000"], raw["1700000010"], raw["1700000020"], raw["1700000030"],
            raw["1700000040"]) == (3, 300, 70_000, 2**40, 0.25)
