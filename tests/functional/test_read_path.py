"""The raw read path on both backends: a wildcard filter drops series before their values are
read, yet every scanned row is counted as OpenTSDB counts it; warm series are the cache's own
arrays (no copy), read-only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from app.query.ast import Filter, SubQuery
from app.tsdb import TSDB
from app.tsdb.hour_cache import cache_for
from app.tsdb.reader import SeriesReader
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb

HOUR_S = 3600
BASE_S = (int(time.time()) // HOUR_S - 6) * HOUR_S  # three closed hours, well before now
HOSTS = ["a1", "a2", "b1"]
END_S = BASE_S + 3 * HOUR_S - 1


@pytest.fixture
def tsd_config(tsd_config: dict[str, Any]) -> dict[str, Any]:
    """The name filters' own path: on HBase the row-key regexp would drop the dropped series'
    rows before they are counted (tests/integration/test_hbase_row_regex.py)."""
    return {**tsd_config, "tsd.storage.hbase.scan_filters": False}


@pytest.fixture
def loaded(tsdb: TSDB, settled: None) -> TSDB:
    points = [DataPoint("read.m", BASE_S + i * 60, i * (h + 1), {"host": host})
              for h, host in enumerate(HOSTS) for i in range(3 * 60)]
    assert not any(PointWriter(tsdb).write(points))
    return tsdb


def wildcard(host: str) -> SubQuery:
    return SubQuery("sum", metric="read.m",
                    filters=(Filter(type="wildcard", tagk="host", filter=host, group_by=True),))


def read(tsdb: TSDB, sub: SubQuery) -> tuple[list[Any], SeriesReader]:
    reader = SeriesReader(tsdb)
    series = reader.read(sub, BASE_S * 1000, END_S * 1000)
    return series, reader


def stored_bytes(tsdb: TSDB) -> int:
    """What OpenTSDB weighs: per cell its row key, column name and value."""
    return sum(len(key) * len(cells) + sum(len(c) + len(v) for c, v in cells.items())
               for key, cells in tsdb.data_table().scan(columns=[b"t"]))


def test_a_wildcard_counts_every_row_but_reads_only_its_series(
        tsd_config: dict[str, Any], loaded: TSDB) -> None:
    cache = cache_for(loaded)
    assert cache is not None
    total_bytes = stored_bytes(loaded)
    off = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0})
    try:
        runs = [read(off, wildcard("a*"))] + [read(loaded, wildcard("a*")) for _ in range(3)]
    finally:
        off.close()
    for series, reader in runs:
        assert sorted(s.tags["host"] for s in series) == ["a1", "a2"]
        assert [len(s.ts_ms) for s in series] == [180, 180]
        # 9 rows scanned (3 hosts x 3 hours), as OpenTSDB's post-scan filter counts them
        assert reader.stats.rows == 9 and reader.stats.bytes == total_bytes
    assert len(cache) == 6  # only a1's and a2's rows were decoded and kept
    misses = cache.stats.misses
    read(loaded, wildcard("a*"))
    assert cache.stats.misses == misses  # b1's rows are not even looked up


def test_a_series_the_wildcard_drops_is_seen_when_another_query_wants_it(
        loaded: TSDB) -> None:
    read(loaded, wildcard("a*"))
    series, reader = read(loaded, wildcard("b*"))
    assert [s.tags["host"] for s in series] == ["b1"]
    assert series[0].values.tolist() == [3.0 * i for i in range(180)]
    assert reader.stats.rows == 9


def test_warm_series_are_the_cached_arrays_read_only(loaded: TSDB) -> None:
    cold, _ = read(loaded, wildcard("*"))
    warm, _ = read(loaded, wildcard("*"))
    cache = cache_for(loaded)
    assert cache is not None and cache.stats.hits == 9
    for before, after in zip(cold, warm, strict=True):
        assert after.ts_ms.tolist() == before.ts_ms.tolist()
        assert after.values.tolist() == before.values.tolist()
        # one slice of the kept block, not a copy of the three hours
        assert np.shares_memory(after.ts_ms, before.ts_ms)
        assert not after.ts_ms.flags.writeable and not after.values.flags.writeable
        with pytest.raises(ValueError):
            after.values[0] = 1.0


def test_answers_match_through_the_api(loaded: TSDB) -> None:
    client = app_over(loaded).test_client()
    url = f"/api/query?start={BASE_S}&end={END_S}&m=sum:read.m{{}}{{host=a*}}"
    answers = [client.get(url).get_json() for _ in range(2)]
    assert answers[0] == answers[1]
    assert answers[0][0]["aggregateTags"] == ["host"]
    assert answers[0][0]["dps"][str(BASE_S + 60)] == 1 + 2


def test_a_cold_read_weighs_and_stamps_what_it_read(tsd_config: dict[str, Any],
                                                    loaded: TSDB, stamps_cheap: None) -> None:
    """Cold (one pass over values and write times on the embedded store), warm and cache-off
    reads report the same rows and bytes; each kept entry carries its row's stored stamp
    (on HBase too, whose warm reads of rows of single cells otherwise go whole)."""
    total_bytes = stored_bytes(loaded)
    everything = SubQuery("sum", metric="read.m")
    off = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0})
    try:
        runs = [read(off, everything)] + [read(loaded, everything) for _ in range(2)]
    finally:
        off.close()
    for series, reader in runs:
        assert [len(s.ts_ms) for s in series] == [180, 180, 180]
        assert reader.stats.rows == 9 and reader.stats.bytes == total_bytes
    cache = cache_for(loaded)
    assert cache is not None and cache.stats.hits == 9
    table = loaded.data_table()
    for key, cells, newest in table.scan_stamps(b"", None, "t"):
        assert cache.holds(table.name, key, (cells, newest))
