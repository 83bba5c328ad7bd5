"""HBase failures as clients see them: OpenTSDB's error JSON, 503 when retrying later may help,
500 otherwise, never a stack trace; and the one retry of a broken connection.

Failures are real: a port nobody listens on, a listener that never answers, a listener that
hangs up, and a TCP proxy in front of the real HBase whose connections the test cuts. The
proxy is in front of the Thrift gateway, so the scans that must cross it are Thrift's
(``THRIFT``; the native RPC's failures: test_hbase_native.py, test_hbase_scan_rpc.py).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import happybase
import pytest
from flask import Flask

from app import create_app
from app.config import load_config
from app.errors import StorageError, StorageUnavailableError
from app.storage.hbase import HBaseStore
from app.tsdb import TSDB
from tests.conftest import app_over, backend_config, drop_tables, hbase_address, make_tsdb

THRIFT = {"tsd.storage.hbase.scan_rpc": "thrift"}  # data scans through the proxy too
QUERY = "/api/query?start=1356998400&end=1356998460&m=sum:sys.cpu.user"
POINT = {"metric": "sys.cpu.user", "timestamp": 1356998400, "value": 1,
         "tags": {"host": "web01"}}


def app_for(storage: str, **settings: Any) -> Flask:
    config = {"tsd.storage": storage, "tsd.storage.hbase.timeout_ms": 500,
              "tsd.core.auto_create_metrics": True, **settings}
    tsdb = TSDB(load_config(config, environ={}))
    app = app_over(tsdb)
    return app


def free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def assert_opentsdb_error(response: Any, code: int, message_start: str) -> dict[str, Any]:
    assert response.status_code == code, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code
    assert error["message"].startswith(message_start), error["message"]
    assert "\tat " not in error["details"] and "\n" not in error["details"]
    return dict(error)


class Listener:
    """A TCP listener on loopback that either never answers or hangs up at once."""

    def __init__(self, hang_up: bool) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.hang_up = hang_up
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self.hang_up:
                conn.close()
            else:
                self.held.append(conn)

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.server.close()
        # Joined first: a connection accepted just before the shutdown is then in ``held``
        # (closing ``held`` before could miss it, and its socket leaked into a later test).
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()


class Proxy:
    """Forwards loopback TCP to the real HBase Thrift server; ``cut()`` breaks every live
    connection, as a restarted gateway or a network blip would."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.live: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            with self.lock:
                self.live += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            for sock in self.live:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self.live.clear()
        time.sleep(0.05)  # let the pumps notice

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.cut()


# --- no HBase at all -------------------------------------------------------------------------


def test_nothing_listening_is_a_503_with_opentsdbs_error_json() -> None:
    client = app_for(f"hbase://127.0.0.1:{free_port()}").test_client()
    error = assert_opentsdb_error(client.get(QUERY), 503, "HBase is unavailable")
    assert "cannot be reached" in error["message"]
    assert_opentsdb_error(client.post("/api/put", data=json.dumps(POINT)), 503,
                          "HBase is unavailable")
    assert_opentsdb_error(client.get("/api/suggest?type=metrics&q=sys"), 503,
                          "HBase is unavailable")


def test_a_server_that_never_answers_times_out_without_a_retry() -> None:
    listener = Listener(hang_up=False)
    try:
        client = app_for(f"hbase://127.0.0.1:{listener.port}",
                         **{"tsd.storage.hbase.timeout_ms": 1000}).test_client()
        started = time.monotonic()
        error = assert_opentsdb_error(client.get(QUERY), 503, "HBase is unavailable")
        elapsed_s = time.monotonic() - started
    finally:
        listener.close()
    assert "did not answer in time" in error["message"]
    # One 1 s socket timeout; a retry would take at least 2 s.
    assert 0.9 < elapsed_s < 1.9


def test_a_server_that_hangs_up_is_a_503() -> None:
    listener = Listener(hang_up=True)
    try:
        client = app_for(f"hbase://127.0.0.1:{listener.port}").test_client()
        assert_opentsdb_error(client.get(QUERY), 503, "HBase is unavailable")
    finally:
        listener.close()


# --- a real HBase behind a proxy -------------------------------------------------------------


@pytest.fixture
def hbase_host_port() -> tuple[str, int]:
    address = hbase_address()
    if not address:
        pytest.skip("needs a real HBase: TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    return host, int(port)


@pytest.fixture
def proxied(hbase_host_port: tuple[str, int], tmp_path: Path
            ) -> Iterator[tuple[Proxy, TSDB, Flask]]:
    """A TSDB over recycled test tables, reached through a proxy the test can cut."""
    proxy = Proxy(hbase_host_port)
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True, **THRIFT})
    config["tsd.storage"] = f"hbase://127.0.0.1:{proxy.port}"
    tsdb = make_tsdb(config)
    app = app_over(tsdb)
    yield proxy, tsdb, app
    drop_tables(tsdb)
    proxy.close()


