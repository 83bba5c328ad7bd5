"""One copy of a closed hour's values (``tsd.storage.sqlite.one_copy``; ``hour_values``,
``sqlite_hours.strip``): the cells of an hour whose column is kept give up their values to it,
and every cell still reads as the very bytes written. Two embedded stores take the same
writes, compactions, reads, late points and deletes, one with the setting on and one off (the
layout of before); after each step every cell of both (scans, single-row reads, `pytsd
cells`' path) is the same, and so is every answer, while the one's cells hold no values."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from app import create_app
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.hour_strip import HourStrip, strip_all, stripping_table
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb

DAY = 1370476800  # every hour long closed
HOURS = 3
QUERIES = ["sum:1m-avg:m", "max:10m-max:m{host=*}", "sum:m{host=a}", "sum:m{host=ints}",
           "zimsum:m{host=mixed}"]


def _points() -> list[DataPoint]:
    """Floats of two decimals, integers of every width (1, 2, 4 and 8 bytes), a series of
    both, and floats a 4-byte float does not hold (8-byte ones)."""
    points = []
    for ts in range(DAY, DAY + HOURS * 3600, 10):
        k = (ts - DAY) // 10
        points.append(DataPoint("m", ts, round((k * 37 % 10_001) / 100, 2), {"host": "a"}))
        points.append(DataPoint("m", ts, [7, -300, 70_000, -(2**40), 2**52 - 1][k % 5],
                                {"host": "ints"}))
        points.append(DataPoint("m", ts, k if k % 2 else k / 8, {"host": "mixed"}))
        points.append(DataPoint("m", ts, 0.1 * k + 1e-9, {"host": "wide"}))
    return points


def _open(tmp_path: Path, name: str, one_copy: bool, salt_width: int = 0) -> TSDB:
    return make_tsdb({"tsd.storage": f"sqlite:///{tmp_path / name}",
                      "tsd.core.auto_create_metrics": True, "tsd.storage.salt.width": salt_width,
                      "tsd.storage.salt.buckets": 2,
                      "tsd.query.cache.max_bytes": 0, "tsd.storage.sqlite.one_copy": one_copy})


def _cells(tsdb: TSDB) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """Every row of the data table as scanned, and each row read alone (the SQL path)."""
    table = tsdb.data_table()
    scanned = list(table.scan())
    for key, cells in scanned:
        assert table.row(key) == cells
    return scanned


def _stripped(tsdb: TSDB) -> int:
    """The cells whose value is kept in their hour's column."""
    store = tsdb.store
    assert isinstance(store, SqliteStore)
    with sqlite3.connect(store.path) as db:
        return int(db.execute("SELECT count(*) FROM cells WHERE z & 4").fetchone()[0])


_STRIPS: dict[int, HourStrip] = {}


def _background(tsdb: TSDB) -> None:
    """One pass of the server's background strip (what its thread runs every interval), by
    one process's job (its lease, held on)."""
    _STRIPS.setdefault(id(tsdb), HourStrip(tsdb, pause_s=0)).run_once()


def _answers(client: FlaskClient) -> list[Any]:
    out = []
    for m in QUERIES:
        reply = client.get(f"/api/query?start={DAY}&end={DAY + HOURS * 3600 - 1}&m={m}")
        assert reply.status_code == 200, reply.get_data(as_text=True)
        out.append(reply.get_json())
    return out


class Twins:
    """The same steps on a store with one copy and one without."""

    def __init__(self, tmp_path: Path, salt_width: int = 0) -> None:
        self.one = _open(tmp_path, "one.db", True, salt_width)
        self.two = _open(tmp_path, "two.db", False, salt_width)
        self.clients = [app_over(self.one).test_client(), app_over(self.two).test_client()]

    def write(self, points: list[DataPoint]) -> None:
        for tsdb in (self.one, self.two):
            assert not any(PointWriter(tsdb).write(points))

    def compact(self) -> None:
        for tsdb in (self.one, self.two):
            compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)

    def read(self) -> None:
        """A read of the whole range by both (it keeps the hours' columns), the same; then
        the server's background strip."""
        one, two = (_answers(client) for client in self.clients)
        assert one == two
        _background(self.one)
        _background(self.two)  # one copy off: it strips nothing

    def same(self) -> list[tuple[bytes, dict[bytes, bytes]]]:
        cells = _cells(self.one)
        assert cells == _cells(self.two)
        return cells


