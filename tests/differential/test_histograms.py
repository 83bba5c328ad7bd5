"""Histograms against the real OpenTSDB 2.4.1, both directions (``/api/histogram``, telnet
``histogram``, ``percentiles`` and ``show-histogram-buckets`` queries).

Two OpenTSDB TSDs with the simple-bucket codec configured (compaction off) serve two table sets:
O, loaded through OpenTSDB's own ``/api/histogram`` and telnet ``histogram``, and P, loaded the
same way through pytsd's. Every query is answered by OpenTSDB over O (the reference), pytsd over
P and over O, and OpenTSDB over P. The stored cells of O and P must be the same bytes, and
OpenTSDB's fsck must find no error in P.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from app.storage.codec_histogram import SimpleHistogram, encode_simple
from tests.differential.cells import data_points, differences
from tests.differential.compare import compare
from tests.differential.departures import DEPARTURES
from tests.differential.oracle import OpenTSDB, opentsdb_settings, stop_all
from tests.differential.queries import Case
from tests.differential.test_differential import PytsdClient, _hbase

SEED = 20240101
START = 1356998400  # 2013-01-01T00:00:00Z
CODECS = '{"net.opentsdb.core.SimpleHistogramDecoder": 0}'
BOUNDS = [(0.0, 1.0), (1.0, 2.5), (2.5, 5.0), (5.0, 10.0), (10.0, 100.0)]
HOSTS, DCS = ("web01", "web02", "db01"), ("lga", "sjc")
# Millisecond points only in series of their own: OpenTSDB 2.4 iterates a row's histogram
# cells in qualifier byte order, so a row mixing second and millisecond points comes out of
# order (docs/differences.md, "Histogram points in time order"); pytsd sorts them.
METRICS = ("h.latency", "h.size", "h.ms")


@dataclass
class HistogramData:
    http: list[dict[str, Any]]  # /api/histogram bodies, in batches
    telnet: list[str]           # telnet lines
    bad: list[dict[str, Any]]   # points each server must refuse, one request each


def build(seed: int) -> HistogramData:
    rnd = random.Random(seed)
    http: list[dict[str, Any]] = []
    for metric in METRICS:
        for host in HOSTS:
            dc = DCS[HOSTS.index(host) % 2]
            for step in range(40):
                ts = START + step * 45 + rnd.randrange(0, 30)
                if metric == "h.ms":  # see MIXED_RESOLUTION
                    ts = ts * 1000 + rnd.randrange(1, 999)
                bounds = BOUNDS if metric == "h.latency" or host != "db01" else BOUNDS[1:4]
                counts = {f"{lo:g},{hi:g}": rnd.randrange(0, 50) for lo, hi in bounds}
                point: dict[str, Any] = {"metric": metric, "timestamp": ts,
                                         "tags": {"host": host, "dc": dc}}
                if rnd.random() < 0.3:  # the codec's bytes in base64, with the codec id
                    histogram = SimpleHistogram(0)
                    for (lo, hi), count in zip(bounds, counts.values()):
                        histogram.add_bucket(lo, hi, count)
                    histogram.overflow = rnd.randrange(0, 3)
                    point |= {"id": 0, "value": base64.b64encode(
                        encode_simple(histogram, include_id=False)).decode()}
                else:
                    point |= {"buckets": counts, "underflow": rnd.randrange(0, 3),
                              "overflow": rnd.randrange(0, 3)}
                http.append(point)
    for step in range(30):  # one series mixing second and millisecond points in its rows
        ts = START + step * 100
        http.append({"metric": "h.mixed", "timestamp": ts * 1000 + 250 if step % 2 else ts,
                     "tags": {"host": "web01"}, "buckets": {"0,1": step, "1,2": 30 - step}})
    telnet = [f"histogram h.telnet {START + i * 60} u=1:o=2:0,1={i}:1,5={2 * i}:5,10=3 "
              f"host=web0{i % 2}" for i in range(1, 20)]
    telnet += [f"histogram h.telnet {START + 2000 + i} 0 "
               f"{base64.b64encode(encode_simple(_one(i), include_id=False)).decode()} "
               "host=web01" for i in range(5)]
    bad = [
        {"metric": "h.latency", "timestamp": START, "tags": {"host": "web01"}},
        {"metric": "h.latency", "timestamp": START, "buckets": {"0,1": 1}},
        {"metric": "h.latency", "timestamp": START, "tags": {"host": "web01"},
         "buckets": {"0-1": 1}},
        {"metric": "h.latency", "timestamp": START, "tags": {"host": "web01"},
         "value": "AAEAAAAAP4AAAAEAAA==", "id": 300},
        {"metric": "h.latency", "timestamp": START, "tags": {"host": "web01"},
         "value": "AAEAAAAAP4AAAAEAAA==", "id": 7},
        {"metric": "h.latency", "timestamp": 0, "tags": {"host": "web01"},
         "buckets": {"0,1": 1}},
        {"metric": "h.latency", "timestamp": START, "tags": {"host": "web 01"},
         "buckets": {"0,1": 1}},
        {"metric": "h.latency", "timestamp": 13569984000000, "tags": {"host": "web01"},
         "buckets": {"0,1": 1}},
    ]
    return HistogramData(http, telnet, bad)


def _one(i: int) -> SimpleHistogram:
    histogram = SimpleHistogram(0)
    histogram.add_bucket(0, 10, i)
    histogram.add_bucket(10, 20, 5 - i)
    return histogram


def queries() -> list[tuple[str, str, Any]]:
    """(method, path, body) of every request compared."""
    out: list[tuple[str, str, Any]] = []
    subs = []
    for metric in (*METRICS, "h.telnet"):
        for aggregator in ("sum", "none"):
            for downsample in (None, "1m-sum", "5m-sum", "1hc-sum"):  # 0all: ALL_DOWNSAMPLER
                for group in ({}, {"tags": {"host": "*"}}, {"filters": [
                        {"type": "literal_or", "tagk": "host", "filter": "web01|db01",
                         "groupBy": False}]}):
                    sub: dict[str, Any] = {"metric": metric, "aggregator": aggregator,
                                           **group}
                    if downsample:
                        sub["downsample"] = downsample
                    subs.append(sub)
    rnd = random.Random(SEED)
    for i, sub in enumerate(subs):
        picked = rnd.choice([[50], [10, 50, 90, 99.9], [0.5, 100], [75, 25], []])
        sub = {**sub, "percentiles": picked} if picked else dict(sub)
        if not picked or i % 3 == 0:
            sub["showHistogramBuckets"] = True
        start, end = (START, START + 3600) if i % 4 else (START + 600, START + 1500)
        out.append(("POST", "/api/query", {"start": start, "end": end, "queries": [sub],
                                           "msResolution": i % 5 == 0}))
    base = f"/api/query?start={START}&end={START + 3600}&m="
    for m in ("sum:percentiles[50,95]:h.latency{dc=*}",
              "none:1m-sum:percentiles[99]:show-histogram-buckets:h.size{host=web01}",
              "sum:10m-sum:show-histogram-buckets:h.telnet",
              "sum:h.latency", "sum:1m-avg:h.latency",  # numeric queries skip histogram cells
              "avg:percentiles[50]:h.latency", "sum:1m-avg:percentiles[50]:h.latency",
              "sum:percentiles[101]:h.latency", "sum:percentiles(5):h.latency"):
        out.append(("GET", base + m, None))
    return out


class _Telnet:
    """OpenTSDB's telnet port: lines in, whatever it answers within a short wait out."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def send(self, lines: list[str]) -> str:
        self.sock.sendall("".join(line + "\n" for line in lines).encode())
        time.sleep(1.0)
        self.sock.settimeout(0.5)
        chunks = []
        try:
            while chunk := self.sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks).decode()

    def close(self) -> None:
        self.sock.close()


