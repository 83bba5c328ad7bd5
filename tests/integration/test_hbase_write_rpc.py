"""``tsd.storage.hbase.write_rpc`` on the real HBase: ``auto`` (the default) writes natively
where ZooKeeper answers and through Thrift where it does not, never an error for it; a native
write that cannot reach HBase is finished through Thrift without losing a point or appending
one twice (puts are idempotent: every row not known written goes again; an append goes again
only if its request never reached a socket). ZooKeeper is the test HBase's own, reached
through a TCP relay the test opens and closes (``test_hbase_scan_rpc.Relay``)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.config import load_config
from app.errors import StorageUnavailableError
from app.storage.hbase import HBaseStore
from app.storage.hbase_native.client import NativeClient
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.multi import MultiWriter, Unreached
from app.tsdb import TSDB
from tests.conftest import app_over, backend_config, drop_tables, hbase_address, make_tsdb
from tests.e2e.tsd_process import free_port
from tests.integration.test_hbase_scan_rpc import REFUSED, Relay, zookeeper

POINTS = [{"metric": "wrpc.cpu", "timestamp": 1_700_000_000 + 10 * i, "value": i,
           "tags": {"host": f"web{n:02d}"}}
          for i in range(30) for n in range(3)]
# Three hosts' points at i: i each, so a sum is 3 i; a point written twice or lost changes it.
RAW = {str(1_700_000_000 + 10 * i): 3 * i for i in range(30)}
QUERY = "/api/query?start=1700000000&end=1700000300&m=sum:wrpc.cpu"
APPENDS = [(b"r1", b"t:\x05\x00\x00", b"\x00\x00\x01"), (b"r1", b"t:\x05\x00\x01", b"\x00\x10\x02"),
           (b"r2", b"t:\x05\x00\x00", b"\x07")]


@pytest.fixture
def config(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Settings of a fresh table set (``write_rpc`` left to its default)."""
    zookeeper()
    settings = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True})
    maker = make_tsdb(settings)  # the tables
    yield settings
    drop_tables(maker)


def over(config: dict[str, Any], **settings: Any) -> TSDB:
    return TSDB(load_config({**config, **{f"tsd.storage.hbase.{key}": value
                                          for key, value in settings.items()}}, environ={}))


def store_of(tsdb: TSDB) -> HBaseStore:
    assert isinstance(tsdb.store, HBaseStore)
    return tsdb.store