@pytest.fixture(params=[0, 1], ids=["unsalted", "salted"])
def twins(tmp_path: Path, settled: None, request: pytest.FixtureRequest) -> Twins:
    twins = Twins(tmp_path, request.param)  # salted: an hour's key prefix of 8 bytes
    twins.write(_points())
    twins.compact()
    return twins


def test_a_closed_hour_keeps_one_copy_and_reads_the_same_bytes(twins: Twins) -> None:
    before = twins.same()
    assert _stripped(twins.one) == 0
    twins.read()
    assert _stripped(twins.one) >= HOURS * 4  # every row of every hour
    assert _stripped(twins.two) == 0
    assert twins.same() == before
    twins.read()  # from the columns, and from cells made whole from them
    assert twins.same() == before


def test_a_read_keeps_the_columns_and_only_the_background_strips(twins: Twins) -> None:
    """The first read of a closed hour keeps its column and strips nothing (no query pays
    for it); the background pass then strips it, every cell and answer as before."""
    before = twins.same()
    answers = [_answers(client) for client in twins.clients]
    assert answers[0] == answers[1]
    assert _stripped(twins.one) == 0
    for tsdb in (twins.one, twins.two):
        store = tsdb.store
        assert isinstance(store, SqliteStore)
        with sqlite3.connect(store.path) as db:  # both kept every hour's column
            assert db.execute("SELECT count(*) FROM hour_columns").fetchone()[0] >= HOURS
    _background(twins.one)
    _background(twins.two)
    assert _stripped(twins.one) >= HOURS * 4
    assert _stripped(twins.two) == 0
    assert twins.same() == before
    assert [_answers(client) for client in twins.clients] == answers
    _background(twins.one)  # nothing left: the same
    assert twins.same() == before


def test_a_late_point_a_delete_and_compaction_again(twins: Twins) -> None:
    twins.read()
    stripped = _stripped(twins.one)
    late = [DataPoint("m", DAY + 3600 + 5, 42.5, {"host": "a"}),
            DataPoint("m", DAY + 3600 + 5, 9, {"host": "ints"})]
    twins.write(late)  # a new timestamp in the second hour: its cells get their values back
    cells = twins.same()
    assert 0 < _stripped(twins.one) < stripped
    assert any(b"t:" + bytes([0x00, 0x5B]) in row for _, row in cells)  # the late cell, alone
    twins.read()
    twins.compact()
    twins.read()
    assert _stripped(twins.one) == stripped  # compacted and kept again
    twins.same()
    table = twins.one.data_table()
    key = next(key for key, _ in table.scan(columns=[b"t"])
               if twins.one.layout.parse_row_key(key).base_time_s == DAY + 7200)
    for tsdb in (twins.one, twins.two):
        tsdb.data_table().delete(key)  # a row of the third hour
    assert 0 < _stripped(twins.one) < stripped
    twins.same()
    twins.read()
    twins.same()
    assert _stripped(twins.one) == stripped - 1  # the hour's three rows left


def test_any_update_of_a_cell_gives_its_hour_its_values_back(twins: Twins) -> None:
    """An update by any path (here plain SQL, as another tool could run it) of one cell of a
    stripped hour: every cell of the hour gets its value back before the blob goes."""
    twins.read()
    stripped = _stripped(twins.one)
    store = twins.one.store
    assert isinstance(store, SqliteStore)
    for tsdb in (twins.one, twins.two):
        with tsdb.store.transaction() as db:  # type: ignore[attr-defined]
            db.execute("UPDATE cells SET ts = ts + 1 WHERE family = 't' AND row ="
                       " (SELECT min(row) FROM cells WHERE family = 't')")
    twins.same()
    assert 0 < _stripped(twins.one) < stripped  # that row's hour (in its salt bucket) whole


