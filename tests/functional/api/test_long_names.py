"""Names too long for the store are a 400 before any UID is assigned, on both backends.

A name is the row key of its UID forward mapping, and HBase refuses row keys over 32,767
bytes: that used to surface as a 500 after MAXID had moved (an orphan reverse mapping).
``tsd.core.max_name_bytes`` (1,024 by default) caps names for puts and ``/api/uid/assign``
alike; raised past HBase's limit, the store's own limit still answers 400.
"""

from __future__ import annotations

import json
from typing import Any

from app.tsdb import TSDB

HUGE = "n" * 40_000  # over HBase's 32,767-byte row keys


def _no_uid_moved(tsdb: TSDB) -> None:
    assert [tsdb.uids[kind].max_id() for kind in ("metrics", "tagk", "tagv")] == [0, 0, 0]
    assert not [row for row, _ in tsdb.uid_table().scan() if len(row) > 1024]


def test_assign_honours_max_name_bytes(make_client: Any) -> None:
    client = make_client({})
    tsdb: TSDB = client.application.extensions["tsdb"]
    response = client.post("/api/uid/assign", data=json.dumps({"metric": ["n" * 1025]}))
    assert response.status_code == 400
    assert response.get_json() == {"metric": {}, "metric_errors": {"n" * 1025: (
        "Invalid metric name: 1025 bytes, more than the 1024 allowed "
        "(tsd.core.max_name_bytes)")}}
    _no_uid_moved(tsdb)


def test_names_past_the_row_key_limit_are_a_400(make_client: Any) -> None:
    client = make_client({"tsd.core.max_name_bytes": 100_000,
                          "tsd.core.auto_create_metrics": True})
    tsdb: TSDB = client.application.extensions["tsdb"]
    response = client.post("/api/uid/assign", data=json.dumps({"tagk": [HUGE]}))
    assert response.status_code == 400
    message = response.get_json()["tagk_errors"][HUGE]
    assert message.startswith('Invalid tagk name ("nnn') and message.endswith(
        "40000 bytes, more than the 32767 a UID table row key can hold")
    point = {"metric": "m", "timestamp": 1400000000, "value": 1, "tags": {"host": "a"}}
    for bad in ({**point, "metric": HUGE}, {**point, "tags": {HUGE: "a"}},
                {**point, "tags": {"host": HUGE}}):
        response = client.post("/api/put?details", data=json.dumps(bad))
        assert response.status_code == 400, response.get_data(as_text=True)[:300]
        error = response.get_json()["errors"][0]["error"]
        assert "a UID table row key can hold" in error
    assert client.post("/api/put", data=json.dumps(point)).status_code == 204
    assert tsdb.metrics.max_id() == 1  # "m" only
