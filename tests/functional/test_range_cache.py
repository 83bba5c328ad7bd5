"""Closed hours through range entries (docs/cache.md), on both backends: a warm read of
closed hours answers from one entry validated by one stamp of the whole key range (the
embedded store: one aggregate statement; HBase: every row's stamp, compared whole), and
every change anywhere in the range — a late
point, a new series, a query delete, a compaction, a row deleted, a write by another OS
process — is seen by the next query, with the same answer as a read with the cache off."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.storage import hbase
from app.storage.hbase import STAMP_DEARER_CELLS, HBaseTable
from app.tsdb import TSDB, hour_cache
from app.tsdb.compaction import compact_table
from app.tsdb.hour_cache import HourCache, cache_for
from app.tsdb.read import closed_ranges
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb, write_from_another_process

# The cache's workings, on rows of single cells: on HBase as on compacted rows (rows not
# compacted, a warm read on HBase reads whole: test_range_cache's test_rows_not_compacted_...).
pytestmark = pytest.mark.usefixtures("stamps_cheap")

HOUR_S = 3600
BASE_S = (int(time.time()) // HOUR_S - 8) * HOUR_S  # four closed hours, well before now
HOURS = 4
POINTS = {host: [(BASE_S + i * 60, i + offset) for i in range(HOURS * 60)]
          for host, offset in (("a", 0), ("b", 1000), ("c", 0.5))}
CLOSED = f"start={BASE_S}&end={BASE_S + HOURS * HOUR_S - 1}"


@pytest.fixture
def loaded(tsdb: TSDB, settled: None) -> Iterator[FlaskClient]:
    closed_ranges._ASKED.clear()  # HBase stamps a range from its second read: start afresh
    closed_ranges._DROPPING.clear()
    for host, points in POINTS.items():
        write(tsdb, points, host)
    yield app_over(tsdb).test_client()


def write(tsdb: TSDB, points: list[tuple[int, int | float]], host: str) -> None:
    errors = PointWriter(tsdb).write([DataPoint("range.m", ts, v, {"host": host})
                                      for ts, v in points])
    assert not any(errors), errors


def answer(client: FlaskClient, m: str = "none:range.m{host=*}", times: str = CLOSED) -> Any:
    response = client.get(f"/api/query?{times}&m={m}&show_summary")
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    summary = body.pop()["statsSummary"]["queryIdx_00"]
    return ({s["tags"]["host"]: s["dps"] for s in body},
            (summary["rowsScanned"], summary["dpsRead"]))


def expected(points: dict[str, list[tuple[int, Any]]]) -> dict[str, dict[str, Any]]:
    return {host: {str(ts): v for ts, v in sorted(rows)} for host, rows in points.items()}


def dashboard(tsdb: TSDB, client: FlaskClient) -> Any:
    """The closed hours read as a dashboard does, again and again: then their range is kept
    (on HBase, whose range stamp is a scan, from the second read on)."""
    first = answer(client)
    assert answer(client) == first
    assert the_cache(tsdb).ranges == 1
    return first


def the_cache(tsdb: TSDB) -> HourCache:
    cache = cache_for(tsdb)
    assert cache is not None
    return cache


def test_a_warm_read_is_one_range_entry(backend: str, tsdb: TSDB,
                                        loaded: FlaskClient) -> None:
    cold = answer(loaded)
    assert cold == (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    cache = the_cache(tsdb)
    for _ in range(3):
        assert answer(loaded) == cold  # same points, same rows and points counted
    assert cache.ranges == 1
    hits = 3 if backend == "sqlite" else 2  # HBase stamps a range from its second read
    assert cache.stats.range_hits == hits
    assert cache.stats.hits == 3 * 3 * HOURS  # a range hit counts its rows (HBase: the
    # second read's rows came from the row entries)


def test_filters_run_per_series_on_a_kept_range(tsdb: TSDB,
                                                loaded: FlaskClient) -> None:
    """The entry holds every series of the range; a narrower filter picks from it, and
    counts the rows of the series it drops as a cold read does."""
    dashboard(tsdb, loaded)
    hits = the_cache(tsdb).stats.range_hits
    picked, counted = answer(loaded, "none:range.m{host=regexp(a|c)}")
    assert picked == expected({h: POINTS[h] for h in ("a", "c")})
    assert counted == (3 * HOURS, 2 * HOURS * 60)
    assert the_cache(tsdb).stats.range_hits > hits


def test_a_late_point_in_a_closed_hour_is_seen(tsdb: TSDB,
                                               loaded: FlaskClient) -> None:
    dashboard(tsdb, loaded)
    late = (BASE_S + 2 * HOUR_S + 30, 99.5)
    write(tsdb, [late], "b")
    changed = {**POINTS, "b": [*POINTS["b"], late]}
    assert answer(loaded)[0] == expected(changed)
    assert the_cache(tsdb).stats.range_stale == 1
    assert answer(loaded)[0] == expected(changed)  # kept again, with the late point


def test_an_overwrite_in_place_is_seen(tsdb: TSDB, loaded: FlaskClient) -> None:
    """The same qualifier written again (same time, same value width): as many cells as
    before, only a newer write time shows the change."""
    dashboard(tsdb, loaded)
    time.sleep(0.002)  # not the write time of the first write: HBase would keep the older
    write(tsdb, [(BASE_S + 60, 9.5)], "c")  # was 1.5: a float of the same width
    changed = {**POINTS, "c": [(ts, 9.5 if ts == BASE_S + 60 else v) for ts, v in POINTS["c"]]}
    assert answer(loaded)[0] == expected(changed)


def test_a_new_series_in_a_closed_hour_is_seen(tsdb: TSDB, loaded: FlaskClient) -> None:
    dashboard(tsdb, loaded)
    write(tsdb, [(BASE_S + HOUR_S + 5, 7)], "d")
    seen, counted = answer(loaded)
    assert seen == expected({**POINTS, "d": [(BASE_S + HOUR_S + 5, 7)]})
    assert counted == (3 * HOURS + 1, 3 * HOURS * 60 + 1)


def test_a_query_delete_by_another_app_is_seen(tsd_config: dict[str, Any], tsdb: TSDB,
                                               loaded: FlaskClient) -> None:
    dashboard(tsdb, loaded)
    deleter = create_app({**tsd_config, "tsd.query.allow_delete": True})
    first, last = BASE_S + HOUR_S, BASE_S + 2 * HOUR_S - 1
    try:
        response = deleter.test_client().post("/api/query", data=json.dumps({
            "start": first, "end": last, "delete": True,
            "queries": [{"aggregator": "sum", "metric": "range.m", "tags": {"host": "a"}}]}))
    finally:
        deleter.extensions["tsdb"].close()  # its own store connection
    assert response.status_code == 200, response.get_data(as_text=True)
    kept = {**POINTS, "a": [(ts, v) for ts, v in POINTS["a"] if not first <= ts <= last]}
    assert answer(loaded)[0] == expected(kept)


def test_a_deleted_row_is_seen(tsdb: TSDB, loaded: FlaskClient) -> None:
    """A whole row gone (HBase's deleteall, as an operator or a TTL would): fewer cells."""
    dashboard(tsdb, loaded)
    table = tsdb.data_table()
    key = next(key for key, _ in table.scan(columns=[b"t"]))
    table.delete(key)
    seen, counted = answer(loaded)
    assert counted[0] == 3 * HOURS - 1
    assert sum(map(len, seen.values())) == 3 * HOURS * 60 - 60


def test_a_compaction_is_seen_and_changes_nothing(single_cells: None, tsdb: TSDB,
                                                  loaded: FlaskClient) -> None:
    # Every point a single cell (single_cells: as OpenTSDB writes them; the embedded store's
    # merge would write a block's points of a row as one compacted cell, which leaves
    # compaction nothing to do), and a point more.
    write(tsdb, [(BASE_S + 30, 5)], "a")
    before = dashboard(tsdb, loaded)
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    assert answer(loaded)[0] == before[0]
    assert the_cache(tsdb).stats.range_stale == 1
    assert answer(loaded)[0] == before[0]


def test_a_write_by_another_process_is_seen(tsd_config: dict[str, Any], tsdb: TSDB,
                                            loaded: FlaskClient) -> None:
    dashboard(tsdb, loaded)
    late = [(BASE_S + 3 * HOUR_S + 15, -7), (BASE_S + 15, 3.25)]
    write_from_another_process(tsd_config, "range.m", {"host": "c"}, late)
    changed = {**POINTS, "c": sorted([*POINTS["c"], *map(tuple, late)])}
    assert answer(loaded)[0] == expected(changed)


def test_closed_hours_and_the_open_hour_join(tsd_config: dict[str, Any], tsdb: TSDB,
                                             settled: None) -> None:
    """Up to now: the closed hours from the range entry, the open hour read row by row, as
    the same answer as the cache off, every time."""
    now_s = int(time.time())
    points = [(now_s - 3 * HOUR_S + i * 60, i) for i in range(3 * 60)]
    write(tsdb, points, "a")
    write(tsdb, [(BASE_S, 1)], "b")
    off = make_tsdb({**tsd_config, "tsd.query.cache.max_bytes": 0})
    url = f"/api/query?start={BASE_S}&m=sum:range.m{{host=*}}&show_summary"
    try:
        want = app_over(off).test_client().get(url).get_json()
        client = app_over(tsdb).test_client()
        for _ in range(3):
            got = client.get(url).get_json()
            assert got[:-1] == want[:-1]
            summary = got[-1]["statsSummary"]["queryIdx_00"]
            for count in ("rowsScanned", "dpsRead", "seriesRead"):
                assert summary[count] == want[-1]["statsSummary"]["queryIdx_00"][count]
    finally:
        off.close()


def test_a_read_narrowed_by_a_value_filter_leaves_no_entry_for_other_values(
        tsdb: TSDB, loaded: FlaskClient) -> None:
    """On HBase a regexp's values may narrow the scan on the region servers: such a read
    assembled the regexp's series only, which must never become the entry another regexp on
    the same key picks from."""
    for _ in range(3):
        picked, _ = answer(loaded, "none:range.m{host=regexp(a|c)}")
        assert picked == expected({h: POINTS[h] for h in ("a", "c")})
    picked, _ = answer(loaded, "none:range.m{host=regexp(b)}")
    assert picked == expected({"b": POINTS["b"]})


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
@pytest.mark.parametrize("m", ["none:range.m{host=*}", "none:range.m"])
def test_a_warm_read_of_an_unsettled_range_scans_its_stamps_once(
        tsdb: TSDB, monkeypatch: pytest.MonkeyPatch, m: str) -> None:
    """HBase, the hour just closed (its rows settled, its range not yet: no entry kept):
    the range's stamp is every row's stamp, one scan; the rows come from their row entries
    under those very stamps, not from a second stamp scan."""
    real = hour_cache.clock_ms
    monkeypatch.setattr(hour_cache, "clock_ms", lambda: real() + 10_000)
    closed_ranges._ASKED.clear()
    for host, points in POINTS.items():
        write(tsdb, points, host)
    client = app_over(tsdb).test_client()
    calls = Counter[str]()
    for name in ("scan", "scan_many", "scan_stamps", "scan_stamps_sized", "scan_stamped",
                 "rows", "row"):
        monkeypatch.setattr(HBaseTable, name, _counted(getattr(HBaseTable, name), name, calls))
    cold = answer(client, m)
    assert cold == (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    for _ in range(2):
        calls.clear()
        assert answer(client, m) == cold
        assert the_cache(tsdb).ranges == 0  # not settled: never kept
        # the range's stamps (with their sizes, for a name filter's dropped series), only
        assert calls == {"scan_stamps_sized": 1}


def _counted(method: Any, name: str, calls: Counter[str]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return method(*args, **kwargs)
    return counted


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_a_cold_read_of_series_a_name_filter_picks_is_one_scan(
        tsdb: TSDB, loaded: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, nothing kept yet (a first read, or every row compacted since): the values come
    with their stamps in one scan, after one row's stamp; not every row's stamp first and
    the values after (twice the region servers' work)."""
    calls = Counter[str]()
    for name in ("scan", "scan_many", "scan_stamps", "scan_stamps_sized", "scan_stamped",
                 "rows", "row"):
        monkeypatch.setattr(HBaseTable, name, _counted(getattr(HBaseTable, name), name, calls))
    assert answer(loaded) == (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    assert calls == {"scan_stamps": 1, "scan_stamped": 1}  # the first row's stamp; the rows


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_an_hour_without_rows_costs_one_look(tsdb: TSDB, loaded: FlaskClient,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to now, the hours after the data hold no row: a warm read looks once (the first
    row's stamp) and reads nothing more there."""
    up_to_now, m = f"start={BASE_S}&end={int(time.time())}", "none:range.m"
    first = answer(loaded, m, up_to_now)
    assert answer(loaded, m, up_to_now) == first  # the range stamped from here on
    calls = Counter[str]()
    for name in ("scan", "scan_many", "scan_stamps", "scan_stamps_sized", "scan_stamped",
                 "rows", "row"):
        monkeypatch.setattr(HBaseTable, name, _counted(getattr(HBaseTable, name), name, calls))
    assert answer(loaded, m, up_to_now) == first
    assert calls == {"scan_stamps_sized": 1, "scan_stamps": 1}  # the range; the empty hours


def test_a_literal_filter_stamps_its_own_series_on_hbase(backend: str, tsdb: TSDB,
                                                         loaded: FlaskClient) -> None:
    """A literal on a tag key that does not sort first narrows the scan by the row-key
    regexp on HBase, and the range's stamp too: a late point in a series the filter leaves
    out keeps the entry (the embedded store's one stamp covers the whole range: stale),
    one in a series it keeps is seen."""
    dcs = {"a": "dc1", "b": "dc2", "c": "dc1"}  # dc's UID comes after host's (loaded)
    for host, points in POINTS.items():
        errors = PointWriter(tsdb).write([DataPoint("range.n", ts, v, {"host": host,
                                                                      "dc": dcs[host]})
                                          for ts, v in points])
        assert not any(errors), errors
    m = "none:range.n{dc=dc1}"
    first = answer(loaded, m)
    assert first == (expected({h: POINTS[h] for h in ("a", "c")}), (2 * HOURS, 2 * HOURS * 60))
    assert answer(loaded, m) == first
    cache = the_cache(tsdb)
    assert cache.ranges == 1
    write_n = [DataPoint("range.n", BASE_S + HOUR_S + 30, 5, {"host": "b", "dc": "dc2"})]
    assert not any(PointWriter(tsdb).write(write_n))
    hits, stale = cache.stats.range_hits, cache.stats.range_stale
    assert answer(loaded, m) == first
    if backend == "hbase":
        assert (cache.stats.range_hits, cache.stats.range_stale) == (hits + 1, stale)
    else:
        assert cache.stats.range_stale == stale + 1
    write_n = [DataPoint("range.n", BASE_S + HOUR_S + 30, 7, {"host": "a", "dc": "dc1"})]
    assert not any(PointWriter(tsdb).write(write_n))
    seen, counted = answer(loaded, m)
    late = {"a": [*POINTS["a"], (BASE_S + HOUR_S + 30, 7)], "c": POINTS["c"]}
    assert (seen, counted) == (expected(late), (2 * HOURS, 2 * HOURS * 60 + 1))


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_a_range_written_just_now_is_read_in_one_pass(tsdb: TSDB,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, closed hours written (or compacted) a moment ago: neither their rows nor
    their range can be kept yet, so after one read has seen that, the next ones read the
    range in one pass (values and stamps together), not its stamps first and then its rows:
    two full scans of the region servers per query until the rows settle."""
    closed_ranges._ASKED.clear()
    closed_ranges._NO_STAMP.clear()
    for host, points in POINTS.items():
        write(tsdb, points, host)
    client, m = app_over(tsdb).test_client(), "none:range.m"  # no name filter to run
    cold = answer(client, m)
    assert cold == (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    assert answer(client, m) == cold  # the range stamped (asked before): too new to keep
    calls = Counter[str]()
    for name in ("scan", "scan_many", "scan_stamps", "scan_stamps_sized", "scan_stamped",
                 "rows", "row"):
        monkeypatch.setattr(HBaseTable, name, _counted(getattr(HBaseTable, name), name, calls))
    assert answer(client, m) == cold
    assert the_cache(tsdb).ranges == 0
    # the first row's stamp (warm or cold?), then the rows and their stamps in one scan
    assert calls == {"scan_stamps": 1, "scan_stamped": 1}


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_rows_settling_one_after_another_are_read_in_one_pass_until_all_are_kept(
        tsdb: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, closed hours rewritten a moment ago row after row (a compaction), so that the
    first rows settle, and are kept, before the others: a read must not take the range for
    warm on its first row alone (every stamp scanned, then most rows again: twice the region
    servers' work) but read it in one pass until the rest settle, and once more after, which
    keeps them; only then does a warm read scan stamps alone."""
    closed_ranges._ASKED.clear()
    closed_ranges._NO_STAMP.clear()
    real = hour_cache.clock_ms
    write(tsdb, POINTS["a"], "a")  # host a's rows come first in the range (its UID: first)
    a_written_ms = real()
    time.sleep(0.3)  # HBase stamps cells on this machine's clock
    for host in ("b", "c"):
        write(tsdb, POINTS[host], host)
    all_written_ms = real()
    now_ms = [a_written_ms + hour_cache.SETTLED_MS + 100]  # a's rows settled, not the others
    monkeypatch.setattr(hour_cache, "clock_ms", lambda: now_ms[0])
    client, m = app_over(tsdb).test_client(), "none:range.m"
    whole = (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    assert answer(client, m) == whole  # cold: a's rows kept
    assert answer(client, m) == whole  # the range stamped once: too new to keep
    read_counted = _reads_counted(client, m, whole, monkeypatch)
    one_pass = {"scan_stamps": 1, "scan_stamped": 1}  # the first row's stamp, then the rows
    assert read_counted() == one_pass  # the first row kept, most rows not settled
    now_ms[0] = all_written_ms + hour_cache.SETTLED_MS + 100
    assert read_counted() == one_pass  # all settled: this read keeps them
    warm = read_counted()  # the range's stamps, every row kept
    assert warm["scan_stamped"] == warm["scan"] == warm["rows"] == 0, warm


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_rows_not_compacted_are_read_whole_on_hbase_and_once_compacted_stamped(
        tsdb: TSDB, loaded: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, closed hours of single cells (not compacted): a row's stamp is a key-only scan
    of every cell, dearer to the region servers than the row read whole, so once a read has
    found them so, a dashboard's reads go whole, in one pass (values and stamps together),
    with no look at the first row, no range stamp, and nothing kept. Compacted, the rows are
    stamped again and answered from the cache."""
    monkeypatch.setattr(hbase, "STAMP_DEARER_CELLS", STAMP_DEARER_CELLS)  # the real rule
    client, m = loaded, "none:range.m"
    whole = (expected(POINTS), (3 * HOURS, 3 * HOURS * 60))
    read_counted = _reads_counted(client, m, whole, monkeypatch)
    assert read_counted() == {"scan_stamps": 1, "scan_stamped": 1}  # the first row's stamp
    read_whole = {"scan_stamped": 1}
    assert read_counted() == read_whole
    assert read_counted() == read_whole
    assert len(the_cache(tsdb)) == 0  # kept, the rows would serve no stamp
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    assert read_counted() == read_whole  # compacted, found so: kept
    assert len(the_cache(tsdb)) == 3 * HOURS
    hits = the_cache(tsdb).stats.hits
    assert read_counted() == {"scan_stamps_sized": 1}  # the range stamp: every row kept
    assert the_cache(tsdb).stats.hits == hits + 3 * HOURS


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_rows_not_compacted_in_several_ranges_are_read_whole_from_the_second_read_on(
        loaded: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, a literal filter's several key ranges (fetched concurrently, stamps first) over
    rows not compacted: the first read's stamps show them dearer than the rows, so the next
    reads go whole, one pass over each range, without stamps."""
    monkeypatch.setattr(hbase, "STAMP_DEARER_CELLS", STAMP_DEARER_CELLS)  # the real rule
    hosts = {host: POINTS[host] for host in ("a", "c")}
    whole = (expected(hosts), (2 * HOURS, 2 * HOURS * 60))
    read_counted = _reads_counted(loaded, "none:range.m{host=a|c}", whole, monkeypatch)
    ranges = 2 * (HOURS + 1)  # a range per host and hour; the scan starts an hour early
    first = read_counted()
    assert first["scan_stamps"] == ranges and first["scan_many"] == 1, first
    assert read_counted() == {"scan_stamped": ranges}
    assert read_counted() == {"scan_stamped": ranges}


@pytest.mark.parametrize("backend", ["hbase"], indirect=True)
def test_a_range_mostly_compacted_is_still_stamped_whole_on_hbase(
        tsdb: TSDB, loaded: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase, a day's hours compacted but the last (a dashboard's usual range): the rows not
    compacted are a few of the range's, so it is still stamped and answered from its entry;
    reading it whole would fetch and decode every compacted row's values."""
    monkeypatch.setattr(hbase, "STAMP_DEARER_CELLS", STAMP_DEARER_CELLS)  # the real rule
    compact_table(tsdb.data_table(), tsdb.layout, now_s=BASE_S + (HOURS - 1) * HOUR_S)
    first = dashboard(tsdb, loaded)
    hits = the_cache(tsdb).stats.range_hits
    assert answer(loaded) == first
    assert the_cache(tsdb).stats.range_hits == hits + 1


def _reads_counted(client: FlaskClient, m: str, whole: Any,
                   monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """A read of ``m`` that must answer ``whole``, returning the HBase calls it made."""
    calls = Counter[str]()
    for name in ("scan", "scan_many", "scan_stamps", "scan_stamps_sized", "scan_stamped",
                 "rows", "row"):
        monkeypatch.setattr(HBaseTable, name, _counted(getattr(HBaseTable, name), name, calls))

    def read_counted() -> Counter[str]:
        calls.clear()
        assert answer(client, m) == whole
        return Counter(calls)
    return read_counted
