"""``hbase_reply`` against replies thriftpy2 itself encodes (``Hbase.thrift``, as the gateway
sends them), delivered the way a loaded socket delivers them: in pieces of any size. The
socket's ``recv`` here raises if asked for a byte after the reply's last one (a real socket
would wait for it until the call timed out: the hang this guards against)."""

from __future__ import annotations

import random
from collections.abc import Callable
from struct import pack
from typing import Any

import happybase  # noqa: F401  (registers Hbase_thrift)
import pytest
from Hbase_thrift import Hbase, IllegalArgument, TCell, TColumn, TRowResult
from Hbase_thrift import IOError as HBaseIOError
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TMemoryBuffer

from app.storage.hbase_reply import ReplyReader, read_reply

Decoded = list[tuple[bytes, dict[bytes, bytes], int]]


class PastTheReply(AssertionError):
    """``recv`` called when the whole reply was already delivered."""


def chunked(data: bytes, rng: random.Random, most: int) -> Callable[[int], bytes]:
    """A socket's ``recv`` over ``data``: pieces of 1..``most`` bytes (never more than
    asked), raising once the reply is all delivered."""
    at = 0

    def recv(size: int) -> bytes:
        nonlocal at
        if at >= len(data):
            raise PastTheReply(f"recv({size}) after all {len(data)} bytes")
        chunk = data[at:at + min(size, rng.randint(1, most))]
        at += len(chunk)
        return chunk

    return recv


def encoded(result: Any, kind: int = TMessageType.REPLY) -> bytes:
    """A reply as the gateway writes it: thriftpy2's binary protocol, strict header."""
    buffer = TMemoryBuffer()
    protocol = TBinaryProtocol(buffer, decode_response=False)
    protocol.write_message_begin("scannerGetList", kind, 0)
    result.write(protocol)
    protocol.write_message_end()
    return buffer.getvalue()


def thriftpy2_decoded(data: bytes) -> Decoded:
    protocol = TBinaryProtocol(TMemoryBuffer(data), decode_response=False)
    protocol.read_message_begin()
    result = Hbase.scannerGetList_result()
    result.read(protocol)
    rows = []
    for row in result.success:
        cells = dict(row.columns or {})
        cells.update({column.columnName: column.cell for column in row.sortedColumns or ()})
        rows.append((row.row, {c: cell.value for c, cell in sorted(cells.items())},
                     max((cell.timestamp for cell in cells.values()), default=0)))
    return rows


def parsed(data: bytes, recv: Callable[[int], bytes]) -> Decoded:
    reader = ReplyReader(recv)
    rows = read_reply(reader, Hbase.scannerGetList_result, TRowResult)
    assert reader.pos == len(reader.buf)
    return [(r.row, dict(r.cells()), r.newest_ms) for r in rows]


def fake_entry(rng: random.Random, width: int) -> bytes:
    """Bytes that look like a map entry's head (or a whole one) with plausible lengths."""
    column = rng.randbytes(width)
    value_bytes = rng.choice([0, 1, 2, 4, 8, rng.randrange(64), rng.randrange(2**31)])
    head = pack(">i", width) + column + b"\x0b\x00\x01" + pack(">i", value_bytes)
    if rng.random() < 0.5 and value_bytes < 64:
        head += bytes(value_bytes) + b"\x0a\x00\x02" + pack(">q", rng.randrange(2**40)) + b"\x00"
    return head[:rng.randint(1, len(head))] if rng.random() < 0.3 else head


def value(rng: random.Random, width: int) -> bytes:
    pick = rng.random()
    if pick < 0.45:
        return rng.randbytes(rng.choice([1, 2, 4, 8]))
    if pick < 0.55:
        return b""
    if pick < 0.65:  # a compacted cell: a long value
        return rng.randbytes(rng.randrange(16, 3000))
    if pick < 0.9:  # a value that holds an entry's head, or several, or ends with one
        parts = [fake_entry(rng, rng.choice([width, width, 4, 6, 10]))
                 for _ in range(rng.randint(1, 3))]
        filler = rng.randbytes(rng.randrange(4))
        return filler + b"".join(parts) if rng.random() < 0.5 else b"".join(parts) + filler
    return pack(">i", rng.randrange(2**31))  # KeyOnlyFilter(true): a length


def column(rng: random.Random, width: int) -> bytes:
    if width == 10 and rng.random() < 0.7:  # a rollup column
        return rng.choice([b"t:count:", b"t:sum:\x00\x00"])[:8] + pack(">H", rng.randrange(65536))
    prefix = b"t:" if width >= 2 else b""
    return prefix + rng.randbytes(width - len(prefix))


