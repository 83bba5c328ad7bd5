"""The HBase write batcher (``app/storage/hbase_write.py``) seen from ``/api/put``: concurrent
requests merged into shared Thrift calls lose no point, with appends off and on; a request is
answered only once its points are readable from HBase; and a write HBase refuses answers every
waiting request with an error, never 204.

Real HBase, real failures (a dropped table), no mocks. Requests come from threads of this
process, as they do in a server worker (its request threads share one store and batcher).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import happybase
import pytest
from flask import Flask

from app.storage.codec_cells import cell_kind, cell_points
from app.tsdb import TSDB
from tests.conftest import app_over, hbase_address, make_tsdb

HOUR_S = 1356998400  # 2013-01-01T00:00:00Z
SERIES = 20
REQUESTS = 24
THREADS = 6


@pytest.fixture
def address() -> str:
    found = hbase_address()
    if not found:
        pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    return found


def tsdb_on(address: str, **settings: Any) -> TSDB:
    """A TSDB on fresh tables of its own (dropped by the caller: a test may break them)."""
    return make_tsdb({"tsd.storage": f"hbase://{address}", "tsd.core.auto_create_metrics": True,
                      "tsd.storage.hbase.table_prefix": f"wb{uuid.uuid4().hex[:10]}_",
                      "tsd.storage.hbase.timeout_ms": 5000, **settings})


@pytest.fixture
def tsdbs() -> Iterator[list[TSDB]]:
    made: list[TSDB] = []
    yield made
    for tsdb in made:
        tsdb.store.drop_tables()  # type: ignore[attr-defined]
        tsdb.close()


def body(request: int) -> str:
    """Request r: one point of every series at second r of the hour, value 1000 * r + series
    (so concurrent requests write the same rows and the batcher merges them)."""
    return json.dumps([{"metric": "wb.m", "timestamp": HOUR_S + request,
                        "value": 1000 * request + series, "tags": {"host": f"h{series:02d}"}}
                       for series in range(SERIES)])


def stored_points(tsdb: TSDB) -> dict[tuple[bytes, int], bytes]:
    """``(row key, offset ms) -> value bytes`` of every point cell in the data table, read
    with happybase past pytsd's store (the cells HBase holds, whatever wrote them)."""
    host, _, port = tsdb.config["tsd.storage"][len("hbase://"):].rpartition(":")
    connection = happybase.Connection(host, int(port), timeout=10_000)
    try:
        table = connection.table(tsdb.config["tsd.storage.hbase.table_prefix"] + "tsdb")
        found = {}
        for key, cells in table.scan():
            for column, value in cells.items():
                qualifier = column.split(b":", 1)[1]
                kind = cell_kind(qualifier)
                assert kind is not None, column
                for offset_ms, _, raw in cell_points(kind, qualifier, value):
                    found[(key, offset_ms)] = raw
        return found
    finally:
        connection.close()


def post_all(app: Flask, requests: range) -> list[int]:
    def one(request: int) -> int:
        return app.test_client().post("/api/put", data=body(request)).status_code

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, requests))


@pytest.mark.parametrize(("appends", "writers"), [(False, 4), (True, 4), (False, 0), (True, 0)],
                         ids=["puts", "appends", "puts-unbatched", "appends-unbatched"])
def test_every_point_of_concurrent_requests_is_stored(address: str, tsdbs: list[TSDB],
                                                      appends: bool, writers: int) -> None:
    tsdb = tsdb_on(address, **{"tsd.storage.enable_appends": appends,
                               "tsd.storage.hbase.write_linger_ms": 5,
                               "tsd.storage.hbase.writers": writers})
    tsdbs.append(tsdb)
    assert post_all(app_over(tsdb), range(REQUESTS)) == [204] * REQUESTS
    points = stored_points(tsdb)
    assert len(points) == SERIES * REQUESTS
    # One hour row per series; the value of request r, series s is 1000 r + s, written in the
    # fewest bytes of a big-endian signed integer (OpenTSDB's long encoding).
    rows = sorted({key for key, _ in points})
    assert len(rows) == SERIES
    for row_index, row in enumerate(rows):  # rows sort by the tag value UID: h00, h01 ...
        for request in range(REQUESTS):
            value = 1000 * request + row_index
            width = 1 if value < 128 else 2 if value < 32768 else 4
            assert points[(row, request * 1000)] == value.to_bytes(width, "big"), (
                row_index, request)
    if appends:
        # One append cell per row, holding all its points (an append column, not singles).
        host, _, port = address.rpartition(":")
        connection = happybase.Connection(host, int(port))
        table = connection.table(tsdb.config["tsd.storage.hbase.table_prefix"] + "tsdb")
        assert {tuple(cells) for _, cells in table.scan()} == {(b"t:\x05\x00\x00",)}
        connection.close()


