"""Rollup rows through the hour cache: warm reads answer from kept decodes, a rewritten rollup
cell or a backfill is seen by the next query, aggregates and tables keep apart; and the storage
read behind it returns only the wanted aggregates' cells. The answers are checked on both
backends; what is kept, on HBase alone: the embedded store reads its rollup rows' columns and
keeps nothing (tests/functional/test_rollup_columns.py)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.storage.codec_rollup import rollup_cell
from app.tsdb import TSDB
from app.tsdb.hour_cache import cache_for
from app.tsdb.read import closed_ranges
from app.tsdb.rollups import compute_rollups
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over
from tests.rollup_fixtures import ROLLUP_SETTINGS

DAY = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT
HOURS = 3


@pytest.fixture
def rollup_tsdb(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update(ROLLUP_SETTINGS)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    points = [DataPoint("m", ts, (ts - DAY) // 10 % 6, {"host": host})
              for host in ("a", "b") for ts in range(DAY, DAY + HOURS * 3600, 10)]
    assert not any(PointWriter(tsdb).write(points))
    compute_rollups(tsdb, DAY, DAY + HOURS * 3600)
    return tsdb


@pytest.fixture(autouse=True)
def afresh() -> None:
    """HBase stamps a range from its second read by the process: no read before a test's."""
    closed_ranges._ASKED.clear()


