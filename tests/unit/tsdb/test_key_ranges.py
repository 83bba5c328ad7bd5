"""The key ranges a literal filter narrows a scan to (``read.keys.salt_ranges``): rows hold
their tags sorted by tag key UID, so a row with ``tagk=v`` starts its tags with that pair or
with a lower tag key; OpenTSDB assigns UIDs from 1, so below UID 1 there is none."""

from __future__ import annotations

from app.storage.codec import RowKeyLayout
from app.tsdb.read.keys import UidConstraint, salt_ranges

METRIC = bytes.fromhex("00016b")
HOUR = 1795849200  # 0x6B0A7BF0
NEXT = HOUR + 3600  # 0x6B0A8A00


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_a_literal_on_the_first_tag_key_assigned_needs_no_lower_range() -> None:
    narrow = UidConstraint(h("000001"), False, frozenset({h("00000c")}))
    assert salt_ranges(RowKeyLayout(), b"", METRIC, HOUR, NEXT, narrow, 3600) == [
        (h("00016b 6B0A7BF0 000001 00000c"), h("00016b 6B0A7BF0 000001 00000d")),
        (h("00016b 6B0A8A00 000001 00000c"), h("00016b 6B0A8A00 000001 00000d"))]


def test_a_literal_on_a_later_tag_key_scans_the_lower_ones_too() -> None:
    narrow = UidConstraint(h("000002"), False, frozenset({h("0000ff"), h("000003")}))
    assert salt_ranges(RowKeyLayout(), b"", METRIC, HOUR, HOUR, narrow, 3600) == [
        (h("00016b 6B0A7BF0"), h("00016b 6B0A7BF0 000002")),
        (h("00016b 6B0A7BF0 000002 000003"), h("00016b 6B0A7BF0 000002 000004")),
        (h("00016b 6B0A7BF0 000002 0000ff"), h("00016b 6B0A7BF0 000002 0001"))]  # 00ff + 1: 01