def test_a_duplicate_keeps_its_hour_whole(twins: Twins) -> None:
    twins.read()
    twins.write([DataPoint("m", DAY + 20, 1.5, {"host": "a"})])  # an existing timestamp
    twins.read()  # the first hour has a duplicate: no column, its values in its cells
    twins.same()
    assert 0 < _stripped(twins.one) < HOURS * 4


def test_an_annotation_keeps_its_hour_whole(twins: Twins) -> None:
    note = {"startTime": DAY + 7200 + 30, "description": "deploy",
            "tsuid": twins.one.data_table().scan(columns=[b"t"]).__next__()[0][:3].hex()}
    note["tsuid"] = ""  # a global note lives in another row: a series' note in the hour's
    for client in twins.clients:
        tsuid = next(s["tsuids"][0] for s in client.get(
            f"/api/query?start={DAY}&end={DAY + 60}&m=sum:m{{host=a}}&show_tsuids=true"
        ).get_json())
        reply = client.post("/api/annotation", json={**note, "tsuid": tsuid})
        assert reply.status_code == 200, reply.get_data(as_text=True)
    twins.read()
    twins.same()
    assert 0 < _stripped(twins.one) < HOURS * 4


def test_an_existing_store_opens_and_reads_the_same(tmp_path: Path, settled: None) -> None:
    """A store of the layout of before, its hour columns kept, opened with the setting on:
    the same cells; its hours keep one copy from their next column on."""
    old = _open(tmp_path, "old.db", False)
    assert not any(PointWriter(old).write(_points()))
    compact_table(old.data_table(), old.layout, now_s=2**31)
    _answers(app_over(old).test_client())  # hour columns kept, the triggers of before
    before = _cells(old)
    old.close()
    new = _open(tmp_path, "old.db", True)
    client = app_over(new).test_client()
    answers = _answers(client)
    assert _cells(new) == before
    assert _stripped(new) == 0  # its columns were kept already: a read strips nothing
    _background(new)
    assert _stripped(new) > 0  # the background strips hours kept before
    assert _cells(new) == before
    assert not any(PointWriter(new).write([DataPoint("m", DAY + 5, 1.0, {"host": "a"})]))
    compact_table(new.data_table(), new.layout, now_s=2**31)
    assert _answers(client) != answers  # the late point
    _background(new)
    assert _stripped(new) > 0  # the first hour's column made again, with one copy
    expected = [(key, dict(cells)) for key, cells in before]
    got = _cells(new)
    assert [key for key, _ in got] == [key for key, _ in expected]
    for (key, cells), (_, old_cells) in zip(got, expected):
        if new.layout.parse_row_key(key).base_time_s != DAY:
            assert cells == old_cells  # the hours not written to: the very bytes


KILLED_WRITER = """
import json, sys
from app.tsdb import hour_cache
from app.tsdb.compaction import compact_table
from app.tsdb.hour_strip import HourStrip
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb
real = hour_cache.clock_ms
hour_cache.clock_ms = lambda: real() + 60_000  # the hours settled: their columns are kept
config, day, hours = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tsdb = make_tsdb(config)
client = app_over(tsdb).test_client()
strip = HourStrip(tsdb, pause_s=0)
for k in range(10_000):  # late points into closed, stripped hours; compaction; a read
    ts = day + (k % hours) * 3600 + 10 * (k // hours) + 5
    assert not any(PointWriter(tsdb).write([DataPoint("m", ts, k + 0.5, {"host": "a"})]))
    print(ts, k + 0.5, flush=True)
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    assert client.get(f"/api/query?start={day}&end={day + hours * 3600 - 1}"
                      "&m=sum:1m-avg:m").status_code == 200
    strip.run_once()
"""