def _telnet_pytsd(client: PytsdClient, lines: list[str]) -> str:
    from app.lineproto.session import TelnetSession

    app = client.client.application
    reply, _ = TelnetSession(app, "test").handle_lines([line.encode() for line in lines])
    return reply.decode()


@dataclass
class Setup:
    data: HistogramData
    writer: OpenTSDB
    reader: OpenTSDB
    own: PytsdClient
    foreign: PytsdClient
    loads: dict[str, Any]


def _load(server: Any, data: HistogramData) -> dict[str, Any]:
    """Loads ``data``; returns each answer that is compared between the servers."""
    answers: dict[str, Any] = {}
    status, text = server.request("POST", "/api/uid/assign", json.dumps(
        {"metric": [*METRICS, "h.telnet", "h.mixed"], "tagk": ["host", "dc"],
         "tagv": [*HOSTS, *DCS, "web00"]}))
    assert status == 200, text
    for i in range(0, len(data.http), 50):
        status, text = server.request("POST", "/api/histogram?details&sync",
                                      json.dumps(data.http[i:i + 50]))
        assert status == 200, text
    for i, point in enumerate(data.bad):
        answers[f"bad {i}"] = server.request("POST", "/api/histogram?details&sync",
                                             json.dumps(point))
    return answers


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    thrift = _hbase()
    run = uuid.uuid4().hex[:8]
    prefix_o, prefix_p = f"histo{run}o_", f"histo{run}p_"
    settings = opentsdb_settings(0, False, compaction=False) | {
        "tsd.core.histograms.config": CODECS}
    writer = OpenTSDB("histo-writer", prefix_o, thrift, settings)
    reader = OpenTSDB("histo-reader", prefix_p, thrift, settings)
    pytsd = {"tsd.storage": f"hbase://{thrift}", "tsd.core.histograms.config": CODECS,
             "tsd.core.auto_create_metrics": True}
    data = build(SEED)
    own = foreign = None
    try:
        own = PytsdClient({**pytsd, "tsd.storage.hbase.table_prefix": prefix_p})
        with ThreadPoolExecutor(2) as pool:  # two JVMs start at once: half the wait
            list(pool.map(OpenTSDB.start, (writer, reader)))
        loads = {"opentsdb": _load(writer, data), "pytsd": _load(own, data)}
        telnet = _Telnet(writer.port)
        loads["opentsdb"]["telnet"] = telnet.send(data.telnet)
        telnet.close()
        loads["pytsd"]["telnet"] = _telnet_pytsd(own, data.telnet)
        time.sleep(1.5)  # OpenTSDB's telnet writes are flushed asynchronously
        foreign = PytsdClient({**pytsd, "tsd.storage.hbase.table_prefix": prefix_o})
        yield Setup(data, writer, reader, own, foreign, loads)
    finally:
        stop_all((reader, writer))
        if own is not None:
            own.close()
        if foreign is not None:
            foreign.close()