def random_row(rng: random.Random) -> TRowResult:
    cells_count = rng.choice([0, 1, 2, 5, 6, 7, rng.randrange(1, 40), rng.randrange(100, 400)])
    widths = rng.choice([[4], [6], [10], [4, 6], [4, 5, 6, 10], [0, 1, 17, 40],
                         [rng.randrange(0, 30)], [3, 4, 100]])
    width = rng.choice(widths)
    cells: dict[bytes, TCell] = {}
    for _ in range(cells_count):
        name = column(rng, rng.choice(widths) if rng.random() < 0.3 else width)
        cells[name] = TCell(value=value(rng, width), timestamp=rng.randrange(-5, 2**62))
    order = list(cells)
    if rng.random() < 0.5:  # the gateway's signed byte order
        order.sort(key=lambda c: bytes((b + 128) % 256 for b in c))
    else:
        rng.shuffle(order)
    key = rng.randbytes(rng.choice([0, 3, 13, 20]))
    row = TRowResult(row=key, columns={name: cells[name] for name in order})
    if rng.random() < 0.05:
        row.sortedColumns = [TColumn(columnName=name, cell=cells[name]) for name in order]
        if rng.random() < 0.5:
            row.columns = None
    elif rng.random() < 0.02:
        row.columns = None  # a row of neither field: its key, then its end
    return row


def random_reply(rng: random.Random) -> bytes:
    rows = rng.choice([0, 1, 1, 2, rng.randrange(1, 10), rng.randrange(10, 60)])
    return encoded(Hbase.scannerGetList_result(success=[random_row(rng) for _ in range(rows)]))


@pytest.mark.parametrize("seed", range(20))
def test_random_replies_in_random_pieces_match_thriftpy2(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(15):
        data = random_reply(rng)
        expected = thriftpy2_decoded(data)
        # Tiny pieces only for short replies: each re-joins the row's bytes received so far
        # (a real socket hands out thousands of bytes a piece), and tests must stay fast.
        for most in [m for m in (1, 3, 17, 301, 1 << 20) if m * 4000 > len(data) or m > 300]:
            assert parsed(data, chunked(data, rng, most)) == expected, (seed, most)


def test_rows_of_one_shape_in_pieces() -> None:
    # A scan of the uid table: rows of one shape, one small cell each. A piece ending inside
    # a cell makes the reader keep the bytes from the row's start; an offset taken before
    # that pointed at the same cell of a later row, which passed every check, so rows were
    # skipped and the reader then waited for bytes after the reply's end (the hang of
    # test_uid_storm[hbase] in the full suite).
    rows = [TRowResult(row=b"m%02d" % i, columns={
        b"id:metrics": TCell(value=b"\x00\x00" + bytes([i]), timestamp=1000 + i)})
        for i in range(40)]
    data = encoded(Hbase.scannerGetList_result(success=rows))
    expected = [(b"m%02d" % i, {b"id:metrics": b"\x00\x00" + bytes([i])}, 1000 + i)
                for i in range(40)]
    assert thriftpy2_decoded(data) == expected
    for most in range(1, 130):
        assert parsed(data, chunked(data, random.Random(most), most)) == expected, most


def test_many_cells_rows_in_pieces_of_every_small_size() -> None:
    rng = random.Random(99)
    rows = [TRowResult(row=b"k%d" % i, columns={
        b"t:" + pack(">H", q << 4 | 7): TCell(value=pack(">q", q), timestamp=q)
        for q in range(n)}) for i, n in enumerate((300, 1, 6, 150))]
    data = encoded(Hbase.scannerGetList_result(success=rows))
    expected = thriftpy2_decoded(data)
    for most in range(1, 40):
        assert parsed(data, chunked(data, rng, most)) == expected, most


@pytest.mark.parametrize("most", [1, 2, 5, 64, 1 << 20])
def test_exception_replies_in_pieces(most: int) -> None:
    rng = random.Random(most)
    io = encoded(Hbase.scannerGetList_result(io=HBaseIOError(message=b"java.io.IOException: x")))
    with pytest.raises(HBaseIOError):
        parsed(io, chunked(io, rng, most))
    ia = encoded(Hbase.scannerGetList_result(ia=IllegalArgument(message=b"scanner ID is invalid")))
    with pytest.raises(IllegalArgument):
        parsed(ia, chunked(ia, rng, most))
    failure = encoded(TApplicationException(TApplicationException.INTERNAL_ERROR, "boom"),
                      TMessageType.EXCEPTION)
    with pytest.raises(TApplicationException):
        parsed(failure, chunked(failure, rng, most))
    empty = encoded(Hbase.scannerGetList_result(success=[]))
    assert parsed(empty, chunked(empty, rng, most)) == []
    nothing = encoded(Hbase.scannerGetList_result())  # no field at all: thriftpy2 says so
    with pytest.raises(TApplicationException) as missing:
        parsed(nothing, chunked(nothing, rng, most))
    assert missing.value.type == TApplicationException.MISSING_RESULT


@pytest.mark.parametrize("last", [b"", b"t:", b"t:\x01"])
def test_a_short_last_entry_after_a_bulk_run_at_the_reply_end(last: bytes) -> None:
    # Six entries of 16-byte columns are found in bulk; the next one's column is shorter and
    # its value empty, at the end of the reply: the reader may ask for its head only, not
    # for the head of a 16-byte-column entry (more bytes than the reply has left).
    cells = {b"t:" + bytes([i]) * 14: TCell(value=b"\x01", timestamp=i) for i in range(6)}
    cells[last] = TCell(value=b"", timestamp=9)
    data = encoded(Hbase.scannerGetList_result(success=[TRowResult(row=b"r", columns=cells)]))
    expected = thriftpy2_decoded(data)
    for most in (1, 5, 1 << 20):
        assert parsed(data, chunked(data, random.Random(most), most)) == expected