def test_a_process_killed_while_it_strips_and_restores_loses_nothing(
        tmp_path: Path, settled: None) -> None:
    """kill -9 of a process writing late points into stripped hours, compacting them and
    keeping them again, at some moment: every cell reads, every acknowledged point is there."""
    tsdb = _open(tmp_path, "killed.db", True)
    assert not any(PointWriter(tsdb).write(_points()))
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    _answers(app_over(tsdb).test_client())
    table = stripping_table(tsdb)
    assert table is not None
    strip_all(table)  # `pytsd compact`'s way, no lease: the child's job takes it
    assert _stripped(tsdb) > 0
    with subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, json.dumps(dict(tsdb.config)), str(DAY),
             str(HOURS)], cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
            text=True) as child:
        assert child.stdout is not None
        acknowledged = [child.stdout.readline() for _ in range(8)]
        time.sleep(0.3)  # somewhere in a compaction, a strip or a restore
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    assert all(acknowledged), "the writer stopped before it was killed"
    reopened = _open(tmp_path, "killed.db", True)
    _cells(reopened)  # every cell reads (a stripped one from its hour's column)
    reply = app_over(reopened).test_client().get(
        f"/api/query?start={DAY}&end={DAY + HOURS * 3600 - 1}&m=sum:m{{host=a}}")
    dps = reply.get_json()[0]["dps"]
    for line in acknowledged:
        ts, value = line.split()
        assert dps[ts] == float(value)
    expected = {point.timestamp: point.value for point in _points()
                if point.tags == {"host": "a"}}
    assert all(dps[str(ts)] == value for ts, value in expected.items())


def test_one_process_of_two_strips_under_the_lease(twins: Twins) -> None:
    """Two processes' jobs over one store: the lease's holder strips, the other waits."""
    _answers(twins.clients[0])
    first, second = HourStrip(twins.one, pause_s=0), HourStrip(twins.one, pause_s=0)
    assert first.run_once().cells_stripped >= HOURS * 4
    _answers(twins.clients[0])
    twins.write([DataPoint("m", DAY + 5, 1.0, {"host": "a"})])  # the first hour whole again
    twins.compact()
    _answers(twins.clients[0])  # its column kept again, its cells whole
    held = second.run_once()
    assert held.held_by_other and held.cells_stripped == 0
    assert first.run_once().cells_stripped > 0


def test_the_server_strips_in_its_own_thread(tmp_path: Path, settled: None) -> None:
    """A server (create_app) with a short interval: its background thread strips the hours
    its first read kept, no other step."""
    config = {"tsd.storage": f"sqlite:///{tmp_path / 'served.db'}",
              "tsd.core.auto_create_metrics": True, "tsd.query.cache.max_bytes": 0,
              "tsd.storage.sqlite.one_copy.interval_s": 1}
    tsdb = make_tsdb(config)
    assert not any(PointWriter(tsdb).write(_points()))
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    client = create_app(config).test_client()
    answers = _answers(client)
    deadline = time.monotonic() + 30
    # The pass commits an hour at a time: wait for its end, not its first hour.
    while _stripped(tsdb) < HOURS * 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _stripped(tsdb) >= HOURS * 4
    assert _answers(client) == answers


def test_pytsd_compact_strips_the_kept_hours(tmp_path: Path, settled: None) -> None:
    from click.testing import CliRunner

    from app.cli import main

    tsdb = _open(tmp_path, "cli.db", True)
    assert not any(PointWriter(tsdb).write(_points()))
    compact_table(tsdb.data_table(), tsdb.layout, now_s=2**31)
    _answers(app_over(tsdb).test_client())
    assert _stripped(tsdb) == 0
    result = CliRunner().invoke(main, ["compact"], catch_exceptions=False, env={
        "TSD_STORAGE": tsdb.config["tsd.storage"], "TSD_CONFIG": ""})
    assert "one copy:" in result.output, result.output
    assert _stripped(tsdb) >= HOURS * 4
