"""The native HBase client's pure parts: protobuf fields, the filter strings it translates
(and those it leaves to Thrift), a ``KeyValueCodec`` cell block, ZooKeeper's znode data."""

from __future__ import annotations

from typing import Any

import pytest

from app.storage.hbase_native import cellblock, filters, messages, wire, zk


def test_varints_and_fields_round_trip() -> None:
    assert wire.varint(0) == b"\x00"
    assert wire.varint(300) == b"\xac\x02"
    assert wire.read_varint(b"\xac\x02", 0) == (300, 2)
    assert wire.varint(-1) == b"\xff" * 9 + b"\x01"  # an int32 -1 on the wire
    encoded = wire.field_varint(1, 150) + wire.field_bytes(2, b"ab") + wire.field_bool(3, True)
    assert encoded == b"\x08\x96\x01\x12\x02ab\x18\x01"
    assert wire.message(encoded) == {1: [150], 2: [b"ab"], 3: [1]}


def test_filter_strings_pytsd_writes_become_native_filters() -> None:
    # Filter: name 1 (44 bytes: the class), serialized_filter 2 = KeyOnlyFilter: len_as_val 1.
    key_only = b"\n,org.apache.hadoop.hbase.filter.KeyOnlyFilter\x12\x02\x08"
    assert filters.from_filter_string(b"KeyOnlyFilter()") == key_only + b"\x00"
    assert filters.from_filter_string(b"KeyOnlyFilter(true)") == key_only + b"\x01"
    assert filters.from_filter_string(None) is None
    prefixes = filters.from_filter_string(b"MultipleColumnPrefixFilter('\x01''b', 'a')")
    assert prefixes == messages.named_filter(
        "MultipleColumnPrefixFilter", b"\x0a\x03\x01'b" + b"\x0a\x01a")  # sorted, unquoted
    both = filters.from_filter_string(b"KeyOnlyFilter() AND MultipleColumnPrefixFilter('a')")
    assert both == messages.all_filters([key_only + b"\x00", messages.named_filter(
        "MultipleColumnPrefixFilter", b"\x0a\x01a")])
    regex = filters.from_filter_string(b"RowFilter(=, 'regexstring:^a''b')")
    assert regex is not None and b"^a'b" in regex and b"UTF-8" in regex


@pytest.mark.parametrize("text", [
    b"PrefixFilter('a')", b"RowFilter(!=, 'regexstring:a')", b"KeyOnlyFilter() OR KeyOnlyFilter()",
    b"KeyOnlyFilter(", b"MultipleColumnPrefixFilter('a)", b"RowFilter(=, 'binary:a')",
])
def test_other_filter_strings_are_left_to_thrift(text: bytes) -> None:
    with pytest.raises(filters.Unsupported):
        filters.from_filter_string(text)


def cell(row: bytes, family: bytes, qualifier: bytes, stamp_ms: int, value: bytes) -> bytes:
    key = (len(row).to_bytes(2, "big") + row + bytes([len(family)]) + family + qualifier
           + stamp_ms.to_bytes(8, "big") + b"\x04")
    body = len(key).to_bytes(4, "big") + len(value).to_bytes(4, "big") + key + value
    return len(body).to_bytes(4, "big") + body


def test_a_cell_block_is_cut_into_rows() -> None:
    block = (cell(b"r1", b"t", b"\x00\x01", 5, b"\x07")
             + cell(b"r1", b"t", b"\x00\x02", 9, b"\x01\x02\x03\x04")
             + cell(b"row2", b"tt", b"q", 3, b""))
    # The first cell by hand: 26 bytes follow; a key of 17 (2 + 2 row + 1 + 1 family + 2
    # qualifier + 8 stamp + 1 type) and a value of 1.
    assert block[:16] == b"\x00\x00\x00\x1a\x00\x00\x00\x11\x00\x00\x00\x01\x00\x02r1"
    rows = cellblock.rows(block, [2, 1])
    assert [row.row for row in rows] == [b"r1", b"row2"]
    assert rows[0].column_list() == [b"t:\x00\x01", b"t:\x00\x02"]
    assert rows[0].value_list() == [b"\x07", b"\x01\x02\x03\x04"]
    assert rows[0].newest_ms == 9
    assert (rows[1].column_list(), rows[1].value_list(), rows[1].newest_ms) == (
        [b"tt:q"], [b""], 3)
    assert cellblock.rows(b"", []) == []
    with pytest.raises(cellblock.CellBlockError):
        cellblock.rows(block, [2, 2])
    with pytest.raises(cellblock.CellBlockError):
        cellblock.rows(block + b"\x00", [2, 1])


def test_the_meta_region_server_znode_and_the_quorum() -> None:
    server = wire.field_bytes(1, "rs1.example") + wire.field_varint(2, 16020)
    data = b"\xff\x00\x00\x00\x03abc" + b"PBUF" + wire.field_bytes(1, server)
    assert zk.parse_meta_region_server(data) == ("rs1.example", 16020)
    with pytest.raises(zk.ZooKeeperError):
        zk.parse_meta_region_server(b"\x00junk")
    assert zk.parse_quorum("zk1,zk2:2182, zk3") == [("zk1", 2181), ("zk2", 2182), ("zk3", 2181)]
    with pytest.raises(zk.ZooKeeperError):
        zk.parse_quorum(" , ")


