"""Tag filters narrowed on the region servers (``with_row_regex``, ``key_regex``) on a real
HBase: the regexp keeps every row the byte-level test keeps, whatever bytes the UIDs hold (the
filter language decodes keys as UTF-8), drops the others where the UIDs' bytes tell them apart,
and a query answers the same with ``tsd.storage.hbase.scan_filters`` on and off."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.storage import codec
from app.storage.base import ROW_REGEX, RowRegex, able
from app.tsdb import TSDB
from app.tsdb.read.key_regex import row_key_regex
from app.tsdb.read.keys import UidConstraint, passes
from tests.conftest import app_over, backend_config, drop_tables, make_tsdb

LAYOUT = codec.RowKeyLayout()
METRIC = b"\x00\x00\x01"
HOUR_S = 1_700_000_000 // 3600 * 3600
# UID bytes that trouble a regexp or its trip through the filter language and UTF-8:
# metacharacters, a quote, a backslash before E, NUL, lone and valid multi-byte sequences.
AWKWARD = [b"\x00\x00\x01", b"\x00'\\", b"\\E'", b"\x00\x00\x00", b"\xff\xff\xff",
           b"\x00\xc3\xa9", b"\xc3\xa9\x00", b"\x00\x00\xc8", b"\xe2\x82\xac", b"\xf0\x9f\x98",
           b"\x80\x80\x80", b".*$", b"\xed\xa0\x80", b"\x00\x00\xe0", b"(?)", b"\x00\xf4\x90"]


@pytest.fixture
def hbase(tmp_path: Path) -> Iterator[TSDB]:
    tsdb = make_tsdb(backend_config("hbase", tmp_path))
    yield tsdb
    drop_tables(tsdb)


def row_keys(rng: random.Random, uids: list[bytes], count: int) -> list[bytes]:
    keys = set()
    for _ in range(count):
        tagks = sorted(rng.sample(uids, rng.randint(1, 3)))
        tags = [(tagk, rng.choice(uids)) for tagk in tagks]
        keys.add(LAYOUT.row_key(METRIC, HOUR_S + 3600 * rng.randint(0, 2), tags))
    return sorted(keys)


def scanned(table: Any, regex: str) -> set[bytes]:
    filtered = table.with_row_regex(regex)
    return {key for key, _ in filtered.scan(row_prefix=METRIC)}


def test_the_regexp_keeps_every_row_the_constraints_keep(hbase: TSDB) -> None:
    table = able(hbase.data_table(), ROW_REGEX)
    assert table is not None
    rng = random.Random(27)
    uids = AWKWARD + [bytes(rng.randrange(256) for _ in range(3)) for _ in range(16)]
    keys = row_keys(rng, uids, 600)
    hbase.data_table().put_many((key, {b"t:\x00\x00": b"\x01"}) for key in keys)
    cases = [[UidConstraint(uid, False, None)] for uid in AWKWARD]
    for _ in range(60):
        tagks = sorted(rng.sample(uids, rng.randint(1, 2)))
        cases.append([UidConstraint(tagk, False, frozenset(rng.sample(uids, rng.randint(1, 3))))
                      for tagk in tagks])
    narrowed = 0
    for constraints in cases:
        regex = row_key_regex(LAYOUT, constraints)
        assert regex is not None
        wanted = {key for key in keys if passes(LAYOUT, key, constraints)}
        got = scanned(table, regex)
        assert wanted <= got, (constraints, regex, sorted(wanted - got))
        narrowed += len(got) < len(keys)
    assert narrowed > len(cases) * 3 // 4  # it narrows, not only keeps everything


def test_ascii_uids_are_narrowed_exactly(hbase: TSDB) -> None:
    table = able(hbase.data_table(), ROW_REGEX)
    assert table is not None
    host, dc = b"\x00\x00\x02", b"\x00\x00\x01"
    keys = [LAYOUT.row_key(METRIC, HOUR_S, [(dc, b"\x00\x00" + bytes([d])), (host, v)])
            for d in (0x10, 0x11) for v in (b"\x00\x00\x05", b"\x00\x00\x06", b"\x00\x01\x05")]
    hbase.data_table().put_many((key, {b"t:\x00\x00": b"\x01"}) for key in keys)
    constraints = [UidConstraint(host, False, frozenset({b"\x00\x00\x05"})),
                   UidConstraint(dc, False, None)]
    regex = row_key_regex(LAYOUT, constraints)
    assert regex is not None
    assert scanned(table, regex) == {keys[0], keys[3]}
    # the stamp scans (KeyOnlyFilter AND the regexp) and scan_many narrow the same way
    filtered = table.with_row_regex(regex)
    assert {row[0] for row in filtered.scan_stamps(METRIC, None, "t")} == {keys[0], keys[3]}
    ranges = [(METRIC, METRIC + b"\xff"), (b"\x00", METRIC)]
    assert {key for key, _ in filtered.scan_many(ranges, [b"t"])} == {keys[0], keys[3]}


def test_with_scan_filters_off_the_tables_do_not_offer_it(tmp_path: Path) -> None:
    tsdb = make_tsdb(backend_config("hbase", tmp_path,
                                    {"tsd.storage.hbase.scan_filters": False}))
    try:
        table = tsdb.data_table()
        assert able(table, ROW_REGEX) is None
        assert not isinstance(table, RowRegex)  # declared exactly when it has it
    finally:
        drop_tables(tsdb)


def test_answers_are_the_same_with_scan_filters_on_and_off(tmp_path: Path) -> None:
    answers = []
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True})
    tsdb = make_tsdb(config)
    try:
        client = app_over(tsdb).test_client()
        points = [{"metric": "rx.cpu", "timestamp": HOUR_S + 10 * step, "value": step + host,
                   "tags": {"host": f"web{host:03d}", "dc": f"dc{host % 3}"}}
                  for host in range(150) for step in range(3)]
        assert client.post("/api/put", json=points).status_code == 204
        for on in (True, False, True):
            tsdb.store.scan_filters = on  # type: ignore[attr-defined]
            answers.append([client.get(
                f"/api/query?start={HOUR_S}&end={HOUR_S + 3599}&m={m}").get_json()
                for m in ("none:rx.cpu{host=web140}", "sum:rx.cpu{host=web140|web007,dc=*}",
                          "sum:rx.cpu{dc=dc2}", "sum:rx.cpu{host=regexp(web00.),dc=dc1}")])
    finally:
        drop_tables(tsdb)
    assert answers[0] == answers[1] == answers[2]
    assert [len(answer) for answer in answers[0]] == [1, 2, 1, 3]  # web001, web004, web007
    assert answers[0][0][0]["dps"] == {str(HOUR_S + 10 * s): 140 + s for s in range(3)}


def test_a_pushed_down_wildcard_counts_only_the_rows_of_its_series(tmp_path: Path) -> None:
    """docs/differences.md: with the values a wildcard matches in the regexp, the rows of the
    series it excludes never reach pytsd (OpenTSDB counts them); without, they are counted."""
    config = backend_config("hbase", tmp_path, {"tsd.core.auto_create_metrics": True,
                                                "tsd.query.cache.max_bytes": 0})
    tsdb = make_tsdb(config)
    try:
        client = app_over(tsdb).test_client()
        points = [{"metric": "rx.w", "timestamp": HOUR_S + 3600 * hour, "value": 1,
                   "tags": {"host": host}} for host in ("a1", "a2", "b1") for hour in range(3)]
        assert client.post("/api/put", json=points).status_code == 204
        url = (f"/api/query?start={HOUR_S}&end={HOUR_S + 3 * 3600 - 1}"
               "&m=sum:rx.w{host=wildcard(a*)}&show_summary=true")
        rows = []
        for on in (True, False):
            tsdb.store.scan_filters = on  # type: ignore[attr-defined]
            summary = client.get(url).get_json()[-1]["statsSummary"]
            rows.append(summary["queryIdx_00"]["rowsScanned"])
    finally:
        drop_tables(tsdb)
    assert rows == [6, 9]  # 2 of 3 hosts x 3 hours; every host x 3 hours
