"""Puts over HBase's native RPC (``tsd.storage.hbase.write_rpc=native``,
``hbase_native.multi``) store the very cells the Thrift path stores: rows written natively and
read back through Thrift byte for byte, many rows over two regions (a table split through the
master's RPC), a region split after its location was cached, several servers' calls at once,
an unreachable region server or ZooKeeper (a 503, nothing acknowledged), ``/api/put``
through the Flask app; appends leave Thrift's bytes, are sent again only when the server
refused them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import load_config
from app.errors import StorageError, StorageUnavailableError
from app.storage.hbase import HBaseStore, HBaseTable
from app.storage.hbase_native.client import NativeClient
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.multi import MultiWriter
from app.tsdb import TSDB
from tests.conftest import (
    app_over,
    backend_config,
    drop_tables,
    hbase_address,
    hbase_zk_quorum,
    make_tsdb,
)
from tests.integration.test_hbase_native import split

ROWS = [
    (b"a1", {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02\x03", b"t:\x80\x00": b""}),
    (b"a2", {b"t:\x7f\xff": b"\xff" * 8}),
    (b"b1", {b"t:\x00\x07": b"\x00\x00\x00\x05", b"t:": b"whole family"}),
    (b"\x00\xff" * 40, {b"t:" + b"q" * 300: b"v" * 70_000}),  # lengths beyond one byte
]


def listed(table: HBaseTable) -> list[tuple[bytes, list[tuple[bytes, bytes]]]]:
    return [(key, list(cells.items())) for key, cells in table.scan()]


@pytest.fixture
def stores() -> Iterator[tuple[HBaseStore, HBaseStore]]:
    """Two stores on the same tables of their own: Thrift writes, native writes."""
    address, quorum = hbase_address(), hbase_zk_quorum()
    if not address or not quorum:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    prefix = f"nput{uuid.uuid4().hex[:8]}_"
    thrift = HBaseStore(host, int(port), prefix, writers=0)
    native = HBaseStore(host, int(port), prefix, writers=2, native=NativeClient(quorum),
                        write_rpc="native")
    for name in ("by_thrift", "by_native"):
        thrift.create_table(name, {"t": {}})
    yield thrift, native
    native.close()
    thrift.drop_tables()
    thrift.close()


def test_rows_written_natively_are_the_cells_thrift_writes(
        stores: tuple[HBaseStore, HBaseStore]) -> None:
    thrift, native = stores
    assert native.native_writer is not None and thrift.native_writer is None
    thrift.table("by_thrift").put_many(ROWS)
    native.table("by_native").put_many(ROWS)
    expected = [
        (b"\x00\xff" * 40, [(b"t:" + b"q" * 300, b"v" * 70_000)]),
        (b"a1", [(b"t:\x00\x00", b"\x01"), (b"t:\x00\x10", b"\x02\x03"), (b"t:\x80\x00", b"")]),
        (b"a2", [(b"t:\x7f\xff", b"\xff\xff\xff\xff\xff\xff\xff\xff")]),
        (b"b1", [(b"t:", b"whole family"), (b"t:\x00\x07", b"\x00\x00\x00\x05")]),
    ]
    # Both read through Thrift: the cells themselves, byte for byte.
    assert listed(thrift.table("by_native")) == expected
    assert listed(thrift.table("by_native")) == listed(thrift.table("by_thrift"))
    # Stamped by the region server's clock, as Thrift's puts are (not HBase's "latest").
    stamps = thrift.table("by_native").row_write_times(b"a1")
    assert set(stamps) == {b"t:\x00\x00", b"t:\x00\x10", b"t:\x80\x00"}
    assert all(1_600_000_000_000 < stamp < 1 << 62 for stamp in stamps.values())


def test_a_column_family_the_table_lacks_is_an_error_not_an_acknowledgement(
        stores: tuple[HBaseStore, HBaseStore]) -> None:
    _, native = stores
    with pytest.raises(StorageError, match="failed to write") as raised:
        native.table("by_native").put_many([(b"r", {b"nofamily:q": b"1"})])
    assert "NoSuchColumnFamilyException" in str(raised.value.details)
    assert not isinstance(raised.value, StorageUnavailableError)  # retrying would not help


@pytest.fixture
def split_table(stores: tuple[HBaseStore, HBaseStore]) -> tuple[HBaseStore, bytes, Region]:
    """``by_native`` split at 0x80, and its parent region as a client knew it before."""
    _, native = stores
    assert native.native is not None
    table = native.table("by_native").full_name
    (parent,) = native.native.regions(table)
    split(native.native, table, b"\x80")
    return native, table, parent


def keys(count: int) -> list[bytes]:
    return [bytes([i % 256, i // 256]) for i in range(count)]  # spread over 0x00..0xff


def test_many_rows_over_two_regions_with_a_stale_cached_location(
        split_table: tuple[HBaseStore, bytes, Region]) -> None:
    native, table, parent = split_table
    assert native.native is not None
    client = native.native
    calls: list[tuple[str, list[Region]]] = []

    def regions(name: bytes, refresh: bool) -> list[Region]:
        # Before the refresh, the parent the split took offline: what a client that cached
        # it before the split still holds.
        found = client.regions(name, refresh) if refresh else [parent]
        calls.append(("refresh" if refresh else "cached", found))
        return found

    writer = MultiWriter(client.call, regions, client.zk_quorum)
    rows = [(key, {b"t:\x00\x00": key, b"t:\x00\x01": b"%d" % i})
            for i, key in enumerate(keys(3000))]
    writer.put(table, rows)
    # The parent's server answered NotServingRegion for it; the rows went again to the
    # daughters, one Multi to their server with a RegionAction each.
    assert [(kind, [(r.start, r.end) for r in found]) for kind, found in calls] == [
        ("cached", [(b"", b"")]), ("refresh", [(b"", b"\x80"), (b"\x80", b"")])]
    stored = {key: cells for key, cells in native.table("by_native").scan()}
    assert len(stored) == 3000
    assert all(stored[key] == cells for key, cells in rows)
    writer.close()


def test_rows_whose_region_stays_unreachable_are_a_503(
        split_table: tuple[HBaseStore, bytes, Region]) -> None:
    native, table, parent = split_table
    assert native.native is not None
    client = native.native
    writer = MultiWriter(client.call, lambda name, refresh: [parent], client.zk_quorum)
    with pytest.raises(StorageUnavailableError, match="3 rows were not written") as raised:
        writer.put(table, [(b"\x01", {b"t:a": b"1"}), (b"\x90", {b"t:a": b"2"}),
                           (b"\x91", {b"t:a": b"3"})])
    assert "NotServingRegionException" in str(raised.value.details)
    assert list(native.table("by_native").scan()) == []  # nothing written


def test_calls_to_several_servers_at_once(
        split_table: tuple[HBaseStore, bytes, Region]) -> None:
    native, table, _ = split_table
    assert native.native is not None
    client = native.native
    low, high = client.regions(table)
    host, _, port = high.server.rpartition(":")
    # One region server under two names: two "servers", so two Multi calls in flight.
    other = f"{'127.0.0.1' if host != '127.0.0.1' else 'localhost'}:{port}"
    servers: list[str] = []

    def call(server: str, method: str, request: bytes, cells: bytes) -> tuple[bytes, bytes]:
        servers.append(server)
        return client.call(server, method, request, cells)

    moved = [low, Region(high.name, high.start, high.end, other)]
    writer = MultiWriter(call, lambda name, refresh: moved, client.zk_quorum)
    writer.put(table, [(b"\x10", {b"t:a": b"low"}), (b"\xf0", {b"t:a": b"high"})])
    assert sorted(servers) == sorted([low.server, other])
    assert [(key, dict(cells)) for key, cells in native.table("by_native").scan()] == [
        (b"\x10", {b"t:a": b"low"}), (b"\xf0", {b"t:a": b"high"})]
    writer.close()


def test_an_unreachable_region_server_is_a_503(stores: tuple[HBaseStore, HBaseStore]) -> None:
    _, native = stores
    assert native.native is not None
    client = native.native
    table = native.table("by_native").full_name
    dead = [Region(region.name, region.start, region.end, "127.0.0.1:1")
            for region in client.regions(table)]
    writer = MultiWriter(client.call, lambda name, refresh: dead, client.zk_quorum)
    with pytest.raises(StorageUnavailableError, match="not written"):
        writer.put(table, ROWS)
    assert list(native.table("by_native").scan()) == []


def test_an_unreachable_zookeeper_is_a_503() -> None:
    address = hbase_address()
    if not address:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    store = HBaseStore(host, int(port), "nozkput_", writers=2,
                       native=NativeClient("127.0.0.1:1", timeout_s=2), write_rpc="native")
    with pytest.raises(StorageUnavailableError, match="ZooKeeper"):
        HBaseTable(store, "tsdb").put_many(ROWS)
    store.close()


POINTS = [{"metric": "nput.cpu", "timestamp": 1_700_000_000 + 10 * i, "value": value,
           "tags": {"host": host}}
          for i in range(12) for host, value in (("web01", i), ("web02", 0.5 + i))]


@pytest.fixture
def native_tsdb(tmp_path: Path) -> Iterator[tuple[TSDB, dict[str, Any]]]:
    quorum = hbase_zk_quorum()
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True})
    thrift = make_tsdb(config)
    yield thrift, {**config, "tsd.storage.hbase.write_rpc": "native",
                   "tsd.storage.hbase.zk_quorum": quorum}
    drop_tables(thrift)


def test_api_put_natively_answers_queries_as_computed_by_hand(
        native_tsdb: tuple[TSDB, dict[str, Any]]) -> None:
    thrift, native_config = native_tsdb
    native = TSDB(load_config(native_config, environ={}))
    assert native.store.native_writer is not None  # type: ignore[attr-defined]
    by_native = app_over(native).test_client()
    answer = by_native.post("/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 204
    by_thrift = app_over(thrift).test_client()  # reads (and writes nothing) through Thrift
    url = "/api/query?start=1699999980&end=1700000200&m=sum:1m-avg:nput.cpu"
    # Minutes from 1699999980: points i = 0..3, 4..9, 10..11; each minute the sum of
    # web01's average of i and web02's average of 0.5 + i.
    dps = by_thrift.get(url).get_json()[0]["dps"]
    assert dps == {"1699999980": 1.5 + 2.0, "1700000040": 6.5 + 7.0, "1700000100": 10.5 + 11.0}
    raw = by_thrift.get("/api/query?start=1700000000&end=1700000200"
                        "&m=none:nput.cpu{host=web02}").get_json()[0]["dps"]
    assert raw == {str(1_700_000_000 + 10 * i): 0.5 + i for i in range(12)}
    native.close()


def test_api_put_without_zookeeper_is_a_503_and_stores_nothing(
        native_tsdb: tuple[TSDB, dict[str, Any]]) -> None:
    thrift, native_config = native_tsdb
    native = TSDB(load_config({**native_config, "tsd.storage.hbase.zk_quorum": "127.0.0.1:1"},
                              environ={}))
    answer = app_over(native).test_client().post(
        "/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 503
    assert "ZooKeeper" in json.dumps(answer.get_json())
    query = "/api/query?start=1700000000&end=1700000200&m=sum:nput.cpu"
    found = app_over(thrift).test_client().get(query)
    assert found.status_code in (200, 400)  # the metric's UID may exist; no points do
    assert found.status_code == 400 or found.get_json() == []
    native.close()


APPENDS = [(b"r1", b"t:\x05\x00\x00", b"\x00\x00\x01"), (b"r1", b"t:\x05\x00\x00", b"\x00\x10\x02"),
           (b"r1", b"t:\x05\x00\x00", b"\x00\x20\x03\x04"), (b"r2", b"t:\x05\x00\x00", b"\x07")]


def test_appends_natively_leave_the_bytes_thrift_appends_leave(
        stores: tuple[HBaseStore, HBaseStore]) -> None:
    thrift, native = stores
    thrift.table("by_thrift").append_many(APPENDS)
    native.table("by_native").append_many(APPENDS)  # batched: one Multi
    native.table("by_native").append_many(APPENDS[3:])
    thrift.table("by_thrift").append_many(APPENDS[3:])
    assert listed(thrift.table("by_native")) == [
        (b"r1", [(b"t:\x05\x00\x00", b"\x00\x00\x01\x00\x10\x02\x00\x20\x03\x04")]),
        (b"r2", [(b"t:\x05\x00\x00", b"\x07\x07")]),
    ]
    assert listed(thrift.table("by_native")) == listed(thrift.table("by_thrift"))


def test_appends_the_server_refused_are_sent_again_once_and_applied_once(
        split_table: tuple[HBaseStore, bytes, Region]) -> None:
    native, table, parent = split_table
    assert native.native is not None
    client = native.native
    asked: list[bool] = []

    def regions(name: bytes, refresh: bool) -> list[Region]:
        asked.append(refresh)
        return client.regions(name, refresh) if refresh else [parent]

    writer = MultiWriter(client.call, regions, client.zk_quorum)
    writer.append(table, [(b"\x10", b"t:a", b"x"), (b"\xf0", b"t:a", b"y")])
    assert asked == [False, True]  # NotServingRegion for the parent: not applied there
    assert [(key, dict(cells)) for key, cells in native.table("by_native").scan()] == [
        (b"\x10", {b"t:a": b"x"}), (b"\xf0", {b"t:a": b"y"})]
    writer.close()

# An append to a server that refused the connection (never sent) and one that may have been
# applied (sent, unanswered): test_hbase_write_rpc.py.
