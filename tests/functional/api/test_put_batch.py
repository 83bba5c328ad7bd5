"""/api/put of many points in one request (the per-batch path: one loop over the body's
points, ``codec_bulk.encode_cells``, hour rows kept per series): OpenTSDB's cells, byte for
byte, written by hand from its format; a bad point in the middle is reported with
OpenTSDB's details while the others are stored."""

from __future__ import annotations

import json
from typing import Any

from flask.testing import FlaskClient

from app.storage.sqlite import SqliteStore
from app.tsdb import TSDB

# sys.cpu.user host=a and host=b: the metric and tags get UIDs 1, 1 and 1 / 2 in order.
# 1356998400 (2013-01-01T00:00:00Z) is 0x50E22700; 1357002000 (an hour later) 0x50E23510.
ROW_A = "000001" "50E22700" "000001" "000001"
ROW_B_NEXT_HOUR = "000001" "50E23510" "000001" "000002"


def point(timestamp: int, value: Any, host: str = "a") -> dict[str, Any]:
    return {"metric": "sys.cpu.user", "timestamp": timestamp, "value": value,
            "tags": {"host": host}}


BATCH = [
    point(1356998400, 42),                 # 1-byte int: qualifier 0x0000
    point(1356998401, 1.5),                # HTTP put: every float an 8-byte double, flags 0xF
    point(1356998402, "notanumber"),       # refused, in the middle
    point(1356998403500, 300),             # ms: 0xF0000000 | 3500 << 6 | flags 1
    point(1356998404, 70000),              # 4-byte int, flags 3
    point(1356998405, -2),                 # 1-byte two's complement
    point(1357002000, 2**40, host="b"),    # the next hour's row, 8-byte long, flags 7
    {"metric": "sys.cpu.user", "timestamp": 1356998406, "value": 1,
     "tags": {"host": ["a"]}},             # a tag value that is not a string: refused
]

EXPECTED_CELLS = sorted([
    (ROW_A, "743A0000", "2A"),
    (ROW_A, "743A001F", "3FF8000000000000"),
    (ROW_A, "743AF0036B01", "012C"),
    (ROW_A, "743A0043", "00011170"),
    (ROW_A, "743A0050", "FE"),
    (ROW_B_NEXT_HOUR, "743A0007", "0000010000000000"),
])


# The embedded store's merge writes a row's points of a batch as ONE compacted cell: the
# qualifiers in time order, the values, the meta byte 0x01 (seconds and milliseconds mixed).
# A row of one point keeps its single cell.
EXPECTED_EMBEDDED = sorted([
    (ROW_A, "743A" "0000" "001F" "F0036B01" "0043" "0050",
     "2A" "3FF8000000000000" "012C" "00011170" "FE" "01"),
    (ROW_B_NEXT_HOUR, "743A0007", "0000010000000000"),
])


def data_cells(tsdb: TSDB) -> list[tuple[str, str, str]]:
    return sorted((row.hex().upper(), column.hex().upper(), value.hex().upper())
                  for row, cells in tsdb.data_table().scan() for column, value in cells.items())


def put(client: FlaskClient, points: list[Any], query: str = "") -> Any:
    return client.post(f"/api/put{query}", data=json.dumps(points))


def test_a_batch_writes_opentsdbs_cells_and_reports_its_bad_points(
        client: FlaskClient, tsdb: TSDB) -> None:
    response = put(client, BATCH, "?details")
    assert response.status_code == 400
    assert response.get_json() == {"success": 6, "failed": 2, "errors": [
        {"datapoint": {"metric": "sys.cpu.user", "timestamp": 1356998402,
                       "value": "notanumber", "tags": {"host": "a"}},
         "error": "Unable to parse value to a number"},
        {"datapoint": {"metric": "sys.cpu.user", "timestamp": 1356998406, "value": "1",
                       "tags": {"host": ["a"]}},
         # as pytsd always answered it: the value's text, refused by the name check
         "error": "Invalid tag value with key [host] (\"['a']\"): illegal character: ["}]}
    assert data_cells(tsdb) == (EXPECTED_EMBEDDED if isinstance(tsdb.store, SqliteStore)
                                else EXPECTED_CELLS)


def test_a_known_series_takes_the_same_checks(client: FlaskClient, tsdb: TSDB) -> None:
    """Once the writer knows host=a, its points skip the name checks: a point whose tag value
    is a number (OpenTSDB stores its text) or whose metric is not a string is still judged
    as the first time."""
    assert put(client, [point(1356998400, 42)]).status_code == 204
    response = put(client, [
        {"metric": "sys.cpu.user", "timestamp": 1356998401, "value": 7, "tags": {"host": 1}},
        {"metric": ["sys.cpu.user"], "timestamp": 1356998402, "value": 7,
         "tags": {"host": "a"}},
        point(1356998403, 8),
    ], "?summary")
    assert (response.status_code, response.get_json()) == (400, {"success": 2, "failed": 1})
    host_1 = "000001" "50E22700" "000001" "000002"  # the tag value "1": the next tagv UID
    # The embedded store merges both requests' points of ROW_A into one compacted cell.
    row_a = [(ROW_A, "743A00000030", "2A0800")] if isinstance(tsdb.store, SqliteStore) else [
        (ROW_A, "743A0000", "2A"), (ROW_A, "743A0030", "08")]
    assert data_cells(tsdb) == sorted([*row_a, (host_1, "743A0010", "07")])