def test_region_info_and_columns() -> None:
    info = b"PBUF" + wire.field_varint(1, 7) + wire.field_bytes(3, b"a") + wire.field_bytes(
        4, b"m") + wire.field_bool(6, True)
    assert messages.region_info(info) == (b"a", b"m", True)
    assert messages.columns_message([b"t", b"u:a", b"u:b", b"t:x"]) == (
        wire.field_bytes(1, wire.field_bytes(1, b"t"))
        + wire.field_bytes(1, wire.field_bytes(1, b"u") + wire.field_bytes(2, b"a")
                           + wire.field_bytes(2, b"b")))


def block_of(rows: list[tuple[bytes, list[tuple[bytes, bytes]]]], family: bytes = b"t"
             ) -> tuple[bytes, list[int]]:
    """A cell block of ``rows`` (each cell's stamp: its index in the block) and its cells
    per row."""
    cells, stamp = [], 0
    for row, row_cells in rows:
        for qualifier, value in row_cells:
            cells.append(cell(row, family, qualifier, stamp, value))
            stamp += 1
    return b"".join(cells), [len(row_cells) for _, row_cells in rows]


def singles(count: int, widths: tuple[int, ...]) -> list[tuple[bytes, bytes]]:
    """``count`` cells of one point each: qualifier ``i * 16`` (2 bytes), a value of
    ``widths[i % len(widths)]`` bytes ``i % 256``."""
    return [((i * 16).to_bytes(2, "big"), bytes([i % 256]) * widths[i % len(widths)])
            for i in range(count)]


def as_read(rows: list[Any]) -> list[tuple[bytes, list[bytes], list[bytes], int]]:
    return [(row.row, row.column_list(), row.value_list(), row.newest_ms) for row in rows]


def test_a_block_of_mixed_cells_is_cut_in_bulk_as_the_walk_would() -> None:
    # Key of "row-a": 2 + 5 + 1 + 1 + 2 + 8 + 1 = 20 bytes (0x14). A 12-byte value that reads
    # as such a cell's head (29 = 8 + 20 + 1 bytes follow, a key of 20, a value of 1): a
    # place inside a cell that is no cell.
    fake_head = b"\x00\x00\x00\x1d\x00\x00\x00\x14\x00\x00\x00\x01"
    compacted = (b"\x00\x20\x00\x30\x00\x40", b"\x01\x02\x03\x00")  # 3 points, meta byte
    note = (b"\x01\x00\x00", b'{"description":"x"}')  # an annotation's 3-byte qualifier
    row_a = singles(100, (1, 2, 4, 8))  # values of four lengths, one key length
    row_a[40] = (row_a[40][0], fake_head)
    row_b = [compacted]  # a row of one cell
    row_c = [row_a[0], compacted, note, *row_a[1:70]]  # other shapes among single cells
    row_d = singles(90, (8, 8, 8, 4))  # a key of another length (6-byte row)
    rows = [(b"row-a", row_a), (b"row-b", row_b), (b"row-c", row_c), (b"row-dd", row_d)]
    block, per_row = block_of(rows)
    assert per_row == [100, 1, 72, 90]
    read = cellblock.rows(block, per_row)
    # Stamps: a cell's index in the block, so a row's newest is its last cell's.
    assert as_read(read) == [
        (b"row-a", [b"t:" + q for q, _ in row_a], [v for _, v in row_a], 99),
        (b"row-b", [b"t:\x00\x20\x00\x30\x00\x40"], [b"\x01\x02\x03\x00"], 100),
        (b"row-c", [b"t:" + q for q, _ in row_c], [v for _, v in row_c], 172),
        (b"row-dd", [b"t:" + q for q, _ in row_d], [v for _, v in row_d], 262),
    ]
    assert read[0].value_list()[40] == fake_head
    assert read[2].column_list()[1:3] == [b"t:\x00\x20\x00\x30\x00\x40", b"t:\x01\x00\x00"]
    assert read[3].value_list()[:4] == [b"\x00" * 8, b"\x01" * 8, b"\x02" * 8, b"\x03" * 4]
    assert cellblock._offsets(block, 263).tolist() == cellblock._walk(block, 0, 263)


def test_a_bulk_cut_block_of_values_of_one_length_and_of_several() -> None:
    for widths in ((8,), (4, 8), (1, 1, 2)):
        row = singles(300, widths)
        read = cellblock.rows(*block_of([(b"r", row[:150]), (b"s", row[150:])]))
        assert [len(r.values) for r in read] == [
            sum(widths[i % len(widths)] for i in range(150)),
            sum(widths[i % len(widths)] for i in range(150, 300))]
        assert read[1].value_list()[0] == bytes([150]) * widths[150 % len(widths)]
        assert read[1].column_list()[-1] == b"t:" + (299 * 16).to_bytes(2, "big")


def test_a_bulk_cut_block_that_does_not_hold_its_cells_is_refused() -> None:
    block, per_row = block_of([(b"row-a", singles(100, (1, 8)))])
    for bad_block, bad_rows in ((block[:-1], per_row), (block + b"\x00", per_row),
                                (block, [101]), (block, [99])):
        with pytest.raises(cellblock.CellBlockError):
            cellblock.rows(bad_block, bad_rows)
    # A cell whose length is not its key's and value's (the first cell's: 1 byte more).
    wrong = block[:3] + bytes([block[3] + 1]) + block[4:] + b"\x00"
    with pytest.raises(cellblock.CellBlockError):
        cellblock.rows(wrong, per_row)
