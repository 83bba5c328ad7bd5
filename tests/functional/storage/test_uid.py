"""UID assignment and lookup, OpenTSDB's layout in tsdb-uid, on every backend."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from app.config import load_config
from app.errors import BadRequestError, NoSuchUniqueName, UidExhaustedError
from app.tsdb import TSDB
from app.tsdb.uid import validate_name
from tests.conftest import make_tsdb


def test_first_metric_gets_000001_with_forward_reverse_and_maxid_cells(tsdb: TSDB) -> None:
    assert tsdb.metrics.get_or_create_id("sys.cpu.nice") == b"\x00\x00\x01"
    table = tsdb.uid_table()
    # UniqueId.java: forward row = name, family id; reverse row = uid, family name;
    # MAXID row 0x00 holds the counter as an 8-byte long.
    assert table.row(b"sys.cpu.nice") == {b"id:metrics": b"\x00\x00\x01"}
    assert table.row(b"\x00\x00\x01") == {b"name:metrics": b"sys.cpu.nice"}
    assert table.row(b"\x00") == {b"id:metrics": (1).to_bytes(8, "big")}


def test_kinds_count_separately_and_lookups_round_trip(tsdb: TSDB) -> None:
    assert tsdb.metrics.get_or_create_id("a") == b"\x00\x00\x01"
    assert tsdb.metrics.get_or_create_id("b") == b"\x00\x00\x02"
    assert tsdb.tagk.get_or_create_id("host") == b"\x00\x00\x01"
    assert tsdb.metrics.get_or_create_id("a") == b"\x00\x00\x01"
    tsdb.drop_caches()
    assert tsdb.metrics.get_name(b"\x00\x00\x02") == "b"
    assert tsdb.tagk.get_id("host") == b"\x00\x00\x01"


def test_unknown_name_is_opentsdb_message(tsdb: TSDB) -> None:
    with pytest.raises(NoSuchUniqueName, match=r"No such name for 'metrics': 'nope'"):
        tsdb.metrics.get_id("nope")


def test_suggest_is_sorted_prefix_limited(tsdb: TSDB) -> None:
    for name in ["sys.mem", "sys.cpu.user", "net.in", "sys.cpu.nice"]:
        tsdb.metrics.get_or_create_id(name)
    tsdb.tagk.get_or_create_id("sys.is.not.a.metric")
    assert tsdb.metrics.suggest("sys.", 25) == ["sys.cpu.nice", "sys.cpu.user", "sys.mem"]
    assert tsdb.metrics.suggest("", 2) == ["net.in", "sys.cpu.nice"]


def test_width_overflow_is_a_clear_error(tsd_config: dict[str, Any]) -> None:
    tsdb = make_tsdb({**tsd_config, "tsd.storage.uid.width.tagv": 1})
    for number in range(255):
        tsdb.tagv.get_or_create_id(f"v{number}")
    with pytest.raises(UidExhaustedError, match="All Unique IDs for tagv on 1 bytes"):
        tsdb.tagv.get_or_create_id("one.too.many")


@pytest.mark.parametrize(("name", "message"), [
    ("a b", 'Invalid metric ("a b"): illegal character:  '),
    ("", "Invalid metric: empty string"),
    ("cpu#1", 'Invalid metric ("cpu#1"): illegal character: #'),
])
def test_names_are_validated_like_tags_validate_string(name: str, message: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        validate_name("metric", name)
    assert caught.value.message == message


@pytest.mark.parametrize("name", ["sys.cpu-0_1/a", "température", "日本"])
def test_valid_names(name: str) -> None:
    validate_name("metric", name)


def _assign_all(config: dict[str, Any], names: list[str], queue: Any) -> None:
    tsdb = TSDB(load_config(config, environ={}))
    queue.put({name: tsdb.metrics.get_or_create_id(name) for name in names})


def test_concurrent_processes_never_give_one_name_two_uids(
        tsd_config: dict[str, Any], tsdb: TSDB, tmp_path: Path) -> None:
    names = [f"metric.{i}" for i in range(40)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    # Four processes assign overlapping lists in different orders.
    orders = [names, names[::-1], names[10:] + names[:10], names[::2] + names[1::2]]
    workers = [context.Process(target=_assign_all, args=(tsd_config, order, queue))
               for order in orders]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    for name in names:
        assert len({result[name] for result in results}) == 1, name
    uids = [results[0][name] for name in names]
    assert len(set(uids)) == len(names)
    tsdb.drop_caches()
    for name, uid in zip(names, uids):
        assert tsdb.metrics.get_name(uid) == name


def test_a_uid_already_taken_in_reverse_is_skipped_as_opentsdb_does(tsdb: TSDB) -> None:
    """A reverse row for a UID MAXID has not given out yet (a damaged table, e.g. MAXID
    restored from an old backup): the reverse check-and-put fails, that UID is burned and
    the next one taken; the squatter's row is left alone for fsck."""
    table = tsdb.uid_table()
    table.put(b"\x00\x00\x01", {b"name:tagv": b"squatter"})
    assert tsdb.tagv.get_or_create_id("web01") == b"\x00\x00\x02"
    assert (tsdb.tagv.ids_created, tsdb.tagv.ids_burned) == (1, 1)
    assert table.row(b"\x00\x00\x01") == {b"name:tagv": b"squatter"}
    assert table.row(b"\x00\x00\x02") == {b"name:tagv": b"web01"}
    assert tsdb.tagv.max_id() == 2


def test_a_name_assigned_elsewhere_since_the_lookup_costs_no_uid(
        tsd_config: dict[str, Any], tsdb: TSDB) -> None:
    """This process looked ``web01`` up (no UID), then another process assigned it: a miss
    is not remembered, so this process finds the other's UID and takes none."""
    assert tsdb.tagv.find_id("web01") is None
    other = make_tsdb(tsd_config)
    assert other.tagv.get_or_create_id("web01") == b"\x00\x00\x01"
    other.close()
    assert tsdb.tagv.get_or_create_id("web01") == b"\x00\x00\x01"
    assert (tsdb.tagv.ids_created, tsdb.tagv.ids_burned, tsdb.tagv.max_id()) == (0, 0, 1)
