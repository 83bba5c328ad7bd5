"""Compatibility with OpenTSDB's bytes on a real HBase, both ways.

1. pytsd writes (``/api/put``, ``/api/annotation``, ``pytsd create-tables``) and the raw cells
   are read back with happybase alone, bypassing pytsd's storage layer.
2. Cells in OpenTSDB's format are written with happybase alone (salted keys, 4-byte UIDs,
   millisecond qualifiers, a compacted column, an append column, an annotation) and read
   through pytsd's ``/api/query``.

Every expected byte and value is written by hand from OpenTSDB 2.4's format (see the grammar in
``app/storage/codec.py`` and the comments below); none is computed with pytsd's code.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import happybase
import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from app.cli import main
from app.storage.hbase import HBaseStore
from app.tsdb import TSDB
from tests import golden
from tests.conftest import app_over, backend_config, drop_tables, hbase_address, make_tsdb

NICE = {"metric": "sys.cpu.nice", "timestamp": 1346846400, "value": 18,
        "tags": {"host": "web01"}}
# Salt width 1 over 20 buckets and 4-byte UIDs everywhere (tsd.storage.uid.width.*).
SALTED = {"tsd.storage.salt.width": 1, "tsd.storage.salt.buckets": 20,
          "tsd.storage.uid.width.metric": 4, "tsd.storage.uid.width.tagk": 4,
          "tsd.storage.uid.width.tagv": 4}
HOUR_S = 1356998400  # 2013-01-01 00:00:00 UTC = 0x50E22700
HOUR = bytes.fromhex("50E22700")
NEXT_HOUR = bytes.fromhex("50E23510")  # HOUR_S + 3600
METRIC, HOST, WEB01, WEB02 = (bytes.fromhex(h) for h in (
    "00000001", "00000001", "00000001", "00000002"))
# RowKey.prefixKeyWithSalt: |Arrays.hashCode(metric + tags) % 20|. Over the 12 bytes
# 00000001 00000001 0000000v, hashCode = 31^12 + 31^8 + 31^4 + v (mod 2^32, signed):
# v=1 -> -2099933948 -> salt 8; v=2 -> -2099933947 -> salt 7.
SALT_WEB01, SALT_WEB02 = b"\x08", b"\x07"
TSUID_WEB01 = "000000010000000100000001"


@pytest.fixture
def raw() -> Iterator[happybase.Connection]:
    """A plain happybase connection, independent of pytsd's adapter."""
    address = hbase_address()
    if not address:
        pytest.skip("needs a real HBase: TSD_TEST_HBASE=host:port (run `make hbase-up`)")
    host, _, port = address.rpartition(":")
    connection = happybase.Connection(host, int(port), timeout=30_000)
    yield connection
    connection.close()


@pytest.fixture
def hbase_app(tmp_path: Path) -> Iterator[Callable[..., tuple[Flask, TSDB, str]]]:
    """Build apps over fresh HBase table sets: ``(app, tsdb, table_prefix)``."""
    made: list[TSDB] = []

    def build(**settings: Any) -> tuple[Flask, TSDB, str]:
        config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True,
                                                    **settings})
        tsdb = make_tsdb(config)
        made.append(tsdb)
        app = app_over(tsdb)
        return app, tsdb, config["tsd.storage.hbase.table_prefix"]

    yield build
    for tsdb in made:
        drop_tables(tsdb)


def raw_cells(raw: happybase.Connection, table: str) -> list[tuple[bytes, bytes, bytes]]:
    return [(row, column, value) for row, cells in raw.table(table).scan()
            for column, value in sorted(cells.items())]


# --- pytsd writes, happybase reads ---------------------------------------------------------