def put(client: FlaskClient) -> None:
    answer = client.post("/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 204, answer.get_data(as_text=True)


def summed(client: FlaskClient) -> dict[str, int]:
    answer = client.get(QUERY)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return {time: int(value) for time, value in answer.get_json()[0]["dps"].items()}


def stat(client: FlaskClient, metric: str) -> dict[str, str]:
    return {line["tags"]["setting"]: line["value"] for line in client.get("/api/stats").get_json()
            if line["metric"] == metric}


def test_auto_is_the_default_and_writes_natively_where_zookeeper_answers(
        config: dict[str, Any]) -> None:
    tsdb = over(config)
    assert tsdb.config["tsd.storage.hbase.write_rpc"] == "auto"
    store = store_of(tsdb)
    native = store.native
    assert native is not None and store.write_rpc.on_native is None  # no probe before a write
    methods: list[str] = []

    def recording(server: str, method: str, request: bytes, cells: bytes) -> tuple[bytes, bytes]:
        methods.append(method)
        return native.call(server, method, request, cells)

    store.native_writer = MultiWriter(recording, native.regions, native.zk_quorum)
    client = app_over(tsdb).test_client()
    put(client)
    assert store.write_rpc.on_native is True
    assert "Multi" in methods and store.native_fallbacks == 0
    assert summed(client) == RAW
    assert stat(client, "tsd.storage.hbase.native_writes") == {"auto": "1"}
    tsdb.close()


def test_auto_without_zookeeper_writes_through_thrift_and_warns_once(
        config: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    tsdb = over(config, zk_quorum=REFUSED, scan_rpc="thrift")
    client = app_over(tsdb).test_client()
    with caplog.at_level(logging.WARNING, logger="app.storage.hbase_native.scan_rpc"):
        put(client)
        put(client)  # the same points again: puts, so the same sums
    assert store_of(tsdb).write_rpc.on_native is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "HBase writes" in warnings[0] and "Thrift" in warnings[0] and REFUSED in warnings[0]
    assert summed(client) == RAW
    assert stat(client, "tsd.storage.hbase.native_writes") == {"auto": "0"}
    assert stat(client, "tsd.storage.hbase.native_write_probes") == {"auto": "1"}
    tsdb.close()


def test_strict_native_without_zookeeper_is_a_503(config: dict[str, Any]) -> None:
    tsdb = over(config, zk_quorum=REFUSED, scan_rpc="thrift", write_rpc="native")
    answer = app_over(tsdb).test_client().post(
        "/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 503
    assert "ZooKeeper" in json.dumps(answer.get_json())
    tsdb.close()


def test_auto_finishes_puts_through_thrift_when_zookeeper_goes_away(
        config: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    relay = Relay(free_port(), zookeeper())
    relay.start()
    tsdb = over(config, zk_quorum=f"127.0.0.1:{relay.port}", scan_rpc="thrift")
    store = store_of(tsdb)
    try:
        assert store.write_rpc.client() is store.native  # probed through the relay
        relay.stop()  # the store's client has not read hbase:meta: its first write asks ZK
        client = app_over(tsdb).test_client()
        with caplog.at_level(logging.WARNING, logger="app.storage.hbase_native.scan_rpc"):
            put(client)
        assert store.write_rpc.on_native is False and store.native_fallbacks == 1
        [warning] = [r.getMessage() for r in caplog.records if r.name.endswith("scan_rpc")]
        assert "native write failed" in warning and f"127.0.0.1:{relay.port}" in warning
        assert summed(client) == RAW
        assert stat(client, "tsd.storage.hbase.native_write_fallbacks") == {"auto": "1"}
    finally:
        tsdb.close()
        relay.stop()


@pytest.fixture
def stores() -> Iterator[tuple[HBaseStore, HBaseStore, Relay]]:
    """Two stores on the same tables of their own: Thrift only; ``auto`` whose ZooKeeper is
    a relay (started)."""
    address = hbase_address()
    relay = Relay(free_port(), zookeeper())
    assert address
    host, _, port = address.rpartition(":")
    prefix = f"wrpc{uuid.uuid4().hex[:8]}_"
    thrift = HBaseStore(host, int(port), prefix, writers=0)
    relay.start()
    auto = HBaseStore(host, int(port), prefix, writers=2, write_rpc="auto", scan_rpc="thrift",
                      native=NativeClient(f"127.0.0.1:{relay.port}", timeout_s=5),
                      native_tables=frozenset({"by_auto"}))
    for name in ("by_thrift", "by_auto"):
        thrift.create_table(name, {"t": {}})
    yield thrift, auto, relay
    relay.stop()
    auto.close()
    thrift.drop_tables()
    thrift.close()


def test_auto_appends_once_through_thrift_when_zookeeper_goes_away(
        stores: tuple[HBaseStore, HBaseStore, Relay]) -> None:
    thrift, auto, relay = stores
    thrift.table("by_thrift").append_many(APPENDS)
    assert auto.write_rpc.client() is auto.native
    relay.stop()
    auto.table("by_auto").append_many(APPENDS)
    assert auto.native_fallbacks == 1 and auto.write_rpc.on_native is False
    by_thrift = list(thrift.table("by_thrift").scan())
    assert list(auto.table("by_auto").scan()) == by_thrift
    assert by_thrift == [(b"r1", {b"t:\x05\x00\x00": b"\x00\x00\x01",
                                  b"t:\x05\x00\x01": b"\x00\x10\x02"}),
                         (b"r2", {b"t:\x05\x00\x00": b"\x07"})]


def test_appends_a_refused_server_never_got_are_unreached_with_every_cell(
        stores: tuple[HBaseStore, HBaseStore, Relay]) -> None:
    _, auto, _ = stores
    client = auto.native
    assert client is not None
    asked: list[bool] = []

    def regions(name: bytes, refresh: bool) -> list[Region]:
        asked.append(refresh)
        return [Region(region.name, region.start, region.end, REFUSED)
                for region in client.regions(name)]

    writer = MultiWriter(client.call, regions, client.zk_quorum)
    with pytest.raises(Unreached) as raised:
        writer.append(auto.table("by_auto").full_name, APPENDS)
    assert asked == [False, True]  # refused at connect: sent again, to the same answer
    assert raised.value.rows == APPENDS
    writer.close()


class Swallower:
    """A server that takes a request whole and closes without an answer: the append may
    have been applied."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.settimeout(0.5)
            try:
                while conn.recv(65536):
                    pass
            except OSError:
                pass
            conn.close()


def test_an_append_that_may_have_been_applied_is_never_sent_again(
        stores: tuple[HBaseStore, HBaseStore, Relay]) -> None:
    _, auto, _ = stores
    client = auto.native
    assert client is not None
    swallower = Swallower()
    asked: list[bool] = []

    def regions(name: bytes, refresh: bool) -> list[Region]:
        asked.append(refresh)
        return [Region(region.name, region.start, region.end, swallower.address)
                for region in client.regions(name)]

    writer = MultiWriter(client.call, regions, client.zk_quorum)
    with pytest.raises(StorageUnavailableError) as raised:
        writer.append(auto.table("by_auto").full_name, APPENDS)
    assert not isinstance(raised.value, Unreached)  # not for Thrift to append again
    assert asked == [False]
    writer.close()
    swallower.listener.close()


def test_native_writes_take_what_queued_without_the_gateways_linger(
        stores: tuple[HBaseStore, HBaseStore, Relay]) -> None:
    """Natively a batch is written at once, its puts in one ``Multi`` per region server;
    through Thrift a leader lingers (``write_linger_ms``) and spreads a batch over calls."""
    address = hbase_address()
    assert address
    host, _, port = address.rpartition(":")
    thrift, auto, relay = stores
    native = auto.native
    assert native is not None
    lingering = {"writers": 4, "write_linger_ms": 1500.0}
    by_thrift = HBaseStore(host, int(port), thrift.table_prefix, **lingering)
    by_native = HBaseStore(host, int(port), thrift.table_prefix, **lingering, native=native,
                           write_rpc="native", scan_rpc="thrift")
    multis: list[int] = []

    def recording(server: str, method: str, request: bytes, cells: bytes) -> tuple[bytes, bytes]:
        multis.append(len(cells))
        return native.call(server, method, request, cells)

    by_native.native_writer = MultiWriter(recording, native.regions, native.zk_quorum)
    rows = [(i.to_bytes(4, "big"), {b"t:\x00\x10": b"\x07"}) for i in range(400)]
    took_s = {}
    for name, store in (("thrift", by_thrift), ("native", by_native)):
        started = time.monotonic()
        store.table("by_auto").put_many(rows)
        took_s[name] = time.monotonic() - started
    assert took_s["thrift"] >= 1.5 > took_s["native"], took_s
    assert len(multis) == 1  # 400 rows, one region: one Multi
    assert len(list(thrift.table("by_auto").scan())) == 400
    by_thrift.close()
    by_native.close()
