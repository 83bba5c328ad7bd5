"""Raw reads of closed hours from the hour columns the embedded store keeps beside the cells
(``sqlite_hours``, ``hour_blob``, ``app/tsdb/read/hour_columns.py``), on both backends (HBase
keeps none and reads its cells): the answers with the hour cache off, on, fresh and warm are
the same, and a late write, a deleted row or a note in a closed hour is seen by the next read,
whichever process made it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.storage.base import HOUR_COLUMN, able
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb, write_from_another_process

DAY = 1370476800  # Thu, 06 Jun 2013 00:00:00 GMT: every hour long closed
HOURS = 3
OFF = {"tsd.query.cache.max_bytes": 0}
ON = {"tsd.query.cache.max_bytes": 64 << 20}
# Host a: (ts - DAY) // 10 % 6 every 10 s, integers (each minute holds 0..5: average 2.5,
# maximum 5); host b: 1.25 every 10 s. Summed per minute: 3.75.
MINUTES = {str(DAY + minute * 60): 3.75 for minute in range(HOURS * 60)}
QUERIES = ["sum:1m-avg:m", "max:10m-max:m{host=*}", "avg:1h-sum:m{host=*}", "sum:m{host=a}",
           "zimsum:30s-count:m"]


@pytest.fixture
def written(tsd_config: dict[str, Any], request: pytest.FixtureRequest) -> TSDB:
    tsd_config.update(OFF)
    tsdb: TSDB = request.getfixturevalue("tsdb")
    points = [DataPoint("m", ts, (ts - DAY) // 10 % 6, {"host": "a"})
              for ts in range(DAY, DAY + HOURS * 3600, 10)]
    points += [DataPoint("m", ts, 1.25, {"host": "b"})
               for ts in range(DAY, DAY + HOURS * 3600, 10)]
    assert not any(PointWriter(tsdb).write(points))
    return tsdb


def _query(client: FlaskClient, m: str) -> Any:
    response = client.get(f"/api/query?start={DAY}&end={DAY + HOURS * 3600 - 1}&m={m}")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def _kept_hours(tsdb: TSDB) -> list[int] | None:
    """The base times of metric m's hours with kept columns (None: the backend keeps none)."""
    columns = able(tsdb.data_table(), HOUR_COLUMN)
    if columns is None:
        return None
    prefix = bytes(tsdb.layout.salt_width) + tsdb.metrics.get_id("m")
    return [int.from_bytes(hour[-4:], "big")
            for hour in columns.hour_prefixes([(prefix, prefix + b"\xff" * 4)])]


ALL_HOURS = [DAY + h * 3600 for h in range(HOURS)]


def _clients(tsdb: TSDB) -> tuple[FlaskClient, FlaskClient]:
    """A client with the hour cache off, and one over a fresh TSDB with it on."""
    return (app_over(tsdb).test_client(),
            app_over(make_tsdb({**tsdb.config, **ON})).test_client())


def test_answers_are_the_same_cache_off_on_fresh_and_warm(written: TSDB, settled: None) -> None:
    off, on = _clients(written)
    assert _kept_hours(written) in ([], None)
    assert _query(off, "sum:1m-avg:m")[0]["dps"] == MINUTES  # the hours' columns built
    assert _kept_hours(written) in (ALL_HOURS, None)
    raw = _query(off, "sum:m{host=a}")[0]["dps"]
    assert len(raw) == HOURS * 360 and raw[str(DAY)] == 0 and raw[str(DAY + 50)] == 5
    for m in QUERIES:
        expected = _query(off, m)
        assert _query(off, m) == expected  # from the columns
        assert _query(on, m) == expected  # the cache's first read: from the columns
        assert _query(on, m) == expected  # warm: from the cache
    assert [s["dps"] for s in _query(on, "max:10m-max:m{host=*}")] == [
        {str(DAY + k * 600): 5 for k in range(HOURS * 6)},
        {str(DAY + k * 600): 1.25 for k in range(HOURS * 6)}]


def test_a_late_point_from_another_process_is_seen(written: TSDB, settled: None) -> None:
    off, on = _clients(written)
    for client in (off, on):
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == MINUTES  # kept, both ways
    # Host a's first point of the second hour, 0, becomes 3: that minute averages 18 / 6.
    write_from_another_process(dict(written.config), "m", {"host": "a"}, [(DAY + 3600, 3)])
    assert _kept_hours(written) in ([DAY, DAY + 7200], None)  # its hour's columns dropped
    expected = {**MINUTES, str(DAY + 3600): 4.25}
    for client in (off, on, off, on):
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == expected
    # The embedded store's merge wrote the first value in a compacted cell: the row holds the
    # timestamp twice (the newest wins) until compaction, and an hour holding a duplicate is
    # read from its cells, not kept as columns.
    compact_table(written.data_table(), written.layout, now_s=2**31)
    for client in (off, on):
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == expected
    assert _kept_hours(written) in (ALL_HOURS, None)  # built again from the cells
    assert _query(off, "sum:m{host=a}")[0]["dps"][str(DAY + 3600)] == 3


def test_a_deleted_row_is_seen(written: TSDB, settled: None) -> None:
    off, on = _clients(written)
    for client in (off, on):
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == MINUTES
    table = written.data_table()
    host_b = written.tagv.get_id("b")
    last_hour_b = next(key for key, _ in table.scan(columns=[b"t"]) if key.endswith(host_b)
                       and written.layout.parse_row_key(key).base_time_s == DAY + 7200)
    table.delete(last_hour_b)
    expected = {**MINUTES, **{str(DAY + 7200 + minute * 60): 2.5 for minute in range(60)}}
    for client in (off, on, off, on):
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == expected