def test_reads_survive_a_broken_connection(proxied: tuple[Proxy, TSDB, Flask]) -> None:
    proxy, _, app = proxied
    client = app.test_client()
    assert client.post("/api/put", data=json.dumps(POINT)).status_code == 204
    proxy.cut()
    response = client.get(QUERY)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.json[0]["dps"] == {"1356998400": 1}


def test_a_scan_resumes_after_the_last_row_on_a_broken_connection(
        proxied: tuple[Proxy, TSDB, Flask]) -> None:
    proxy, tsdb, _ = proxied
    table = tsdb.data_table()
    table.put_many((i.to_bytes(2, "big"), {b"t:\x00\x00": b"x"}) for i in range(1000))
    keys = []
    for key, _ in table.scan(batch_size=100):
        keys.append(key)
        if len(keys) == 150:
            proxy.cut()  # mid-scan: the next batch needs a new connection and scanner
    assert keys == [i.to_bytes(2, "big") for i in range(1000)]


def test_increments_are_never_repeated(proxied: tuple[Proxy, TSDB, Flask]) -> None:
    proxy, tsdb, _ = proxied
    table = tsdb.uid_table()
    assert table.counter_inc(b"\x00", b"id:metrics") == 1
    proxy.cut()
    with pytest.raises(StorageUnavailableError):
        table.counter_inc(b"\x00", b"id:metrics")
    # The failed increment never reached HBase and was not retried: the next one gives 2.
    assert table.counter_inc(b"\x00", b"id:metrics") == 2


def test_concurrent_salt_scans_fail_as_a_503_when_hbase_goes_away(
        hbase_host_port: tuple[str, int], tmp_path: Path) -> None:
    proxy = Proxy(hbase_host_port)
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True,
                                                "tsd.storage.salt.width": 1, **THRIFT})
    config["tsd.storage"] = f"hbase://127.0.0.1:{proxy.port}"
    tsdb = make_tsdb(config)
    app = app_over(tsdb)
    client = app.test_client()
    try:
        assert client.post("/api/put", data=json.dumps(POINT)).status_code == 204
        assert client.get(QUERY).status_code == 200  # UIDs cached: next, only the scans
        proxy.close()  # HBase gone: live connections cut, new ones refused
        assert_opentsdb_error(client.get(QUERY), 503, "HBase is unavailable")
    finally:
        config["tsd.storage"] = "hbase://{}:{}".format(*hbase_host_port)
        drop_tables(make_tsdb(config))
        tsdb.close()


def test_a_table_gone_while_serving_is_a_503_naming_it_and_the_fix(
        hbase_host_port: tuple[str, int], tmp_path: Path) -> None:
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True})
    tsdb = make_tsdb(config)
    app = app_over(tsdb)
    uid_table = config["tsd.storage.hbase.table_prefix"] + "tsdb-uid"
    with closing(happybase.Connection(*hbase_host_port, timeout=30_000)) as raw:
        raw.delete_table(uid_table, disable=True)
    try:
        error = assert_opentsdb_error(
            app.test_client().get(QUERY), 503,
            f"Table not found: {uid_table}. Create OpenTSDB's tables with `pytsd create-tables`")
        assert "TableNotFoundException" in error["details"]
    finally:
        drop_tables(tsdb)


def test_hbase_without_tables_keeps_opentsdbs_rule_with_a_clear_503(
        hbase_host_port: tuple[str, int]) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    app = create_app({"tsd.storage": "hbase://{}:{}".format(*hbase_host_port),
                      "tsd.storage.hbase.table_prefix": prefix})
    client = app.test_client()
    for url in (QUERY, "/api/suggest?type=metrics"):
        error = assert_opentsdb_error(
            client.get(url), 503,
            f"Table not found: {prefix}tsdb-uid. "
            "Create OpenTSDB's tables with `pytsd create-tables`")
        assert "does not create tables on HBase" in error["details"]
    with closing(happybase.Connection(*hbase_host_port, timeout=30_000)) as raw:
        assert not [t for t in raw.tables() if t.startswith(prefix.encode())]  # none made


def test_store_url_must_name_host_and_port() -> None:
    with pytest.raises(StorageError, match="Invalid tsd.storage URL"):
        HBaseStore.from_config(load_config({"tsd.storage": "hbase://nohost"}, environ={}))
