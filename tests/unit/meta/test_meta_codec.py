"""The meta cells byte for byte as OpenTSDB 2.4 writes them. Expected values are written by hand
from TSMeta#getStorageJSON, UIDMeta#getStorageJSON and Jackson's bean order, and checked against
what OpenTSDB 2.4.1's own classes print (opentsdb-2.4.1.jar, Jackson 2.9.5, JDK 17): the TSMeta
API string below, custom map included, is that output (scripts/opentsdb/MetaJsonProbe.java)."""

from __future__ import annotations

import math

from app.meta.codec import (
    TSMeta,
    UIDMeta,
    counter_bytes,
    counter_value,
    java_double,
    ts_meta_from_storage,
    tsuid_of_row,
    uid_meta_column,
    uid_meta_from_storage,
)

TSUID = "000001000001000001"


def test_ts_meta_storage_json_of_a_new_series() -> None:
    # new TSMeta(tsuid, created).storeNew(): every user field at its default, NaN quoted.
    assert TSMeta(tsuid=TSUID, created=1350425579).storage_json() == (
        b'{"tsuid":"000001000001000001","displayName":"","description":"","notes":"",'
        b'"created":1350425579,"custom":null,"units":"","dataType":"","retention":0,'
        b'"max":"NaN","min":"NaN"}')


def test_ts_meta_storage_json_with_every_field() -> None:
    meta = TSMeta(tsuid=TSUID, display_name="CPU", description="d\n\"q\"", notes="\x01",
                  created=5, custom={"c": "1", "d": "2"}, units="%", data_type="gauge",
                  retention=30, max=100.0, min=1e-5)
    # "d" hashes to bucket 0 and "c" to bucket 3 of the 4-bucket HashMap: d first.
    assert meta.storage_json() == (
        b'{"tsuid":"000001000001000001","displayName":"CPU","description":"d\\n\\"q\\"",'
        b'"notes":"\\u0001","created":5,"custom":{"d":"2","c":"1"},"units":"%",'
        b'"dataType":"gauge","retention":30,"max":100.0,"min":1.0E-5}')


def test_uid_meta_storage_json_and_column() -> None:
    meta = UIDMeta(kind="metrics", uid="000001", name="sys.cpu.0", created=1350425579)
    assert meta.storage_json() == (b'{"type":"METRIC","displayName":"","description":"",'
                                   b'"notes":"","created":1350425579,"custom":null}')
    assert uid_meta_column("metrics") == b"name:metric_meta"
    assert uid_meta_column("tagk") == b"name:tagk_meta"
    assert uid_meta_column("tagv") == b"name:tagv_meta"
    tagv = UIDMeta(kind="tagv", uid="000002", name="web01", custom={"a": "b"})
    assert tagv.storage_json() == (b'{"type":"TAGV","displayName":"","description":"",'
                                   b'"notes":"","created":0,"custom":{"a":"b"}}')


def test_ts_meta_api_json_as_opentsdb_prints_it() -> None:
    metric = UIDMeta(kind="metrics", uid="000001", name="sys.cpu.0")
    meta = TSMeta(tsuid=TSUID, created=1350425579, custom={"c": "1", "d": "2"}, metric=metric,
                  tags=[])
    assert meta.api_json() == (
        '{"tsuid":"000001000001000001","metric":{"uid":"000001","type":"METRIC",'
        '"name":"sys.cpu.0","description":"","notes":"","created":0,"custom":null,'
        '"displayName":""},"tags":[],"description":"","notes":"","created":1350425579,'
        '"custom":{"d":"2","c":"1"},"units":"","retention":0,"max":"NaN","min":"NaN",'
        '"displayName":"","dataType":"","lastReceived":0,"totalDatapoints":0}')


def test_api_json_orders() -> None:
    metric = UIDMeta(kind="metrics", uid="000001", name="m")
    assert metric.api_json() == ('{"uid":"000001","type":"METRIC","name":"m","description":"",'
                                 '"notes":"","created":0,"custom":null,"displayName":""}')
    meta = TSMeta(tsuid="000001", created=7, last_received=9, total_dps=3, metric=metric,
                  tags=[])
    assert meta.api_json() == (
        '{"tsuid":"000001","metric":' + metric.api_json() + ',"tags":[],"description":"",'
        '"notes":"","created":7,"units":"","retention":0,"max":"NaN","min":"NaN",'
        '"displayName":"","dataType":"","lastReceived":9,"totalDatapoints":3}')


def test_counter_cell() -> None:
    assert counter_bytes(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert counter_value(b"\x00\x00\x00\x00\x00\x00\x01\x00") == 256
    assert counter_value(b"\x01") == 0


def test_tsuid_of_a_salted_row() -> None:
    row = b"\x02" + b"\x00\x00\x01" + b"\x50\xe2\x27\x00" + b"\x00\x00\x01\x00\x00\x02"
    assert tsuid_of_row(row, 1, 3) == b"\x00\x00\x01\x00\x00\x01\x00\x00\x02"


def test_reading_what_opentsdb_stored() -> None:
    raw = (b'{"tsuid":"","displayName":"x","description":"","notes":"","created":12,'
           b'"custom":null,"units":"","dataType":"","retention":0,"max":"NaN","min":2.5}')
    meta = ts_meta_from_storage(raw, TSUID)
    assert (meta.tsuid, meta.display_name, meta.created, meta.min) == (TSUID, "x", 12, 2.5)
    assert math.isnan(meta.max)
    uid = uid_meta_from_storage("tagk", "000003", "host", b'{"type":"TAGK","notes":"n"}')
    assert (uid.name, uid.notes, uid.custom, uid.created) == ("host", "n", None, 0)


def test_java_double() -> None:
    assert [java_double(v) for v in (0.0, 1.5, 1e-5, 12345678.0, 1e22, -0.001, math.inf)] == [
        "0.0", "1.5", "1.0E-5", "1.2345678E7", "1.0E22", "-0.001", '"Infinity"']