def test_an_hour_with_a_note_is_read_from_its_cells(written: TSDB, settled: None) -> None:
    off, on = _clients(written)
    tsuid = (written.metrics.get_id("m") + written.tagk.get_id("host")
             + written.tagv.get_id("a")).hex().upper()
    response = off.post("/api/annotation", data=json.dumps(
        {"tsuid": tsuid, "startTime": DAY + 30, "description": "deploy"}))
    assert response.status_code == 200, response.get_data(as_text=True)
    for client in (off, on, off, on):
        by_host = {s["tags"]["host"]: s for s in _query(client, "sum:1m-avg:m{host=*}")}
        assert [note["description"] for note in by_host["a"]["annotations"]] == ["deploy"]
        assert "annotations" not in by_host["b"]
        assert _query(client, "sum:1m-avg:m")[0]["dps"] == MINUTES
    assert _kept_hours(written) in ([DAY + 3600, DAY + 7200], None)  # not the noted hour


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_fresh_process_answers_from_the_kept_columns(written: TSDB, settled: None) -> None:
    off = app_over(written).test_client()
    expected = {m: _query(off, m) for m in QUERIES}
    assert _kept_hours(written) == ALL_HOURS
    script = (
        "import json, sys\n"
        "from app import create_app\n"
        "out = {}\n"
        "for cache in (0, 64 << 20):\n"
        "    settings = {**json.loads(sys.argv[1]), 'tsd.query.cache.max_bytes': cache}\n"
        "    client = create_app(settings).test_client()\n"
        "    for m in json.loads(sys.argv[2]):\n"
        f"        url = '/api/query?start={DAY}&end={DAY + HOURS * 3600 - 1}&m=' + m\n"
        "        out[f'{cache} {m}'] = client.get(url).get_json()\n"
        "print(json.dumps(out))\n")
    settings = {key: value for key, value in written.config.items()
                if key.startswith("tsd.storage")}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(settings, default=str),
                           json.dumps(list(expected))], check=True, timeout=60,
                          capture_output=True, text=True)
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers == {f"{cache} {m}": expected[m] for cache in (0, 64 << 20) for m in expected}


def _points(first_s: int, hours: int) -> list[DataPoint]:
    """The hours from ``first_s`` of hosts a and b, as the ``written`` fixture's."""
    times = range(first_s, first_s + hours * 3600, 10)
    return ([DataPoint("m", ts, (ts - DAY) // 10 % 6, {"host": "a"}) for ts in times]
            + [DataPoint("m", ts, 1.25, {"host": "b"}) for ts in times])


def _stored_flags(tsdb: TSDB) -> set[int | None]:
    """The ``z`` flags of the data table's stored cells (None: as written, 3: packed)."""
    path = tsdb.config["tsd.storage"].removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        return {z for (z,) in db.execute("SELECT z FROM cells WHERE tbl = 'tsdb'"
                                         " AND family = 't' AND length(qualifier) > 2")}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_store_written_unpacked_answers_the_same_packed_and_back(
        tsd_config: dict[str, Any], settled: None) -> None:
    """Packing became the default: a store an older pytsd wrote unpacked is read by today's
    default (from its cells and from the hour columns made of them), gets packed cells for
    what it writes next, and still reads the same with packing off."""
    unpacked = make_tsdb({**tsd_config, **OFF, "tsd.storage.sqlite.pack_cells": False})
    four = HOURS + 1
    assert not any(PointWriter(unpacked).write(_points(DAY, HOURS)))
    compact_table(unpacked.data_table(), unpacked.layout, now_s=2**31)
    assert _stored_flags(unpacked) == {None}
    unpacked.close()

    default = make_tsdb({**{key: value for key, value in {**tsd_config, **OFF}.items()
                            if key != "tsd.storage.sqlite.pack_cells"},
                         "tsd.storage.sqlite.one_copy": False})  # the cells' own packing
    client = app_over(default).test_client()
    assert _query(client, "sum:1m-avg:m")[0]["dps"] == MINUTES  # from the cells
    assert _query(client, "sum:1m-avg:m")[0]["dps"] == MINUTES  # from their hour columns
    last = DAY + HOURS * 3600  # a fourth hour, written with today's default
    assert not any(PointWriter(default).write(_points(last, 1)))
    compact_table(default.data_table(), default.layout, now_s=2**31)
    assert _stored_flags(default) == {None, 3}  # the old hours as they were, the new packed
    expected = {str(DAY + minute * 60): 3.75 for minute in range(four * 60)}
    url = f"/api/query?start={DAY}&end={DAY + four * 3600 - 1}&m=sum:1m-avg:m"
    assert client.get(url).get_json()[0]["dps"] == expected
    default.close()

    for settings in ({"tsd.storage.sqlite.pack_cells": False}, {}):
        again = make_tsdb({**tsd_config, **OFF, **settings})
        reader = app_over(again).test_client()
        for _ in range(2):  # from the cells, then from the hour columns kept
            assert reader.get(url).get_json()[0]["dps"] == expected
        raw = reader.get(f"/api/query?start={DAY}&end={DAY + four * 3600 - 1}"
                         "&m=sum:m{host=a}").get_json()[0]["dps"]
        assert len(raw) == four * 360 and raw[str(last + 50)] == 5
        again.close()
