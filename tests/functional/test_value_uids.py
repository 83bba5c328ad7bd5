"""Value filters resolved to tag value UIDs for the scan's row-key regexp
(``app.tsdb.read.value_uids``), on each backend's real UID table."""

from __future__ import annotations

import pytest

from app.query.filters import TagFilter, build_filter, merge_filters
from app.query.parse import parse_metric_and_filters
from app.storage.base import ROW_REGEX, able
from app.tsdb import TSDB
from app.tsdb.read import value_uids
from app.tsdb.read.keys import UidConstraint
from app.tsdb.read.select import resolve


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
    monkeypatch.setattr(value_uids, "MAX_TAG_VALUES", 5)  # there are 5: still resolved
    assert value_uids.with_value_uids(named, filters, constraints)[0].literal_uids is not None
    monkeypatch.setattr(value_uids, "MAX_TAG_VALUES", 4)
    assert value_uids.with_value_uids(named, filters, constraints) == constraints
    # remembered: not scanned again, even were the limit raised
    monkeypatch.setattr(value_uids, "MAX_TAG_VALUES", 5)
    assert value_uids.with_value_uids(named, filters, constraints) == constraints


def test_a_regexp_only_for_a_table_that_can_narrow(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{host=regexp(^web0)}")
    regex = value_uids.scan_regex(named, named.data_table(), filters, constraints)
    assert (regex is None) == (able(named.data_table(), ROW_REGEX) is None)


def test_no_regexp_when_only_keys_must_be_present(named: TSDB) -> None:
    filters, constraints = constraints_of(named, "m{dc=*}{host=not_key()}")
    assert value_uids.scan_regex(named, named.data_table(), filters, constraints) is None
