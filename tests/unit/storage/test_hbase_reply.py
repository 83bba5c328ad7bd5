"""``hbase_reply`` reads ``scannerGetList`` replies built here byte by byte (Thrift's binary
protocol as ``Hbase.thrift`` lays it out): what it gives is written by hand, and checked
against thriftpy2's own decode of the same bytes."""

from __future__ import annotations

import random
from collections.abc import Callable
from struct import pack

import happybase  # noqa: F401  (registers Hbase_thrift)
import pytest
from Hbase_thrift import Hbase, IllegalArgument, TRowResult
from Hbase_thrift import IOError as HBaseIOError
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TMemoryBuffer, TTransportException

from app.storage.hbase_reply import ReplyReader, ReplyRow, read_reply
from app.storage.hbase_scan import row_cells_stamped, row_stamp, row_stamp_sized

Cells = list[tuple[bytes, bytes, int]]  # (column, value, timestamp) in the order sent

HEADER = pack(">i", -2147418112 | 2) + pack(">i", 14) + b"scannerGetList" + pack(">i", 0)


def entry(column: bytes, value: bytes, stamp: int) -> bytes:
    return (pack(">i", len(column)) + column + b"\x0b\x00\x01" + pack(">i", len(value)) + value
            + b"\x0a\x00\x02" + pack(">q", stamp) + b"\x00")


def row(key: bytes, cells: Cells, sorted_columns: bool = False) -> bytes:
    data = (b"\x0b\x00\x01" + pack(">i", len(key)) + key + b"\x0d\x00\x02\x0b\x0c"
            + pack(">i", len(cells)) + b"".join(entry(*cell) for cell in cells))
    if sorted_columns:  # field 3: list<TColumn> {1: columnName, 2: cell}
        data += b"\x0f\x00\x03\x0c" + pack(">i", len(cells)) + b"".join(
            b"\x0b\x00\x01" + pack(">i", len(column)) + column + b"\x0c\x00\x02"
            + entry(b"", value, stamp)[4:] + b"\x00"  # the TCell (no key length), the end
            for column, value, stamp in cells)
    return data + b"\x00"


def reply(rows: list[bytes]) -> bytes:
    return HEADER + b"\x0f\x00\x00\x0c" + pack(">i", len(rows)) + b"".join(rows) + b"\x00"


def source(data: bytes, sizes: Callable[[], int] | None = None) -> Callable[[int], bytes]:
    """A socket's ``recv`` over ``data``: at most what is asked, ``sizes()`` bytes if given."""
    at = 0

    def recv(size: int) -> bytes:
        nonlocal at
        size = min(size, sizes()) if sizes is not None else size
        chunk = data[at:at + size]
        at += len(chunk)
        return chunk

    return recv


def parse(data: bytes, sizes: Callable[[], int] | None = None) -> list[ReplyRow]:
    reader = ReplyReader(source(data, sizes))
    rows = read_reply(reader, Hbase.scannerGetList_result, TRowResult)
    assert reader.pos == len(reader.buf)  # the whole reply read, not a byte more asked
    return rows


def thriftpy2_rows(data: bytes) -> list[tuple[bytes, dict[bytes, bytes], int]]:
    """thriftpy2's decode, as ``hbase_scan`` shaped it before: sorted, newest stamp."""
    protocol = TBinaryProtocol(TMemoryBuffer(data), decode_response=False)
    protocol.read_message_begin()
    result = Hbase.scannerGetList_result()
    result.read(protocol)
    return [(r.row, {c: cell.value for c, cell in sorted(r.columns.items())},
             max((cell.timestamp for cell in r.columns.values()), default=0))
            for r in result.success]


def shaped(rows: list[ReplyRow]) -> list[tuple[bytes, dict[bytes, bytes], int]]:
    return [(r.row, dict(r.cells()), r.newest_ms) for r in rows]


def check(data: bytes, expected: list[tuple[bytes, list[tuple[bytes, bytes]], int]]) -> None:
    """Parsed as ``expected`` (cells in that order), whole and in pieces of 1-9 bytes, and
    as thriftpy2 decodes it."""
    pieces = random.Random(7)
    for rows in (parse(data), parse(data, lambda: pieces.randint(1, 9))):
        assert [(r.row, list(r.cells().items()), r.newest_ms) for r in rows] == expected
        assert [r.count for r in rows] == [len(cells) for _, cells, _ in expected]
    assert shaped(parse(data)) == thriftpy2_rows(data)


