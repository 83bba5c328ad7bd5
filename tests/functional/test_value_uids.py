"""Value filters resolved to tag value UIDs for the scan's row-key regexp
(``app.tsdb.read.value_uids``), on each backend's real UID table."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.query.filters import TagFilter, build_filter, merge_filters
from app.query.parse import parse_metric_and_filters
from app.storage.base import ROW_REGEX, able
from app.tsdb import TSDB
from app.tsdb.read import value_names, value_uids
from app.tsdb.read.keys import UidConstraint
from app.tsdb.read.select import resolve
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import app_over, make_tsdb

BASE_S = (int(time.time()) // 3600 - 4) * 3600


def constraints_of(tsdb: TSDB, m: str) -> tuple[list[TagFilter], list[UidConstraint]]:
    filters = [build_filter(f) for f in parse_metric_and_filters(m)[1]]
    return filters, resolve(tsdb, merge_filters(filters))


@pytest.fixture
def named(tsdb: TSDB) -> TSDB:
    for name in ("web01", "web02", "db01", "web10"):
        tsdb.tagv.get_or_create_id(name)
    tsdb.tagk.get_or_create_id("host")
    tsdb.tagk.get_or_create_id("dc")
    tsdb.tagk.get_or_create_id("x")
    tsdb.tagv.get_or_create_id("dc1")
    return tsdb


def test_value_filters_become_the_uids_of_the_values_they_match(named: TSDB) -> None:
    filters, constraints = constraints_of(
        named, "m{host=regexp(^web0),dc=*}{x=iwildcard(DB*)}")
    resolved = {c.tagk_uid: c for c in value_uids.with_value_uids(named, filters, constraints)}
    uid, key = named.tagv.get_id, named.tagk.get_id
    assert resolved[key("host")] == UidConstraint(key("host"), False,
                                                  frozenset({uid("web01"), uid("web02")}))
    assert resolved[key("dc")] == UidConstraint(key("dc"), False, None)  # any value
    assert resolved[key("x")].literal_uids == frozenset({uid("db01")})


def test_literals_and_not_key_are_left_as_they_are(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=web01|web02}{dc=not_key()}")
    assert value_uids.with_value_uids(named, filters, constraints) == constraints


def test_too_many_tag_values_leave_the_value_filters_to_the_reader(
        named: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    monkeypatch.setattr(value_names, "MAX_NAMES", 5)  # there are 5: still resolved
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids is not None
    named.tagv.get_or_create_id("web03")
    assert value_uids.with_value_uids(named, filters, constraints) == constraints
    # remembered: not read again, even were the bound raised
    monkeypatch.setattr(value_names, "MAX_NAMES", 6)
    assert value_uids.with_value_uids(named, filters, constraints) == constraints


def test_a_key_matching_more_values_than_a_regexp_takes_is_left_to_the_reader(
        named: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(value_uids, "MAX_REGEX_LITERALS", 1)
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}{x=wildcard(db*)}")
    resolved = {c.tagk_uid: c for c in value_uids.with_value_uids(named, filters, constraints)}
    host, x = named.tagk.get_id("host"), named.tagk.get_id("x")
    assert resolved[host] == UidConstraint(host, False, None)  # web01, web02: more than 1
    assert resolved[x].literal_uids == frozenset({named.tagv.get_id("db01")})


def test_a_query_tests_a_bounded_number_of_names(
        named: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(value_uids, "MATCH_PER_QUERY", 3)
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    # 5 names: 3 tested by the first query (left to the reader), the other 2 by the next
    assert value_uids.with_value_uids(named, filters, constraints) == constraints
    uid = named.tagv.get_id
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("web01"), uid("web02")})


def test_a_large_table_is_read_over_several_queries(
        named: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(value_names, "READ_PER_QUERY", 2)
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    assert value_uids.with_value_uids(named, filters, constraints) == constraints  # 2 of 5
    assert value_uids.with_value_uids(named, filters, constraints) == constraints  # 4 of 5
    uid = named.tagv.get_id
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("web01"), uid("web02")})


def test_names_read_whole_again_serve_the_old_ones_meanwhile(
        named: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    first = value_names.names(named, now=1000.0)
    assert first is not None
    monkeypatch.setattr(value_names, "READ_PER_QUERY", 2)
    named.tagv.get_or_create_id("web08")
    reread_s = 1000.0 + value_names.REREAD_AFTER_S + 1
    for _ in range(2):  # 6 names, 2 a query: the old ones (kept up to date) meanwhile
        served = value_names.names(named, now=reread_s)
        assert served is first and "web08" in served.names
    again = value_names.names(named, now=reread_s)
    assert again is not None and again is not first
    assert sorted(again.names) == ["db01", "dc1", "web01", "web02", "web08", "web10"]


def test_values_created_after_a_read_are_found_by_the_next_query(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    uid = named.tagv.get_id
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("web01"), uid("web02")})
    named.tagv.get_or_create_id("web05")
    named.tagv.get_or_create_id("db05")
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("web01"), uid("web02"), uid("web05")})


def assign_by_hand(tsdb: TSDB, name: str, uid: bytes) -> None:
    """The reverse then the forward row of an assignment whose UID MAXID gave earlier."""
    tsdb.uid_table().put(uid, {b"name:tagv": name.encode()})
    tsdb.uid_table().put(name.encode(), {b"id:tagv": uid})


def test_a_uid_taken_before_a_read_but_named_after_is_found(named: TSDB) -> None:
    """Another writer took a UID from MAXID and had not written its reverse row yet when
    the names were read (a gap): the next query asks for it again."""
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    taken = named.uid_table().counter_inc(b"\x00", b"id:tagv").to_bytes(3, "big")
    named.tagv.get_or_create_id("web06")  # a higher UID, named at once
    before = value_uids.with_value_uids(named, filters, constraints)[0].literal_uids
    assert before is not None and taken not in before
    assert named.tagv.get_id("web06") in before
    assign_by_hand(named, "web07", taken)
    after = value_uids.with_value_uids(named, filters, constraints)[0].literal_uids
    assert after is not None and taken in after


def test_a_gap_is_forgotten_after_a_while(named: TSDB) -> None:
    taken = named.uid_table().counter_inc(b"\x00", b"id:tagv").to_bytes(3, "big")
    first = value_names.names(named, now=1000.0)
    assert first is not None and list(first.gaps) == [int.from_bytes(taken, "big")]
    later = value_names.names(named, now=1000.0 + value_names.GAP_WAIT_S + 1)
    assert later is not None and not later.gaps
    # read whole again (renames elsewhere): the burned UID is not asked for again
    again = value_names.names(named, now=1000.0 + value_names.REREAD_AFTER_S + 1)
    assert again is not None and again is not later and not again.gaps
    assert sorted(again.names) == ["db01", "dc1", "web01", "web02", "web10"]


def test_a_rename_here_is_seen_at_once(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^db)}")
    uid = named.tagv.get_id
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("db01")})
    web01 = uid("web01")
    named.tagv.rename("web01", "db09", "tsdb-uid")
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids == \
        frozenset({uid("db01"), web01})


def test_a_rename_elsewhere_is_seen_once_the_names_are_read_again(
        tsd_config: dict[str, Any], named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^db)}")
    first = value_names.names(named, now=1000.0)
    assert first is not None and "db09" not in first.names
    elsewhere = make_tsdb(tsd_config)  # another process: its own UID caches
    try:
        elsewhere.tagv.rename("web01", "db09", "tsdb-uid")
    finally:
        elsewhere.close()
    soon = value_names.names(named, now=1000.0 + value_names.REREAD_AFTER_S - 1)
    assert soon is not None and "db09" not in soon.names  # the bound documented
    later = value_names.names(named, now=1000.0 + value_names.REREAD_AFTER_S + 1)
    assert later is not None and "db09" in later.names and "web01" not in later.names


MANY = 1050  # more tag values than the 1,024 the names were once read up to


@pytest.fixture
def many(tsdb: TSDB) -> TSDB:
    """Series m{host=h0000} .. m{host=h1049}, each one point whose value is its number."""
    errors = PointWriter(tsdb).write([DataPoint("m", BASE_S, i, {"host": f"h{i:04d}"})
                                      for i in range(MANY)])
    assert not any(errors), errors
    return tsdb


def test_over_a_thousand_values_resolve(many: TSDB) -> None:
    filters, constraints = constraints_of(many, "m{host=regexp(^h0(01|10)7$)}")
    resolved = value_uids.with_value_uids(many, filters, constraints)
    uid = many.tagv.get_id
    assert resolved[0].literal_uids == frozenset({uid("h0017"), uid("h0107")})
    regex = value_uids.scan_regex(many, many.data_table(), filters, constraints)
    assert (regex is None) == (able(many.data_table(), ROW_REGEX) is None)


def test_a_regexp_query_over_many_values_returns_exactly_its_series(many: TSDB) -> None:
    client = app_over(many).test_client()
    for _ in range(2):  # the names read, then kept
        response = client.get(f"/api/query?start={BASE_S}&end={BASE_S + 60}"
                              "&m=sum:m{host=regexp(^h0(01|10)7$|^h1049$)}")
        assert response.status_code == 200, response.get_data(as_text=True)
        got = {r["tags"]["host"]: r["dps"] for r in response.get_json()}
        assert got == {"h0017": {str(BASE_S): 17}, "h0107": {str(BASE_S): 107},
                       "h1049": {str(BASE_S): 1049}}


def test_a_regexp_only_for_a_table_that_can_narrow(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    regex = value_uids.scan_regex(named, named.data_table(), filters, constraints)
    assert (regex is None) == (able(named.data_table(), ROW_REGEX) is None)


def test_no_regexp_when_only_keys_must_be_present(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{dc=*}{host=not_key()}")
    assert value_uids.scan_regex(named, named.data_table(), filters, constraints) is None


def test_a_series_of_a_value_created_after_a_query_is_in_the_next(tsdb: TSDB) -> None:
    def write(host: str, value: int) -> None:
        assert not any(PointWriter(tsdb).write([DataPoint("m", BASE_S, value, {"host": host})]))

    def hosts() -> dict[str, Any]:
        response = client.get(f"/api/query?start={BASE_S}&end={BASE_S + 60}"
                              "&m=sum:m{host=regexp(^web)}")
        assert response.status_code == 200, response.get_data(as_text=True)
        return {r["tags"]["host"]: r["dps"] for r in response.get_json()}

    client = app_over(tsdb).test_client()
    write("web01", 1)
    write("db01", 2)
    assert hosts() == {"web01": {str(BASE_S): 1}}
    write("web02", 3)  # a tag value UID above every one read so far
    assert hosts() == {"web01": {str(BASE_S): 1}, "web02": {str(BASE_S): 3}}