def _query(client: FlaskClient, m: str) -> Any:
    response = client.get(f"/api/query?start={DAY}&end={DAY + HOURS * 3600 - 1}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _hits(tsdb: TSDB) -> int:
    cache = cache_for(tsdb)
    assert cache is not None
    return cache.stats.hits


def _write_later(tsdb: TSDB, table: str, rows: dict[bytes, dict[bytes, bytes]]) -> None:
    time.sleep(0.01)  # a later write time than the cells it replaces
    tsdb.table(table).put_many(sorted(rows.items()))


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_second_read_comes_from_the_cache(rollup_tsdb: TSDB, settled: None) -> None:
    client = app_over(rollup_tsdb).test_client()
    cold = _query(client, "sum:1h-avg:m{host=*}")
    hits = _hits(rollup_tsdb)
    assert _query(client, "sum:1h-avg:m{host=*}") == cold
    assert _hits(rollup_tsdb) - hits == 2  # one day row of the 1h table per host
    assert [s["dps"] for s in cold] == [{str(DAY + h * 3600): 2.5 for h in range(HOURS)}] * 2


def test_aggregates_and_tables_keep_apart(rollup_tsdb: TSDB, settled: None) -> None:
    client = app_over(rollup_tsdb).test_client()
    queries = ["sum:1h-avg:m", "sum:1h-sum:m", "sum:1h-max:m", "min:1h-min:m",
               "sum:10m-avg:m", "sum:1m-sum:m", "sum:2h-avg:m{host=a}"]
    raw = {m: _query(client, m.replace(":", ":rollup_raw:", 1)) for m in queries}
    for _ in range(2):  # cold, then from the cache
        for m in queries:
            assert _query(client, m) == raw[m], m
    assert raw["sum:1h-sum:m"][0]["dps"][str(DAY)] == 2 * 360 * 2.5


def test_a_rewritten_rollup_cell_is_seen(rollup_tsdb: TSDB, settled: None) -> None:
    client = app_over(rollup_tsdb).test_client()
    before = _query(client, "sum:1h-avg:m{host=a}")[0]["dps"]
    assert _query(client, "sum:1h-avg:m{host=a}")[0]["dps"] == before  # kept
    # The first hour's sum of host a, as an external rollup job would rewrite it.
    response = client.post("/api/rollup", data=json.dumps(
        {"metric": "m", "timestamp": DAY, "value": 3600, "tags": {"host": "a"},
         "interval": "1h", "aggregator": "sum"}))
    assert response.status_code == 204, response.get_data(as_text=True)
    after = _query(client, "sum:1h-avg:m{host=a}")[0]["dps"]
    assert after == {**before, str(DAY): 10.0}  # 3600 / 360 points


def test_a_backfill_after_a_late_point_is_seen(rollup_tsdb: TSDB, settled: None) -> None:
    client = app_over(rollup_tsdb).test_client()
    before = _query(client, "sum:1m-sum:m")[0]["dps"]
    assert _query(client, "sum:1m-sum:m")[0]["dps"] == before
    # A value that keeps the rolled-up sum's width (a wider one leaves the old cell beside
    # the new: see docs/rollups.md, "Not done yet").
    assert not any(PointWriter(rollup_tsdb).write(
        [DataPoint("m", DAY + 5, 3, {"host": "a"})]))
    time.sleep(0.01)
    compute_rollups(rollup_tsdb, DAY, DAY + HOURS * 3600)
    after = _query(client, "sum:1m-sum:m")[0]["dps"]
    assert after == {**before, str(DAY): before[str(DAY)] + 3}


def test_a_cell_written_into_a_kept_row_is_seen(rollup_tsdb: TSDB, settled: None) -> None:
    """A new cell (here a minute's sum and count the row did not have) changes the stamp."""
    client = app_over(rollup_tsdb).test_client()
    query = "sum:1h-avg:m{host=a}"
    before = _query(client, query)[0]["dps"]
    config = rollup_tsdb.rollup_config
    assert config is not None
    hourly, ids = config.by_interval("1h"), config.aggregation_ids
    key = next(k for k, _ in rollup_tsdb.table(hourly.table).scan()
               if rollup_tsdb.layout.parse_row_key(k).tags)
    ts = DAY + 5 * 3600  # an hour that had no data
    cells = {}
    for agg, value in (("sum", 7.0), ("count", 2)):
        qualifier, raw = rollup_cell(ts, DAY, value, ids[agg], hourly.interval_s,
                                     hourly.intervals)
        cells[b"t:" + qualifier] = raw
    _write_later(rollup_tsdb, hourly.table, {key: cells})
    response = client.get(f"/api/query?start={DAY}&end={DAY + 6 * 3600 - 1}&m={query}")
    assert response.get_json()[0]["dps"] == {**before, str(ts): 3.5}


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_open_or_unsettled_rows_are_not_kept(rollup_tsdb: TSDB) -> None:
    client = app_over(rollup_tsdb).test_client()
    first = _query(client, "sum:1h-avg:m")
    hits = _hits(rollup_tsdb)
    assert _query(client, "sum:1h-avg:m") == first
    assert _hits(rollup_tsdb) == hits  # cells written just now are not settled


def test_packed_read_returns_only_the_wanted_cells(rollup_tsdb: TSDB) -> None:
    """Each row's wanted cells, qualifiers and values joined in the same order."""
    config = rollup_tsdb.rollup_config
    assert config is not None
    table = rollup_tsdb.table(config.by_interval("1m").table)
    # (the metric-0 rows of the lease and the coverage record hold no aggregate cells)
    full = {key: cells for key, cells in table.scan(columns=[b"t"])
            if b"pytsd.rollup" not in key}
    rows = list(table.scan_packed(b"", None, "t", [b"\x00", b"\x01"]))
    assert [row[0] for row in rows] == sorted(full)
    for key, cells, _newest, qualifiers, values in rows:
        wanted = {c[2:]: v for c, v in full[key].items() if c[2:3] in (b"\x00", b"\x01")}
        assert cells == len(wanted) == 120  # 60 minutes x sum and count
        joined = [qualifiers[i:i + 3] for i in range(0, len(qualifiers), 3)]
        assert sorted(joined) == sorted(wanted)
        at = 0
        for qualifier in joined:
            width = (qualifier[2] & 0x7) + 1
            assert values[at:at + width] == wanted[qualifier]
            at += width
        assert at == len(values)


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_old_layout_rows_are_read_but_not_kept(rollup_tsdb: TSDB, settled: None) -> None:
    """A row in the older ``sum:`` layout is decoded cell by cell, each time."""
    config = rollup_tsdb.rollup_config
    assert config is not None
    table = rollup_tsdb.table(config.by_interval("1h").table)
    key = next(k for k, _ in table.scan()
               if b"pytsd.rollup" not in k and rollup_tsdb.layout.parse_row_key(k).tags)
    table.delete(key)
    _write_later(rollup_tsdb, config.by_interval("1h").table, {key: {
        b"t:sum:\x00\x00": b"\x0a", b"t:count:\x00\x00": b"\x04",
        b"t:sum:\x00\x1f": struct.pack(">d", 9.0), b"t:count:\x00\x10": b"\x03"}})
    client = app_over(rollup_tsdb).test_client()
    host = rollup_tsdb.tagv.get_name(rollup_tsdb.layout.parse_row_key(key).tags[0][1])
    query = f"sum:1h-avg:m{{host={host}}}"
    assert _query(client, query)[0]["dps"] == {str(DAY): 2.5, str(DAY + 3600): 3.0}
    hits = _hits(rollup_tsdb)
    assert _query(client, query)[0]["dps"] == {str(DAY): 2.5, str(DAY + 3600): 3.0}
    assert _hits(rollup_tsdb) == hits


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_closed_rollup_rows_are_one_range_entry(rollup_tsdb: TSDB, settled: None) -> None:
    """The closed rows of a read are validated and kept as one range entry (one row per
    series), with the same answer as raw data."""
    client = app_over(rollup_tsdb).test_client()
    raw = _query(client, "sum:rollup_raw:1m-avg:m{host=*}")
    cache = cache_for(rollup_tsdb)
    assert cache is not None
    ranges, hits = cache.ranges, cache.stats.range_hits  # the raw read's own
    for _ in range(4):
        assert _query(client, "sum:1m-avg:m{host=*}") == raw
    assert cache.ranges - ranges == 1
    # from the second read, the range stamp being a scan (docs/cache.md)
    assert cache.stats.range_hits - hits == 2


def test_a_row_deleted_from_a_kept_range_is_seen(rollup_tsdb: TSDB, settled: None) -> None:
    config = rollup_tsdb.rollup_config
    assert config is not None
    table = rollup_tsdb.table(config.by_interval("1m").table)
    client = app_over(rollup_tsdb).test_client()
    before = _query(client, "sum:1m-sum:m{host=*}")
    assert _query(client, "sum:1m-sum:m{host=*}") == before
    key = next(k for k, _ in table.scan()
               if b"pytsd.rollup" not in k and rollup_tsdb.layout.parse_row_key(k).tags)
    table.delete(key)  # an hour of one host: 60 buckets fewer
    after = _query(client, "sum:1m-sum:m{host=*}")
    assert sum(map(len, (s["dps"] for s in after))) == sum(
        map(len, (s["dps"] for s in before))) - 60


def test_a_new_series_backfilled_into_a_kept_range_is_seen(rollup_tsdb: TSDB,
                                                          settled: None) -> None:
    client = app_over(rollup_tsdb).test_client()
    before = _query(client, "sum:1m-sum:m{host=*}")
    assert _query(client, "sum:1m-sum:m{host=*}") == before
    assert not any(PointWriter(rollup_tsdb).write(
        [DataPoint("m", DAY + 60 * i, 4, {"host": "c"}) for i in range(3)]))
    time.sleep(0.01)
    compute_rollups(rollup_tsdb, DAY, DAY + 3600)
    after = _query(client, "sum:1m-sum:m{host=*}")
    assert [s["tags"]["host"] for s in after] == ["a", "b", "c"]
    assert after[2]["dps"] == {str(DAY + 60 * i): 4 for i in range(3)}


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_a_kept_range_is_checked_by_its_stamp_and_another_process_write_is_seen(
        rollup_tsdb: TSDB, settled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept range is current while its stamp (one scan of the rows' stamps) is: a write
    from another OS process changes it, and the next read sees the write."""
    config = rollup_tsdb.rollup_config
    assert config is not None
    table = rollup_tsdb.table(config.by_interval("1h").table)
    stamp_read = "scan_stamps_packed"
    client = app_over(rollup_tsdb).test_client()
    before = _query(client, "sum:1h-avg:m{host=*}")
    assert _query(client, "sum:1h-avg:m{host=*}") == before  # kept
    stamps: list[object] = []
    real = getattr(type(table), stamp_read)
    monkeypatch.setattr(type(table), stamp_read,
                        lambda *args, **kw: stamps.append(args) or real(*args, **kw))
    assert _query(client, "sum:1h-avg:m{host=*}") == before
    assert len(stamps) == 1
    settings = {**rollup_tsdb.config}
    script = (
        "import json, sys\n"
        "from app.config import load_config\n"
        "from app.tsdb import TSDB\n"
        "from app.tsdb.rollups import RollupWriter, parse_aggregate_point\n"
        "tsdb = TSDB(load_config(json.loads(sys.argv[1]), environ={}))\n"
        "point = parse_aggregate_point(json.loads(sys.argv[2]))\n"
        "assert RollupWriter(tsdb).write([point]) == [None]\n")
    point = {"metric": "m", "timestamp": DAY, "value": 3600, "tags": {"host": "a"},
             "interval": "1h", "aggregator": "sum"}
    subprocess.run([sys.executable, "-c", script, json.dumps(settings), json.dumps(point)],
                   check=True, timeout=60)
    after = _query(client, "sum:1h-avg:m{host=*}")
    assert after[0]["dps"] == {**before[0]["dps"], str(DAY): 10.0}  # 3600 / 360 points
    assert after[1] == before[1]