def second_cells(offsets_widths: list[tuple[int, int]], stamp: int) -> Cells:
    """Single points at second offsets, the value ``width`` bytes long (flags width - 1)."""
    return [(b"t:" + pack(">H", offset << 4 | (width - 1)), bytes(range(1, width + 1)), stamp)
            for offset, width in offsets_widths]


def test_single_cells_of_mixed_value_widths_in_bulk() -> None:
    widths = [(10, 1), (20, 2), (30, 4), (40, 8), (50, 1), (60, 8), (70, 4), (80, 2)]
    cells = second_cells(widths, 1_700_000_000_123)
    cells[3] = (cells[3][0], cells[3][1], 1_700_000_009_999)  # the newest
    expected = [
        (b"t:\x00\xa0", b"\x01"), (b"t:\x01\x41", b"\x01\x02"),
        (b"t:\x01\xe3", b"\x01\x02\x03\x04"), (b"t:\x02\x87", bytes(range(1, 9))),
        (b"t:\x03\x20", b"\x01"), (b"t:\x03\xc7", bytes(range(1, 9))),
        (b"t:\x04\x63", b"\x01\x02\x03\x04"), (b"t:\x05\x01", b"\x01\x02")]
    check(reply([row(b"key1", cells)]), [(b"key1", expected, 1_700_000_009_999)])


def test_one_width_rows_and_small_rows_together() -> None:
    uniform = second_cells([(i, 4) for i in range(12)], 5)
    small = second_cells([(1, 8), (2, 1)], 9)
    data = reply([row(b"a", uniform), row(b"b", small), row(b"c", uniform)])
    columns = [pack(">H", i << 4 | 3) for i in range(12)]
    expected_uniform = [(b"t:" + q, b"\x01\x02\x03\x04") for q in columns]
    check(data, [(b"a", expected_uniform, 5),
                 (b"b", [(b"t:\x00\x17", bytes(range(1, 9))), (b"t:\x00\x20", b"\x01")], 9),
                 (b"c", expected_uniform, 5)])


def test_signed_order_from_the_gateway_comes_out_unsigned() -> None:
    # The gateway's map sorts by signed bytes: 0x80.. and 0xe0.. before 0x00.. and 0x7f..
    sent = [(b"t:\x80\x00", b"\x05", 1), (b"t:\xe0\x00", b"\x06", 1),
            (b"t:\x00\x10", b"\x07", 1), (b"t:\x7f\xf0", b"\x08", 1)]
    check(reply([row(b"k", sent)]), [(b"k", [(b"t:\x00\x10", b"\x07"), (b"t:\x7f\xf0", b"\x08"),
                                             (b"t:\x80\x00", b"\x05"), (b"t:\xe0\x00", b"\x06")],
                                      1)])
    bulk = [(b"t:" + bytes([high, 0]), bytes([high]), 2)
            for high in (0x80, 0x90, 0xFF, 0x00, 0x10, 0x7F)]  # six: the bulk path
    ordered = [(b"t:" + bytes([high, 0]), bytes([high]))
               for high in (0x00, 0x10, 0x7F, 0x80, 0x90, 0xFF)]
    check(reply([row(b"k", bulk)]), [(b"k", ordered, 2)])


def test_millisecond_qualifiers() -> None:
    # 4-byte qualifiers: 0xF then 22 bits of ms offset, 6 bits of flags; "t:" + 4 = 6 bytes
    cells = [(b"t:" + pack(">I", 0xF0000000 | ms << 6 | 7), pack(">d", ms / 2), 3)
             for ms in (1, 2, 500, 999, 1000, 3_599_999)]
    expected = [(column, value) for column, value, _ in cells]
    check(reply([row(b"ms", cells)]), [(b"ms", expected, 3)])


def test_a_compacted_cell_and_an_annotation_beside_points() -> None:
    compacted = (b"t:\x00\x07\x00\x17\x00\x27", pack(">q", 1) + pack(">q", 2) + b"\x01" * 8
                 + b"\x00", 4)
    note = (b"t:\x01\x00\x00", b'{"description":"deploy"}', 6)
    points = second_cells([(i, 2) for i in range(1, 8)], 5)
    data = reply([row(b"c", [compacted]), row(b"n", [*points, note])])
    check(data, [(b"c", [compacted[:2]], 4),
                 (b"n", [(column, value) for column, value, _ in points] + [note[:2]], 6)])


def test_a_value_that_looks_like_an_entry_is_not_taken_for_one() -> None:
    fake = entry(b"t:\x00\x10", b"\x01", 1)  # a whole entry's bytes inside a value
    cells = second_cells([(i, 1) for i in range(1, 7)], 3)
    cells.insert(2, (b"t:\x00\x2f", fake[:-2], 3))
    check(reply([row(b"v", cells)]),
          [(b"v", [(column, value) for column, value, _ in cells], 3)])