@pytest.mark.parametrize("appends", [False, True], ids=["puts", "appends"])
def test_a_request_is_answered_only_once_its_points_are_readable(
        address: str, tsdbs: list[TSDB], appends: bool) -> None:
    # A long linger: a batcher that answered before writing would be caught every time.
    tsdb = tsdb_on(address, **{"tsd.storage.enable_appends": appends,
                               "tsd.storage.hbase.write_linger_ms": 150})
    tsdbs.append(tsdb)
    app = app_over(tsdb)

    def write_then_read(request: int) -> int:
        assert app.test_client().post("/api/put", data=body(request)).status_code == 204
        seen = stored_points(tsdb)
        return sum(1 for _, offset_ms in seen if offset_ms == request * 1000)

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(write_then_read, range(6))) == [SERIES] * 6


@pytest.mark.parametrize("appends", [False, True], ids=["puts", "appends"])
def test_a_write_hbase_refuses_answers_every_request_with_an_error(
        address: str, tsdbs: list[TSDB], appends: bool) -> None:
    tsdb = tsdb_on(address, **{"tsd.storage.enable_appends": appends,
                               "tsd.storage.hbase.write_linger_ms": 20})
    tsdbs.append(tsdb)
    app = app_over(tsdb)
    assert app.test_client().post("/api/put", data=body(0)).status_code == 204  # UIDs known
    # The data table disappears under the running TSD (the UID table stays).
    host, _, port = address.rpartition(":")
    connection = happybase.Connection(host, int(port))
    connection.delete_table(tsdb.config["tsd.storage.hbase.table_prefix"] + "tsdb",
                            disable=True)
    connection.close()
    answers = []

    def one(request: int) -> tuple[int, Any]:
        response = app.test_client().post("/api/put", data=body(request))
        return response.status_code, response.get_json()

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(one, range(1, 9)))
    for status, error in answers:
        assert status in (500, 503), (status, error)
        assert set(error["error"]) == {"code", "message", "details"}
        assert error["error"]["code"] == status


def batcher_threads() -> int:
    return sum(1 for thread in threading.enumerate()
               if thread.name.startswith(("pytsd-hbase-write", "pytsd-hbase-call")))


def test_a_closed_store_leaves_no_writer_thread(address: str) -> None:
    """Callers write their batches themselves; through Thrift, a batch too large for one call
    is split over threads of the batcher, which a closed store stops (natively a batch is one
    ``Multi`` per region server: test_hbase_write_rpc.py)."""
    before = batcher_threads()
    tsdb = tsdb_on(address, **{"tsd.storage.hbase.writers": 3,
                               "tsd.storage.hbase.write_rpc": "thrift"})
    app = app_over(tsdb)
    assert app.test_client().post("/api/put", data=body(0)).status_code == 204
    assert batcher_threads() == before  # a small batch: written by the request's own thread
    # 300 series in one request: 300 rows, more than one call of 64 rows or more
    many = json.dumps([{"metric": "batched", "timestamp": HOUR_S, "value": i,
                        "tags": {"host": f"h{i:03d}"}} for i in range(300)])
    assert app.test_client().post("/api/put", data=many).status_code == 204
    assert batcher_threads() > before
    tsdb.store.drop_tables()  # type: ignore[attr-defined]
    tsdb.close()
    assert batcher_threads() == before
