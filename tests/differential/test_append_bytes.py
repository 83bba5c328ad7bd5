"""Append mode byte for byte: the ``0x050000`` cells pytsd's batched writer leaves in HBase are
the very bytes OpenTSDB 2.4.1 writes (``tsd.storage.enable_appends``) for the same points.

Its own TSD with appends on (whatever the suite's running oracle is configured with), and
pytsd with appends on, each on fresh tables of the project's HBase; the same UIDs assigned in
the same order; the same points put in the same order, one request at a time with ``sync``
(the order of a cell's entries is the order the appends arrived). Then every cell of both data
tables is read raw with happybase and compared: row keys, columns and values.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import happybase
import pytest

from app.storage.hbase import HBaseStore
from tests.conftest import app_over, hbase_zk_quorum, make_tsdb
from tests.differential.oracle import OpenTSDB, opentsdb_settings

ROOT = Path(__file__).resolve().parents[2]
HOUR_S = 1356998400  # 2013-01-01T00:00:00Z
SERIES = ({"host": "a"}, {"host": "b"}, {"host": "a", "dc": "x"})
# Values of every width OpenTSDB's HTTP put chooses: 1, 2, 4 and 8-byte integers, negatives,
# and non-integers (8-byte doubles); offsets in seconds and, for the last two, in ms.
VALUES = (0, 1, -1, 127, 128, -129, 40000, -70000, 2**31, -(2**40), 0.5, -2.25, 1e300)


def _hbase() -> str:
    address = os.environ.get("TSD_TEST_HBASE")
    ci = os.environ.get("CI") == "true"
    if not address:
        if ci:
            pytest.fail("CI must run the differential suite: TSD_TEST_HBASE is not set")
        pytest.skip("the differential suite needs TSD_TEST_HBASE=host:port (make hbase-up)")
    if not shutil.which("java") or not shutil.which("mvn") and not (
            ROOT / ".opentsdb" / "lib").is_dir():
        if ci:
            pytest.fail("CI must run the differential suite: java (and mvn once) are needed")
        pytest.skip("the differential suite needs java and maven (scripts/opentsdb/opentsdb.sh)")
    return address


def points() -> list[dict[str, Any]]:
    out = []
    for i, value in enumerate(VALUES):
        timestamp = HOUR_S + 10 * i
        if i >= len(VALUES) - 2:
            timestamp = timestamp * 1000 + 7  # a millisecond timestamp: a 4-byte qualifier
        for tags in SERIES:
            out.append({"metric": "ab.m", "timestamp": timestamp, "value": value,
                        "tags": tags})
    return out


def raw_cells(address: str, table: str) -> dict[bytes, dict[bytes, bytes]]:
    host, _, port = address.rpartition(":")
    connection = happybase.Connection(host, int(port), timeout=30_000)
    try:
        return {key: dict(cells) for key, cells in connection.table(table).scan()}
    finally:
        connection.close()


@pytest.fixture(params=["thrift", "native"])  # pytsd's tsd.storage.hbase.write_rpc
def two_writers(request: pytest.FixtureRequest) -> Iterator[tuple[str, OpenTSDB, Any, str, str]]:
    address = _hbase()
    run = uuid.uuid4().hex[:8]
    prefix_o, prefix_p = f"apb{run}o_", f"apb{run}p_"
    tsd = OpenTSDB(f"append-bytes-{run}", prefix_o, address,
                   opentsdb_settings(0, appends=True, compaction=False))
    tsdb = make_tsdb({"tsd.storage": f"hbase://{address}", "tsd.core.auto_create_metrics": True,
                      "tsd.storage.enable_appends": True,
                      "tsd.storage.hbase.table_prefix": prefix_p,
                      "tsd.storage.hbase.write_rpc": request.param,
                      "tsd.storage.hbase.zk_quorum": hbase_zk_quorum()})
    try:
        tsd.start()
        yield address, tsd, app_over(tsdb).test_client(), prefix_o, prefix_p
    finally:
        tsd.stop()
        host, _, port = address.rpartition(":")
        for prefix in (prefix_o, prefix_p):
            store = HBaseStore(host, int(port), prefix)
            store.drop_tables()
            store.close()
        tsdb.close()


def test_append_cells_are_opentsdbs_bytes(
        two_writers: tuple[str, OpenTSDB, Any, str, str]) -> None:
    address, tsd, pytsd, prefix_o, prefix_p = two_writers
    names = json.dumps({"metric": ["ab.m"], "tagk": ["host", "dc"], "tagv": ["a", "b", "x"]})
    assert tsd.request("POST", "/api/uid/assign", names)[0] == 200
    assert pytsd.post("/api/uid/assign", data=names).status_code == 200
    for point in points():
        body = json.dumps(point)
        status, text = tsd.request("POST", "/api/put?sync&details", body)
        assert status == 200, text
        answer = pytsd.post("/api/put?sync&details", data=body)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    # Then a request of several points, some of one row: their order within the cell.
    several = json.dumps([{"metric": "ab.m", "timestamp": HOUR_S + 3000 + i, "value": i * 3,
                           "tags": SERIES[i % 2]} for i in range(6)])
    assert tsd.request("POST", "/api/put?sync&details", several)[0] == 200
    assert pytsd.post("/api/put?sync&details", data=several).status_code == 200
    opentsdb = raw_cells(address, prefix_o + "tsdb")
    mine = raw_cells(address, prefix_p + "tsdb")
    assert len(opentsdb) == len(SERIES)
    assert all(set(cells) == {b"t:\x05\x00\x00"} for cells in opentsdb.values())
    assert {k.hex(): {c.hex(): v.hex() for c, v in cells.items()} for k, cells in mine.items()} \
        == {k.hex(): {c.hex(): v.hex() for c, v in cells.items()}
            for k, cells in opentsdb.items()}