def test_empty_rows_and_an_empty_reply() -> None:
    check(reply([row(b"e", []), row(b"f", second_cells([(1, 1)], 2))]),
          [(b"e", [], 0), (b"f", [(b"t:\x00\x10", b"\x01")], 2)])
    check(reply([]), [])


def test_a_row_with_sorted_columns_is_decoded_by_thriftpy2() -> None:
    cells = second_cells([(i, 4) for i in range(8)], 1)
    data = reply([row(b"s", cells, sorted_columns=True), row(b"t", cells)])
    expected = [(column, value) for column, value, _ in cells]
    check(data, [(b"s", expected, 1), (b"t", expected, 1)])


def test_hbase_exceptions_are_raised_as_thriftpy2_raises_them() -> None:
    message = b"java.io.IOException: boom\n\tat somewhere"
    io_reply = HEADER + b"\x0c\x00\x01" + b"\x0b\x00\x01" + pack(">i", len(message)) + message
    with pytest.raises(HBaseIOError) as io:
        parse(io_reply + b"\x00\x00")
    assert io.value.message == message
    illegal = HEADER + b"\x0c\x00\x02\x0b\x00\x01" + pack(">i", 7) + b"invalid\x00\x00"
    with pytest.raises(IllegalArgument):
        parse(illegal)
    failure = (pack(">i", -2147418112 | 3) + pack(">i", 14) + b"scannerGetList" + pack(">i", 0)
               + b"\x0b\x00\x01" + pack(">i", 4) + b"nope" + b"\x08\x00\x02" + pack(">i", 1)
               + b"\x00")
    with pytest.raises(TApplicationException):
        parse(failure)


def test_a_reply_cut_short_is_a_transport_error() -> None:
    data = reply([row(b"k", second_cells([(i, 4) for i in range(9)], 1))])
    with pytest.raises(TTransportException):
        parse(data[:-40])


def test_the_scan_shapes_of_a_parsed_row() -> None:
    cells = [(b"t:\x00\x17", b"\x00\x00\x00\x08", 5), (b"t:\x00\x27", b"\x00\x00\x00\x01", 9),
             *second_cells([(i, 4) for i in range(3, 9)], 7)]
    (parsed,) = parse(reply([row(b"key", cells)]))
    assert row_stamp(parsed) == (b"key", 8, 9)
    # KeyOnlyFilter(true): each value is the stored value's length
    assert row_stamp_sized(parsed) == (b"key", 8, 9, 8 * (3 + 4) + 8 + 1 + 6 * 0x01020304)
    key, stored, count, newest, size = row_cells_stamped(parsed)
    assert (key, count, newest, size) == (b"key", 8, 9, 8 * (3 + 4) + 4 * 8)
    assert list(stored) == [column for column, _, _ in cells]
    assert stored == {column: value for column, value, _ in cells}
    assert parsed.qualifiers(2) == b"".join(column[2:] for column, _, _ in cells)


def test_rollup_columns_in_bulk_in_unsigned_order() -> None:
    # "t:count:" + a 2-byte offset: 10 bytes; sent in signed order (0x8000 before 0x0010)
    sent = [(b"t:count:" + pack(">H", q), pack(">q", q), 1)
            for q in (0x8000, 0xF000, 0xFFF0, 0x0010, 0x0020, 0x7FF0)]
    expected = [(b"t:count:" + pack(">H", q), pack(">q", q))
                for q in (0x0010, 0x0020, 0x7FF0, 0x8000, 0xF000, 0xFFF0)]
    check(reply([row(b"r", sent), row(b"s", second_cells([(i, 1) for i in range(6)], 2))]),
          [(b"r", expected, 1),
           (b"s", [(c, v) for c, v, _ in second_cells([(i, 1) for i in range(6)], 2)], 2)])


def test_empty_values_and_long_ones_at_the_reply_end() -> None:
    # KeyOnlyFilter(): every value empty; then values of 0 to 20 bytes, the empty one last
    keys_only = [(c, b"", s) for c, _, s in second_cells([(i, 1) for i in range(7)], 4)]
    mixed = [(b"t:" + pack(">H", i << 4), bytes(range(size)), 8)
             for i, size in enumerate((16, 20, 3, 1, 16, 0))]
    check(reply([row(b"k", keys_only), row(b"m", mixed)]),
          [(b"k", [(c, b"") for c, _, _ in keys_only], 4),
           (b"m", [(c, v) for c, v, _ in mixed], 8)])
