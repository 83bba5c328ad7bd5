"""TelnetSession over a real store (both backends): OpenTSDB's answers, and every good point
readable through /api/query with the bytes OpenTSDB's telnet put writes."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.lineproto.session import TelnetSession
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB
from tests.conftest import app_over, make_tsdb

T0 = 1356998400


@pytest.fixture
def session(app: Flask) -> TelnetSession:
    return TelnetSession(app, "127.0.0.1:5555")


def send(session: TelnetSession, *lines: str) -> tuple[str, bool]:
    reply, close = session.handle_lines([line.encode() for line in lines])
    return reply.decode(), close


def query(client: FlaskClient, metric: str, tags: str = "") -> list[dict[str, Any]]:
    response = client.get(f"/api/query?start={T0 - 1}&end={T0 + 7200}&m=sum:{metric}{tags}")
    assert response.status_code == 200, response.get_json()
    return list(response.get_json())


def data_cells(tsdb: TSDB) -> list[tuple[str, str]]:
    return [(col.hex().upper(), val.hex().upper())
            for _, cells in tsdb.data_table().scan() for col, val in cells.items()]


def test_good_and_bad_lines(session: TelnetSession, client: FlaskClient) -> None:
    reply, close = send(session,
                        f"put sys.cpu.user {T0} 42 host=web01 cpu=0",
                        f"put sys.cpu.user {T0 + 10} x host=web01 cpu=0",
                        "put sys.cpu.user",
                        f"put sys.cpu.user {T0 + 20} 1.5 host=web01 cpu=0",
                        f"put sys.cpu.user {T0}000 7 host=web02 cpu=0",
                        f"put bad/name! {T0} 1 host=web01",
                        "put sys.cpu.user 13569984000000 1 host=web01 cpu=0",
                        f"put sys.cpu.user {T0 + 30} 2.5 host=web01 cpu=0")
    assert not close
    assert reply == (
        "put: invalid value: Invalid character 'x' in x\n"
        "put: illegal argument: not enough arguments (need least 4, got 1)\n"
        "put: illegal argument: Invalid metric name (\"bad/name!\"): illegal character: !\n"
        "put: illegal argument: bad timestamp=13569984000000 when trying to add value=[1]/0 "
        "to metric=sys.cpu.user, tags={host=web01, cpu=0}\n")
    [web01] = query(client, "sys.cpu.user", "{host=web01}")
    assert web01["dps"] == {str(T0): 42, str(T0 + 20): 1.5, str(T0 + 30): 2.5}
    [web02] = query(client, "sys.cpu.user", "{host=web02}")
    assert web02["dps"] == {str(T0): 7}


def test_telnet_floats_take_4_bytes_where_they_fit(session: TelnetSession, tsdb: TSDB) -> None:
    # PutDataPointRpc: fitsInFloat -> addPoint(float), else addPoint(double).
    assert send(session, f"put m {T0 + 1} 1.5 a=b", f"put m {T0 + 2} 1.1 a=b",
                f"put m {T0 + 3} 3 a=b") == ("", False)
    # Columns are b"t:" (743A) + qualifier: offset << 4 | flags (0x8 float, 0x3/0x7 length).
    if isinstance(tsdb.store, SqliteStore):  # the merge: one compacted cell, meta byte 0
        assert data_cells(tsdb) == [("743A001B002F0030", "3FC00000" "3FF199999999999A" "03"
                                                         "00")]
    else:
        assert sorted(data_cells(tsdb)) == [("743A001B", "3FC00000"),
                                            ("743A002F", "3FF199999999999A"),
                                            ("743A0030", "03")]


def test_commands(session: TelnetSession) -> None:
    assert send(session, "help") == (
        "available commands: stats dropcaches version exit help put rollup histogram \n", False)
    version, _ = send(session, "version")
    first, second, end = version.split("\n")
    assert first.startswith("pytsd 2.4.1 built at revision pytsd-") and first.endswith("(MINT)")
    assert second.startswith("Built on ") and end == ""
    assert send(session, "PUT m 1 1 a=b", "diediedie") == (
        "unknown command: PUT.  Try `help'.\nunknown command: diediedie.  Try `help'.\n", False)
    assert send(session, "rollup 1h-sum m 1 1 a=b") == (
        "rollup: illegal argument: rollup data points are not supported by pytsd (use put)\n",
        False)
    assert send(session, "histogram m 1 AAA= a=b")[0].startswith("histogram: illegal argument")
    assert send(session, "dropcaches") == ("Caches dropped.\n", False)
    assert send(session, "", "   ") == ("", False)


def test_stats_lines(session: TelnetSession) -> None:
    send(session, f"put m {T0} 1 a=b")
    stats, _ = send(session, "stats")
    lines = stats.splitlines()
    assert all(len(line.split()) >= 4 for line in lines)
    added = [line for line in lines if line.startswith("tsd.datapoints.added ")]
    assert len(added) == 1 and int(added[0].split()[2]) >= 1


def test_exit_stores_the_puts_before_it_and_ignores_the_rest(session: TelnetSession,
                                                             client: FlaskClient) -> None:
    assert send(session, f"put m {T0} 1 a=b", "put m", "exit", f"put m {T0 + 1} 2 a=b") == (
        "put: illegal argument: not enough arguments (need least 4, got 1)\n", True)
    [series] = query(client, "m")
    assert series["dps"] == {str(T0): 1}


def test_answers_keep_the_order_of_the_lines(session: TelnetSession) -> None:
    reply, _ = send(session, f"put m {T0} x a=b", "dropcaches", f"put m {T0} 1 a")
    assert reply == ("put: invalid value: Invalid character 'x' in x\nCaches dropped.\n"
                     "put: illegal argument: invalid tag: a\n")


def test_unknown_metric_without_auto_create(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.core.auto_create_metrics": False})
    session = TelnetSession(app_over(tsdb), "peer")
    assert send(session, f"put nope {T0} 1 a=b") == (
        "put: unknown metric: No such name for 'metrics': 'nope'\n", False)
    assert list(tsdb.uid_table().scan()) == []  # no tagk/tagv assigned for the refused point


def test_read_only_mode_has_no_put(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.mode": "ro"})
    session = TelnetSession(app_over(tsdb), "peer")
    assert send(session, "help", f"put m {T0} 1 a=b") == (
        "available commands: stats version exit help \n"
        "unknown command: put.  Try `help'.\n", False)
