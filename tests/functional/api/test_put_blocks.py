"""/api/put's usual bodies (50 points over a few series) go to the embedded store as blocks:
after the merge each hour row is ONE compacted cell of OpenTSDB's form, its points the values
put, a point sent again in a later body replacing the earlier one. HBase takes no blocks and
keeps a cell per point, as OpenTSDB writes them. Expected bytes are written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from flask.testing import FlaskClient

from app.cli import main
from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB

T0 = 1356998400  # 2013-01-01T00:00:00Z, 0x50E22700
# put.blocks host=h0..h4: metric UID 1, tagk 1, tagv 1..5 in order of first appearance.
ROWS = [f"000001{T0:08x}000001{s + 1:06x}" for s in range(5)]
MS_195_5 = T0 * 1000 + 195_500  # 195.5 s into the hour


def point(host: int, timestamp: int, value: Any) -> dict[str, Any]:
    return {"metric": "put.blocks", "timestamp": timestamp, "value": value,
            "tags": {"host": f"h{host}"}}


# Collector order: each timestamp's points of every series in turn.
FIRST = [point(s, T0 + 10 * i, 10 * s + i) for i in range(10) for s in range(5)]
SECOND = [point(s, T0 + 10 * i, 10 * s + i) for i in range(10, 19) for s in range(5)] + [
    point(0, T0, 300),         # h0 at +0 s again: 300 (2 bytes) replaces 0 (1 byte)
    point(1, T0 + 30, -5),     # h1 at +30 s again, the same width: -5 replaces 13
    point(2, T0 + 190, 1.5),   # an HTTP float: an 8-byte double
    point(3, MS_195_5, 7),     # milliseconds beside seconds
    point(4, T0, 44),          # h4 at +0 s again: 44 replaces 40
]


def post(client: FlaskClient, body: list[dict[str, Any]]) -> None:
    assert len(body) == 50
    response = client.post("/api/put", data=json.dumps(body))
    assert response.status_code == 204, response.get_data(as_text=True)


def expected_dps(host: int) -> dict[str, float]:
    """What a query returns for ``host`` (ms keys): the points as put, the later ones winning."""
    dps: dict[int, float] = {}
    for body_point in FIRST + SECOND:
        if body_point["tags"]["host"] == f"h{host}":
            timestamp = body_point["timestamp"]
            dps[timestamp if timestamp > 10**10 else timestamp * 1000] = body_point["value"]
    return {str(ts): value for ts, value in sorted(dps.items())}


def cells_by_row(tsdb: TSDB, tmp_path: Path) -> dict[str, dict[str, str]]:
    """The data table's cells, hex: ``pytsd cells`` on the embedded store (another process's
    read merges the staged blocks), a scan on HBase."""
    if isinstance(tsdb.store, SqliteStore):
        env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'tsdb.db'}", "TSD_CONFIG": ""}
        result = CliRunner().invoke(main, ["cells", "tsdb"], env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        out: dict[str, dict[str, str]] = {}
        for cell in map(json.loads, result.output.splitlines()):
            out.setdefault(cell["row"].upper(), {})[cell["qualifier"].upper()] = \
                cell["value"].upper()
        return out
    return {row.hex().upper(): {column[2:].hex().upper(): value.hex().upper()
                                for column, value in cells.items()}
            for row, cells in tsdb.data_table().scan()}


def test_put_bodies_merge_into_one_compacted_cell_per_row(client: FlaskClient, tsdb: TSDB,
                                                         tmp_path: Path) -> None:
    post(client, FIRST)
    post(client, SECOND)
    rows = cells_by_row(tsdb, tmp_path)
    assert sorted(rows) == [row.upper() for row in ROWS]
    h0 = rows[ROWS[0].upper()]
    # h0: +0 s 300 (qualifier 0x0001: flags 1, a 2-byte int), then +10 s .. +180 s the values
    # 1..18 (1-byte ints, qualifiers (10 i) << 4).
    later = "".join(f"{(10 * i) << 4:04X}" for i in range(1, 19))
    if isinstance(tsdb.store, SqliteStore):
        # One compacted cell: the qualifiers in time order, the values, the meta byte 0.
        assert h0 == {"0001" + later: "012C" + "".join(f"{i:02X}" for i in range(1, 19)) + "00"}
        assert all(len(cells) == 1 for cells in rows.values())
        # h3: its ms point among second ones: 0xF0000000 | 195500 << 6, meta byte 1 (mixed).
        ((qualifier, value),) = rows[ROWS[3].upper()].items()
        assert "F0BEEB00" in qualifier and value.endswith("0701")
    else:  # HBase: a cell per point, the earlier +0 s cell (0x0000) beside the later one
        assert h0 == {"0000": "00", "0001": "012C",
                      **{f"{(10 * i) << 4:04X}": f"{i:02X}" for i in range(1, 19)}}
    for host in range(5):
        response = client.get(f"/api/query?start={T0}&end={T0 + 3599}&ms"
                              f"&m=sum:put.blocks{{host=h{host}}}")
        assert response.status_code == 200, response.get_data(as_text=True)
        ((series),) = response.get_json()
        assert series["dps"] == expected_dps(host), host
