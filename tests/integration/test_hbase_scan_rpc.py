"""``tsd.storage.hbase.scan_rpc`` (``app/storage/hbase_native/scan_rpc.py``) on the real HBase:
``auto`` (the default) reads natively where ZooKeeper answers and through Thrift where it
does not, answering the same JSON either way and never an error for it; it moves to native
when ZooKeeper comes up later, and back to Thrift in the middle of a scan when the native
RPC stops reaching HBase; ``native`` stays strict (a 503). ZooKeeper is the test HBase's own,
reached through a TCP relay the test opens and closes."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from app.config import load_config
from app.storage.hbase import HBaseStore, HBaseTable
from app.storage.hbase_native.calls import NativeScannerCalls
from app.storage.hbase_native.scan_rpc import AutoScannerCalls
from app.tsdb import TSDB
from tests.conftest import app_over, backend_config, drop_tables, hbase_zk_quorum, make_tsdb
from tests.e2e.tsd_process import free_port, gunicorn_server

POINTS = [{"metric": "rpc.cpu", "timestamp": 1_700_000_000 + 10 * i, "value": i + 0.5 * n,
           "tags": {"host": f"web{n:02d}"}}
          for i in range(60) for n in range(4)]
QUERIES = ("sum:1m-avg:rpc.cpu", "none:rpc.cpu{host=web02}", "max:rpc.cpu{host=*}")
REFUSED = "127.0.0.1:1"  # nothing listens on port 1: refused at once


class Relay:
    """A TCP relay from ``127.0.0.1:port`` to ``target``: a ZooKeeper that comes and goes."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self.listener: socket.socket | None = None
        self.sockets: list[socket.socket] = []

    def start(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def stop(self) -> None:
        if self.listener is not None:
            # Wakes the thread blocked in accept(); a close alone leaves it listening.
            self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for one, other in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(one, other), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def zookeeper() -> tuple[str, int]:
    quorum = hbase_zk_quorum()
    if quorum is None:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = quorum.partition(":")
    return host, int(port or 2181)


@pytest.fixture
def written(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The settings of a table set holding ``POINTS`` (written through Thrift), and the
    answers to ``QUERIES`` read through Thrift only."""
    zookeeper()
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True,
                                                "tsd.storage.hbase.scan_rpc": "thrift"})
    thrift = make_tsdb(config)
    client = app_over(thrift).test_client()
    answer = client.post("/api/put", data=json.dumps(POINTS), content_type="application/json")
    assert answer.status_code == 204
    expected = {query: answers(client, query) for query in QUERIES}
    assert all(expected.values())
    yield {"config": config, "expected": expected}
    drop_tables(thrift)


def answers(client: FlaskClient, query: str) -> Any:
    answer = client.get(f"/api/query?start=1700000000&end=1700000600&m={query}")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()


def over(written: dict[str, Any], **settings: Any) -> TSDB:
    """A TSDB on the written tables with ``settings`` (``scan_rpc`` default: auto)."""
    config = {key: value for key, value in written["config"].items()
              if key != "tsd.storage.hbase.scan_rpc"}
    config.update({f"tsd.storage.hbase.{key}": value for key, value in settings.items()})
    return TSDB(load_config(config, environ={}))


def hbase_store(tsdb: TSDB) -> HBaseStore:
    store = tsdb.store
    assert isinstance(store, HBaseStore)
    return store


def native_scans(client: FlaskClient) -> dict[str, str]:
    """``tsd.storage.hbase.native_scans`` of ``/api/stats``: ``{setting: value}``."""
    return {line["tags"]["setting"]: line["value"] for line in client.get("/api/stats").get_json()
            if line["metric"] == "tsd.storage.hbase.native_scans"}


def test_auto_is_the_default_and_reads_natively_where_zookeeper_answers(
        written: dict[str, Any]) -> None:
    host, port = zookeeper()
    tsdb = over(written, zk_quorum=f"{host}:{port}")
    assert tsdb.config["tsd.storage.hbase.scan_rpc"] == "auto"
    store = hbase_store(tsdb)
    assert store.scan_rpc.on_native is None  # nothing probed before the first scan
    client = app_over(tsdb).test_client()
    assert native_scans(client) == {"auto": "0"}
    native = store.native
    assert native is not None
    calls: list[str] = []
    real_call = native.call

    def recording(server: str, method: str, request: bytes) -> tuple[bytes, bytes]:
        calls.append(method)
        return real_call(server, method, request)

    native.call = recording  # type: ignore[method-assign]
    for query, expected in written["expected"].items():
        assert answers(client, query) == expected, query
    assert store.scan_rpc.on_native is True
    assert calls.count("Scan") >= len(QUERIES)  # the region server answered the scans
    table = tsdb.data_table()
    assert isinstance(table, HBaseTable)
    assert isinstance(table._scanner_calls(None), AutoScannerCalls)
    assert native_scans(client) == {"auto": "1"}
    assert store.scan_rpc.probes == 1
    tsdb.close()


def test_auto_without_zookeeper_answers_through_thrift_and_warns_once(
        written: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    tsdb = over(written, zk_quorum=REFUSED)
    client = app_over(tsdb).test_client()
    with caplog.at_level(logging.INFO, logger="app.storage.hbase_native.scan_rpc"):
        for _ in range(3):
            for query, expected in written["expected"].items():
                assert answers(client, query) == expected, query
    store = hbase_store(tsdb)
    assert store.scan_rpc.on_native is False
    table = tsdb.data_table()
    assert isinstance(table, HBaseTable)
    assert table._scanner_calls(None) is table  # Thrift's own scanner calls
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Thrift" in warnings[0] and REFUSED in warnings[0]
    assert native_scans(client) == {"auto": "0"}
    assert store.scan_rpc.probes == 1  # the next try is 300 s away
    tsdb.close()


def test_strict_native_without_zookeeper_is_a_503(written: dict[str, Any]) -> None:
    tsdb = over(written, zk_quorum=REFUSED, scan_rpc="native")
    client = app_over(tsdb).test_client()
    answer = client.get("/api/query?start=1700000000&end=1700000600&m=sum:rpc.cpu")
    assert answer.status_code == 503
    error = answer.get_json()["error"]
    assert error["code"] == 503 and "ZooKeeper" in error["message"] + error["details"]
    assert native_scans(client) == {"native": "1"}
    tsdb.close()


def test_thrift_never_asks_zookeeper(written: dict[str, Any]) -> None:
    tsdb = over(written, zk_quorum=REFUSED, scan_rpc="thrift", write_rpc="thrift")
    client = app_over(tsdb).test_client()
    for query, expected in written["expected"].items():
        assert answers(client, query) == expected, query
    store = hbase_store(tsdb)
    assert store.native is None and store.scan_rpc.probes == 0
    assert native_scans(client) == {"thrift": "0"}
    tsdb.close()


def test_auto_moves_to_native_when_zookeeper_comes_up(written: dict[str, Any]) -> None:
    relay = Relay(free_port(), zookeeper())
    tsdb = over(written, zk_quorum=f"127.0.0.1:{relay.port}", scan_rpc_probe_s=0.2)
    client = app_over(tsdb).test_client()
    store = hbase_store(tsdb)
    try:
        query, expected = next(iter(written["expected"].items()))
        assert answers(client, query) == expected
        assert store.scan_rpc.on_native is False  # nothing listened yet
        relay.start()
        deadline = time.monotonic() + 20
        while not store.scan_rpc.on_native and time.monotonic() < deadline:
            assert answers(client, query) == expected  # each due scan starts a probe
            time.sleep(0.05)
        assert store.scan_rpc.on_native is True
        assert store.scan_rpc.probes >= 2
        for query, expected in written["expected"].items():
            assert answers(client, query) == expected, query
        assert native_scans(client) == {"auto": "1"}
    finally:
        tsdb.close()
        relay.stop()


def test_auto_finishes_a_scan_through_thrift_when_zookeeper_goes_away(
        written: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    relay = Relay(free_port(), zookeeper())
    relay.start()
    tsdb = over(written, zk_quorum=f"127.0.0.1:{relay.port}")
    store = hbase_store(tsdb)
    try:
        assert store.scan_rpc.client() is store.native  # probed through the relay
        relay.stop()
        # The store's client has not read hbase:meta yet: its first scan asks ZooKeeper.
        table = tsdb.data_table()
        assert isinstance(table, HBaseTable)
        calls = table._scanner_calls(None)
        assert isinstance(calls, AutoScannerCalls)
        assert isinstance(calls.native, NativeScannerCalls)
        client = app_over(tsdb).test_client()
        with caplog.at_level(logging.WARNING, logger="app.storage.hbase_native.scan_rpc"):
            for query, expected in written["expected"].items():
                assert answers(client, query) == expected, query
        assert store.scan_rpc.on_native is False
        [warning] = [r.getMessage() for r in caplog.records]
        assert "native scan failed" in warning and f"127.0.0.1:{relay.port}" in warning
    finally:
        tsdb.close()
        relay.stop()


def test_each_gunicorn_worker_decides_for_itself(written: dict[str, Any],
                                                 tmp_path: Path) -> None:
    """Two worker processes (forked by gunicorn), each with its own probe and native client;
    the queries they answer match Thrift's."""
    host, port = zookeeper()
    settings = {key: value for key, value in written["config"].items()
                if key != "tsd.storage.hbase.scan_rpc"}
    settings["tsd.storage.hbase.zk_quorum"] = f"{host}:{port}"
    env = {key.upper().replace(".", "_"): str(value) for key, value in settings.items()}
    log = tmp_path / "gunicorn.log"
    def round_trip(query: str, expected: Any) -> tuple[int, str]:
        answer = requests.get(f"{tsd.url}/api/query?start=1700000000&end=1700000600"
                              f"&m={query}", timeout=10)
        assert answer.status_code == 200 and answer.json() == expected, query
        stats = requests.get(f"{tsd.url}/api/stats", timeout=10).json()
        [uptime] = [line for line in stats if line["metric"] == "tsd.process.uptime_s"]
        [rpc] = [line for line in stats if line["metric"] == "tsd.storage.hbase.native_scans"]
        return int(uptime["tags"]["pid"]), rpc["value"]

    with gunicorn_server(env, log, workers=2) as tsd, ThreadPoolExecutor(8) as pool:
        seen: dict[int, str] = {}
        deadline = time.monotonic() + 30
        # Until both workers answered /api/stats after scanning, or the time is up: which
        # worker takes a connection is the kernel's choice (requests in flight together
        # reach both, most often), and one that has not scanned yet has not probed (0).
        while sorted(seen.values()) != ["1", "1"] and time.monotonic() < deadline:
            for pid, value in pool.map(lambda item: round_trip(*item),
                                       list(written["expected"].items()) * 4):
                seen[pid] = max(seen.get(pid, "0"), value)
    # Every worker that answered decided for itself, natively, once (a decision made before
    # the fork would be logged once in all, and a worker without its own probe says 0).
    assert seen and set(seen.values()) == {"1"}, seen
    decided = [line for line in log.read_text().splitlines()
               if "scans go over HBase's native RPC" in line]
    # Once per worker that scanned (each worker that answered did; the other may have too).
    assert len(seen) <= len(decided) <= 2, (decided, seen)


def test_a_forked_process_probes_for_itself(written: dict[str, Any]) -> None:
    """A store made before a fork (gunicorn with preload): the child does not inherit the
    parent's decision, it probes on its first scan."""
    tsdb = over(written, zk_quorum=REFUSED)
    rpc = hbase_store(tsdb).scan_rpc
    assert rpc.client() is None and rpc.probes == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            before = rpc.on_native
            rpc.client()
            os.write(write, f"{before},{rpc.probes}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        reported = answer.read()
    os.waitpid(pid, 0)
    assert reported == b"None,2"
    assert rpc.on_native is False and rpc.probes == 1  # the parent's own, untouched
    tsdb.close()
