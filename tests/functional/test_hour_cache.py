"""The hour cache on both backends: warm reads answer from kept decodes, and every change to a
closed hour — a late point, a query delete, a compaction, a write by another process — is seen
by the next query (the stamps in storage invalidate; see docs/cache.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.storage import codec
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.hour_cache import cache_for
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb, write_from_another_process

# The cache's workings, on rows of single cells: on HBase as on compacted rows (rows not
# compacted, a warm read on HBase reads whole: test_range_cache's test_rows_not_compacted_...).
pytestmark = pytest.mark.usefixtures("stamps_cheap")

HOUR_S = 3600
# Three closed hours, well before now.
BASE_S = (int(time.time()) // HOUR_S - 6) * HOUR_S
POINTS = [(BASE_S + i * 60, i) for i in range(3 * 60)]
QUERY = f"/api/query?start={BASE_S}&end={BASE_S + 3 * HOUR_S - 1}&m=sum:cache.m{{host=*}}"


@pytest.fixture
def loaded(tsdb: TSDB, settled: None) -> Iterator[FlaskClient]:
    write(tsdb, POINTS)
    yield app_over(tsdb).test_client()


def write(tsdb: TSDB, points: list[tuple[int, int | float]], host: str = "a") -> None:
    errors = PointWriter(tsdb).write([DataPoint("cache.m", ts, v, {"host": host})
                                      for ts, v in points])
    assert not any(errors), errors


def dps(client: FlaskClient) -> dict[str, Any]:
    response = client.get(QUERY)
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert len(body) == 1
    return dict(body[0]["dps"])


def expected(points: list[tuple[int, int | float]]) -> dict[str, Any]:
    return {str(ts): v for ts, v in sorted(points)}


def test_second_read_comes_from_the_cache(tsdb: TSDB, loaded: FlaskClient) -> None:
    cache = cache_for(tsdb)
    assert cache is not None
    assert dps(loaded) == expected(POINTS)
    assert len(cache) == 3 and cache.stats.hits == 0  # the three closed hour rows kept
    assert dps(loaded) == expected(POINTS)
    assert cache.stats.hits == 3


def test_open_hour_and_unsettled_rows_are_not_kept(tsdb: TSDB) -> None:
    now_s = int(time.time())
    write(tsdb, [(now_s - 5, 1), (BASE_S, 2)])
    client = app_over(tsdb).test_client()
    client.get(f"/api/query?start={BASE_S}&m=sum:cache.m")
    cache = cache_for(tsdb)
    assert cache is not None and len(cache) == 0  # one row open, the other written just now


def test_a_late_point_is_seen(tsdb: TSDB, loaded: FlaskClient) -> None:
    dps(loaded)
    late = (BASE_S + 30, 99.5)  # between two stored points of the first hour
    write(tsdb, [late])
    assert dps(loaded) == expected([*POINTS, late])


def test_an_overwritten_point_is_seen(tsdb: TSDB, loaded: FlaskClient) -> None:
    dps(loaded)
    time.sleep(0.002)  # not the write time of the first write: HBase would keep the older
    write(tsdb, [(BASE_S + 60, 1000)])
    assert dps(loaded)[str(BASE_S + 60)] == 1000


def test_a_query_delete_is_seen(tsd_config: dict[str, Any], tsdb: TSDB,
                                loaded: FlaskClient) -> None:
    dps(loaded)
    # Another app (its own TSDB and cache), as another worker would delete.
    client = create_app({**tsd_config, "tsd.query.allow_delete": True}).test_client()
    end_s = BASE_S + HOUR_S + 59 * 60
    response = client.post("/api/query", data=json.dumps({
        "start": BASE_S + HOUR_S, "end": end_s, "delete": True,
        "queries": [{"aggregator": "sum", "metric": "cache.m"}]}))
    assert response.status_code == 200, response.get_data(as_text=True)
    kept = [(ts, v) for ts, v in POINTS if not BASE_S + HOUR_S <= ts <= end_s]
    assert dps(loaded) == expected(kept)


def test_compaction_is_seen_and_changes_nothing(single_cells: None, tsdb: TSDB,
                                                loaded: FlaskClient) -> None:
    cache = cache_for(tsdb)
    assert cache is not None
    # Every point a single cell (single_cells: as OpenTSDB writes them; the embedded store's
    # merge would write a block's points of a row as one compacted cell, which leaves
    # compaction nothing to do), and a point more per hour: every row has cells to merge.
    extra = [(BASE_S + hour * HOUR_S + 30, 7) for hour in range(3)]
    write(tsdb, extra)
    dps(loaded)
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    hits = cache.stats.hits
    # Every row changed its cells: read and decoded again (stamps first, each entry stale;
    # or, the first row's entry stale, in one pass), then kept as compacted.
    assert dps(loaded) == expected([*POINTS, *extra])
    assert cache.stats.hits == hits
    assert dps(loaded) == expected([*POINTS, *extra])
    assert cache.stats.hits == hits + 3


def test_a_write_by_another_process_is_seen(tsd_config: dict[str, Any], tsdb: TSDB,
                                            loaded: FlaskClient) -> None:
    """Another pytsd process on the same store writes into a cached closed hour."""
    dps(loaded)
    late = [(BASE_S + 2 * HOUR_S + 15, -7), (BASE_S + 2 * HOUR_S + 3599, 3.25)]
    write_from_another_process(tsd_config, "cache.m", {"host": "a"}, late)
    assert dps(loaded) == expected([*POINTS, *late])


def test_rows_with_notes_keep_their_notes(tsdb: TSDB, loaded: FlaskClient) -> None:
    note = {"tsuid": tsuid_of(tsdb), "startTime": BASE_S + 600, "description": "deploy"}
    assert loaded.post("/api/annotation", data=json.dumps(note)).status_code == 200
    for _ in range(3):
        body = loaded.get(QUERY).get_json()
        assert [n["description"] for n in body[0]["annotations"]] == ["deploy"]


def tsuid_of(tsdb: TSDB) -> str:
    uid = tsdb.metrics.get_id("cache.m") + tsdb.tagk.get_id("host") + tsdb.tagv.get_id("a")
    return uid.hex().upper()


def test_integers_beyond_2_53_stay_exact(tsdb: TSDB, settled: None) -> None:
    big = 2**62 + 1
    write(tsdb, [(BASE_S, big), (BASE_S + 60, 5)])
    client = app_over(tsdb).test_client()
    for _ in range(3):
        assert dps(client) == {str(BASE_S): big, str(BASE_S + 60): 5}


def test_cache_off(tsd_config: dict[str, Any], tsdb: TSDB, loaded: FlaskClient) -> None:
    off = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0})
    try:
        assert dps(app_over(off).test_client()) == expected(POINTS)
        assert cache_for(off) is None
    finally:
        off.close()


def test_weighs_like_storage(tsdb: TSDB, loaded: FlaskClient) -> None:
    """A warm read reports the rows and bytes a cold one reads (the byte limit holds)."""
    summaries = [loaded.get(QUERY + "&show_summary").get_json()[-1]["statsSummary"]
                 ["queryIdx_00"] for _ in range(2)]
    assert summaries[0]["rowsScanned"] == summaries[1]["rowsScanned"] == 3
    assert summaries[0]["dpsRead"] == summaries[1]["dpsRead"] == len(POINTS)
    assert codec.MAX_TIMESPAN == HOUR_S