def test_create_tables_makes_opentsdbs_tables_and_families(raw: happybase.Connection) -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    env = {"TSD_STORAGE": f"hbase://{hbase_address()}", "TSD_CONFIG": "",
           "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix}
    try:
        first = CliRunner().invoke(main, ["create-tables"], env=env, catch_exceptions=False)
        again = CliRunner().invoke(main, ["create-tables"], env=env, catch_exceptions=False)
        assert first.output == "created: tsdb-uid, tsdb, tsdb-tree, tsdb-meta\n"
        assert again.output == "all tables exist\n"
        # create_table.sh: tsdb-uid {id, name}, tsdb {t, VERSIONS 1}, tsdb-tree {t, VERSIONS 1},
        # tsdb-meta {name}; BLOOMFILTER ROW; COMPRESSION GZ by default here (the codec every
        # HBase loads); no TTL; HBase's other defaults.
        expected = {"tsdb-uid": [b"id", b"name"], "tsdb": [b"t"], "tsdb-tree": [b"t"],
                    "tsdb-meta": [b"name"]}
        for name, families in expected.items():
            described = raw.table(prefix + name).families()
            assert sorted(described) == families, name
            for options in described.values():
                assert (options["max_versions"], options["bloom_filter_type"],
                        options["compression"], options["block_cache_enabled"],
                        options["time_to_live"]) == (1, b"ROW", b"GZ", True, 2**31 - 1)
    finally:
        host, _, port = str(hbase_address()).rpartition(":")
        HBaseStore(host, int(port), prefix).drop_tables()


def test_create_tables_takes_create_table_shs_options(raw: happybase.Connection) -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    env = {"TSD_STORAGE": f"hbase://{hbase_address()}", "TSD_CONFIG": "",
           "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix, "TSD_STORAGE_HBASE_BLOOM_FILTER": "ROWCOL"}
    try:
        # Flags over settings; GZIP is create_table.sh's spelling of HBase's GZ.
        result = CliRunner().invoke(main, ["create-tables", "--compression", "gzip",
                                           "--ttl", "86400"], env=env, catch_exceptions=False)
        assert result.output == "created: tsdb-uid, tsdb, tsdb-tree, tsdb-meta\n"
        data = raw.table(prefix + "tsdb").families()[b"t"]
        assert (data["compression"], data["bloom_filter_type"], data["time_to_live"]) == (
            b"GZ", b"ROWCOL", 86400)
        # The TTL is the data table's only (TSDB_TTL); the UID table keeps every mapping.
        uid = raw.table(prefix + "tsdb-uid").families()[b"id"]
        assert (uid["compression"], uid["bloom_filter_type"], uid["time_to_live"]) == (
            b"GZ", b"ROWCOL", 2**31 - 1)
    finally:
        host, _, port = str(hbase_address()).rpartition(":")
        HBaseStore(host, int(port), prefix).drop_tables()


def test_create_tables_reports_a_codec_hbase_cannot_load() -> None:
    prefix = f"c{uuid.uuid4().hex[:10]}_"
    env = {"TSD_STORAGE": f"hbase://{hbase_address()}", "TSD_CONFIG": "",
           "TSD_STORAGE_HBASE_TABLE_PREFIX": prefix}
    try:
        # The project's HBase has no LZO codec (hadoop-gpl-compression): one line, no trace.
        result = CliRunner().invoke(main, ["create-tables", "--compression", "LZO"], env=env)
        assert result.exit_code == 1
        assert result.output.startswith(f"Error: HBase failed to create table {prefix}tsdb-uid")
        assert "lzo" in result.output.lower() and "Traceback" not in result.output
        unknown = CliRunner().invoke(main, ["create-tables", "--compression", "ZIP"], env=env)
        assert unknown.exit_code == 1
        assert "Invalid value for tsd.storage.hbase.compression: 'ZIP'" in unknown.output
    finally:
        host, _, port = str(hbase_address()).rpartition(":")
        HBaseStore(host, int(port), prefix).drop_tables()


def test_put_writes_opentsdbs_golden_cells(hbase_app: Callable[..., Any],
                                           raw: happybase.Connection) -> None:
    app, _, prefix = hbase_app()
    assert app.test_client().post("/api/put", data=json.dumps(NICE)).status_code == 204
    assert raw_cells(raw, prefix + "tsdb") == [
        (golden.PUT_ROW, b"t:" + golden.PUT_QUALIFIER, golden.PUT_VALUE)]
    assert set(raw_cells(raw, prefix + "tsdb-uid")) == golden.PUT_UID_CELLS


def test_salted_appends_with_ms_and_4_byte_uids(hbase_app: Callable[..., Any],
                                                raw: happybase.Connection) -> None:
    app, _, prefix = hbase_app(**SALTED, **{"tsd.storage.enable_appends": True})
    points = [{"metric": "sys.cpu.user", "timestamp": HOUR_S + 10, "value": 2,
               "tags": {"host": "web01"}},
              {"metric": "sys.cpu.user", "timestamp": (HOUR_S + 20) * 1000 + 500, "value": 3,
               "tags": {"host": "web01"}}]
    assert app.test_client().post("/api/put", data=json.dumps(points)).status_code == 204
    # Append column 0x050000 = entries (qualifier value) in write order: 00A0 02 (10 s, 1-byte
    # int), F0140500 03 (0xF0000000 | 20500 ms << 6, 1-byte int).
    row = SALT_WEB01 + METRIC + HOUR + HOST + WEB01
    assert raw_cells(raw, prefix + "tsdb") == [
        (row, b"t:\x05\x00\x00", bytes.fromhex("00A002" "F014050003"))]


def test_annotation_is_opentsdbs_storage_json(hbase_app: Callable[..., Any],
                                              raw: happybase.Connection) -> None:
    app, _, prefix = hbase_app(**SALTED)
    client = app.test_client()
    point = {"metric": "sys.cpu.user", "timestamp": HOUR_S, "value": 1,
             "tags": {"host": "web01"}}
    assert client.post("/api/put", data=json.dumps(point)).status_code == 204
    note = {"tsuid": TSUID_WEB01, "startTime": HOUR_S + 10, "description": "deploy"}
    assert client.post("/api/annotation", data=json.dumps(note)).status_code == 200
    row = SALT_WEB01 + METRIC + HOUR + HOST + WEB01
    # Annotation qualifier 0x01 + 2-byte second offset; value Annotation.getStorageJSON().
    assert raw.table(prefix + "tsdb").row(row) == {
        b"t:\x00\x00": b"\x01",
        b"t:\x01\x00\x0a": b'{"tsuid":"000000010000000100000001","startTime":1356998410,'
                           b'"endTime":0,"description":"deploy","notes":"","custom":null}'}


# --- happybase writes OpenTSDB's cells, pytsd reads -----------------------------------------


def write_opentsdb_cells(raw: happybase.Connection, prefix: str) -> None:
    uid = raw.table(prefix + "tsdb-uid")
    uid.put(b"\x00", {b"id:metrics": (1).to_bytes(8, "big"), b"id:tagk": (1).to_bytes(8, "big"),
                      b"id:tagv": (2).to_bytes(8, "big")})
    uid.put(b"sys.cpu.user", {b"id:metrics": METRIC})
    uid.put(b"host", {b"id:tagk": HOST})
    uid.put(b"web01", {b"id:tagv": WEB01})
    uid.put(b"web02", {b"id:tagv": WEB02})
    uid.put(METRIC, {b"name:metrics": b"sys.cpu.user", b"name:tagk": b"host",
                     b"name:tagv": b"web01"})
    uid.put(WEB02, {b"name:tagv": b"web02"})
    data = raw.table(prefix + "tsdb")
    data.put(SALT_WEB01 + METRIC + HOUR + HOST + WEB01, {
        b"t:\x00\x00": b"\x01",                  # +0 s, 1-byte int 1
        b"t:\x00\xa0": b"\x02",                  # +10 s (10 << 4), 1-byte int 2
        b"t:\xf0\x14\x05\x00": b"\x03",          # +20500 ms (0xF0000000 | 20500 << 6): 3
        # compacted: +30 s int 4 (01E0) and +40 s float32 5.5 (0x280 | 0xB), meta byte 00
        b"t:\x01\xe0\x02\x8b": bytes.fromhex("04" "40B00000" "00"),
        # annotation at +10 s: 0x01 + 2-byte offset -> getStorageJSON()
        b"t:\x01\x00\x0a": b'{"tsuid":"000000010000000100000001","startTime":1356998410,'
                           b'"endTime":0,"description":"deploy","notes":"","custom":null}',
    })
    data.put(SALT_WEB01 + METRIC + NEXT_HOUR + HOST + WEB01, {b"t:\x00\x00": b"\x0a"})  # 10
    # Append column, entries out of time order as concurrent appends leave them:
    # +15 s int 8 (00F0 08), +5 s int 7 (0050 07), +25250 ms int 9 (F018A880 09).
    data.put(SALT_WEB02 + METRIC + HOUR + HOST + WEB02,
             {b"t:\x05\x00\x00": bytes.fromhex("00F008" "005007" "F018A88009")})


@pytest.fixture
def opentsdb_data(hbase_app: Callable[..., Any], raw: happybase.Connection) -> FlaskClient:
    app, _, prefix = hbase_app(**SALTED)
    write_opentsdb_cells(raw, prefix)
    client: FlaskClient = app.test_client()
    return client


WEB01_DPS = {"1356998400000": 1, "1356998410000": 2, "1356998420500": 3, "1356998430000": 4,
             "1356998440000": 5.5, "1357002000000": 10}
WEB02_DPS = {"1356998405000": 7, "1356998415000": 8, "1356998425250": 9}
RANGE = f"start={HOUR_S}&end={HOUR_S + 3601}"


def test_query_reads_opentsdbs_raw_cells(opentsdb_data: FlaskClient) -> None:
    response = opentsdb_data.get(
        f"/api/query?{RANGE}&m=sum:sys.cpu.user{{host=*}}&ms=true&show_tsuids=true")
    assert response.status_code == 200, response.get_data(as_text=True)
    by_host = {series["tags"]["host"]: series for series in response.json}
    assert by_host["web01"]["dps"] == WEB01_DPS
    assert by_host["web02"]["dps"] == WEB02_DPS
    assert by_host["web01"]["tsuids"] == [TSUID_WEB01]
    assert by_host["web02"]["tsuids"] == ["000000010000000100000002"]
    [note] = by_host["web01"]["annotations"]
    assert (note["tsuid"], note["description"], note["startTime"]) == (
        TSUID_WEB01, "deploy", HOUR_S + 10)


def test_explicit_tags_and_tsuid_queries_find_the_salted_rows(
        opentsdb_data: FlaskClient) -> None:
    # explicitTags with literal filters and tsuid queries compute exact row keys, salt
    # included: they only find the rows if pytsd salts exactly like OpenTSDB.
    body = {"start": HOUR_S, "end": HOUR_S + 3601, "msResolution": True, "queries": [
        {"aggregator": "sum", "metric": "sys.cpu.user", "explicitTags": True,
         "filters": [{"type": "literal_or", "tagk": "host", "filter": "web02",
                      "groupBy": False}]}]}
    response = opentsdb_data.post("/api/query", data=json.dumps(body))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert [series["dps"] for series in response.json] == [WEB02_DPS]
    response = opentsdb_data.get(f"/api/query?{RANGE}&tsuid=sum:{TSUID_WEB01}&ms=true")
    assert [series["dps"] for series in response.json] == [WEB01_DPS]


def test_suggest_reads_4_byte_uid_rows(opentsdb_data: FlaskClient) -> None:
    assert opentsdb_data.get("/api/suggest?type=tagv&q=web").json == ["web01", "web02"]
    assert opentsdb_data.get("/api/suggest?type=metrics").json == ["sys.cpu.user"]


def test_raw_opentsdb_annotation_is_listed_and_editable(hbase_app: Callable[..., Any],
                                                        raw: happybase.Connection) -> None:
    app, _, prefix = hbase_app(**SALTED)
    write_opentsdb_cells(raw, prefix)
    client: FlaskClient = app.test_client()
    listing = client.get(f"/api/annotation/list?{RANGE}&m=sys.cpu.user{{host=web01}}"
                         "&global=false&q=deploy")
    assert listing.status_code == 200, listing.get_data(as_text=True)
    [note] = listing.json["annotations"]
    assert (note["tsuid"], note["startTime"], note["description"]) == (
        TSUID_WEB01, HOUR_S + 10, "deploy")
    # Edit it the OpenTSDB way (POST merges), then read the very same cell back raw.
    edit = {"tsuid": TSUID_WEB01, "startTime": HOUR_S + 10, "notes": "rolled back"}
    assert client.post("/api/annotation", data=json.dumps(edit)).status_code == 200
    cell = raw.table(prefix + "tsdb").row(SALT_WEB01 + METRIC + HOUR + HOST + WEB01,
                                          columns=[b"t:\x01\x00\x0a"])
    stored = json.loads(cell[b"t:\x01\x00\x0a"])
    assert (stored["description"], stored["notes"]) == ("deploy", "rolled back")