def test_bad_points_refused_alike(setup: Setup) -> None:
    for name, reference in setup.loads["opentsdb"].items():
        if name.startswith("bad"):
            got = setup.loads["pytsd"][name]
            assert reference[0] == got[0], (name, reference, got)
            errors = [[e["error"] for e in json.loads(a[1])["errors"]] for a in (reference, got)]
            assert errors[0] == errors[1], name


def test_telnet_answers_alike(setup: Setup) -> None:
    assert setup.loads["opentsdb"]["telnet"] == setup.loads["pytsd"]["telnet"] == ""


def test_queries_both_directions(setup: Setup) -> None:
    cases = queries()
    failures = []
    for method, path, body in cases:
        text = None if body is None else json.dumps(body)
        reference = setup.writer.request(method, path, text)
        assert reference[0] in (200, 400), reference
        for who, server in (("pytsd/own", setup.own), ("pytsd/opentsdb-written", setup.foreign),
                            ("opentsdb/pytsd-written", setup.reader)):
            found = compare(reference, server.request(method, path, text))
            if found:
                failures.append(f"{who} {method} {path} {text}: {found[:4]}")
    series = sum(len(json.loads(setup.writer.request(m, p, None if b is None
                                                      else json.dumps(b))[1]))
                 for m, p, b in cases[:20])
    print(f"\nhistograms: {len(cases)} requests x 3 answers compared, {len(failures)} differ "
          f"({series} series in the first 20 answers)")
    assert not failures, "\n".join(failures[:20])


def test_cells_hold_the_same_bytes(setup: Setup) -> None:
    reference = data_points(setup.foreign.tsdb.store, "tsdb")
    own = data_points(setup.own.tsdb.store, "tsdb")
    histogram_cells = [k for k in own if k[1].startswith(b"col:\x06")]
    assert len(histogram_cells) > 200
    found = differences(reference, own)
    assert not found, found[:10]


def test_fsck_clean_on_pytsd_tables(setup: Setup) -> None:
    assert setup.reader.fsck_errors() == 0


def test_all_downsampler_departure(setup: Setup) -> None:
    """``0all-sum``: OpenTSDB 2.4.1 answers no point (the departure declared in
    departures.py); pytsd answers the sum of the range at the query start."""
    departure = {d.name: d for d in DEPARTURES}["opentsdb-histogram-all-downsampler"]
    for sub in ({"percentiles": [50, 90]}, {"showHistogramBuckets": True}):
        query = {"metric": "h.latency", "aggregator": "sum", "downsample": "0all-sum", **sub}
        body = json.dumps({"start": START, "end": START + 3600, "queries": [query]})
        assert departure.applies(Case("all", "histogram", "POST", "/api/query", body, [query]),
                                 [])
        status, text = setup.writer.request("POST", "/api/query", body)
        assert status == 200
        assert all(not series["dps"] for series in json.loads(text))
        status, text = setup.own.request("POST", "/api/query", body)
        assert status == 200
        assert all(list(series["dps"]) == [str(START)] for series in json.loads(text))


def test_mixed_resolution_departure(setup: Setup) -> None:
    """A row mixing second and millisecond points: OpenTSDB 2.4.1 answers them in qualifier
    byte order (docs/differences.md, "Histogram points in time order"); pytsd in time order,
    the same points and values."""
    body = json.dumps({"start": START, "end": START + 3600, "msResolution": True, "queries": [
        {"metric": "h.mixed", "aggregator": "sum", "percentiles": [50]}]})
    answers = [json.loads(server.request("POST", "/api/query", body)[1])[0]["dps"]
               for server in (setup.writer, setup.own, setup.foreign)]
    reference, own, foreign = answers
    assert list(reference) != sorted(reference, key=int)
    assert list(own) == sorted(own, key=int) and own == reference and foreign == reference
