"""Thrift1 ``scannerGetList`` replies read as bytes, without a Python object per cell.

thriftpy2 decodes a reply into a ``TRowResult`` per row and a ``TCell`` per cell, and the rows
were then sorted and made into dicts: ~2 µs of client CPU per cell, most of a read of rows not
compacted yet (one cell per point). Here the call is written as raw bytes on the connection's
transport (as ``hbase_thrift`` writes ``mutateRows``) and the reply is read straight from its
socket: each row's header in Python, its cells in bulk with numpy. The reply is not length
prefixed (buffered transport), so it is parsed as it arrives, never asking the socket for a
byte the reply does not hold.

The layout (Thrift's binary protocol, ``Hbase.thrift``): the reply message header, then
``scannerGetList_result`` = field 0 ``success`` (a list of ``TRowResult`` structs: field 1
``row`` (binary), field 2 ``columns`` (map<binary, TCell>), field 3 ``sortedColumns``
(absent: scans ask for the map)) or field 1 ``io`` / field 2 ``ia`` (HBase's exceptions).
A map entry is: i32 key length, key, then the ``TCell`` struct: ``0b 00 01`` i32 value length,
value, ``0a 00 02`` i64 timestamp, ``00`` (23 bytes besides key and value).

A row's entries are cut in runs of one length (a fresh hour's cells are all ``t:`` + 2 bytes
and mostly one value width), each run's structural bytes all verified in numpy; an entry of
another length starts a new run. A row in any other shape (fields out of order, extra
fields) is decoded by thriftpy2 itself, so any valid reply is read exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

import numpy as np
from thriftpy2.protocol.binary import TBinaryProtocol as PureBinaryProtocol
from thriftpy2.thrift import TApplicationException, TException, TMessageType
from thriftpy2.transport import TTransportException

from app.storage.base import Row

Ends = list[int] | np.ndarray  # where each cell ends in a row's joined bytes
_I32 = Struct(">i")
_I64 = Struct(">q")
_HEAD = Struct(">iiB")  # an entry: key length; at 4 + key: the value field (0b) ...
_VERSION_1 = -2147418112  # 0x80010000 as a signed i32 (strict binary protocol)
_CALL = _I32.pack(_VERSION_1 | TMessageType.CALL) + _I32.pack(14) + b"scannerGetList"
_SUCCESS = b"\x0f\x00\x00\x0c"  # result field 0: a list of structs
_ROW_FIELD = b"\x0b\x00\x01"
_MAP_FIELD = b"\x0d\x00\x02\x0b\x0c"  # columns: map<binary, struct>
_VALUE_FIELD = b"\x0b\x00\x01"
_STAMP_FIELD = b"\x0a\x00\x02"
ENTRY_BYTES = 23  # a map entry's bytes besides its key and value
RECV_BYTES = 1 << 18
# A run of fewer entries than this is taken entry by entry: numpy's fixed cost per call is
# more than Python's per entry.
BULK_ENTRIES = 6


class ReplyRow:
    """One ``TRowResult``: its cells in HBase's column order (unsigned bytes), joined."""

    __slots__ = ("row", "count", "newest_ms", "columns", "column_ends", "values",
                 "value_ends")

    def __init__(self, row: bytes, columns: bytes, column_ends: Ends, values: bytes,
                 value_ends: Ends, newest_ms: int) -> None:
        self.row = row
        self.count = len(column_ends)
        self.newest_ms = newest_ms
        self.columns = columns  # the columns (family:qualifier) joined
        self.column_ends = column_ends  # where each ends in ``columns``
        self.values = values
        self.value_ends = value_ends

    def column_list(self) -> list[bytes]:
        return _split(self.columns, self.column_ends)

    def value_list(self) -> list[bytes]:
        return _split(self.values, self.value_ends)

    def cells(self) -> Row:
        """``{column: value}`` in HBase's order."""
        return dict(zip(self.column_list(), self.value_list(), strict=True))

    def qualifiers(self, skip: int) -> bytes:
        """The columns joined without their first ``skip`` bytes (the family and colon)."""
        ends = self.column_ends
        if isinstance(ends, np.ndarray) and self.count:
            width = int(ends[0])
            if int(ends[-1]) == width * self.count:  # one width: cut as a grid
                grid = np.frombuffer(self.columns, np.uint8).reshape(self.count, width)
                return grid[:, skip:].tobytes()
        return b"".join([column[skip:] for column in self.column_list()])

    def value_total(self) -> int:
        """The values read as 4-byte lengths (``KeyOnlyFilter(true)``), summed."""
        sizes = np.diff(np.asarray(self.value_ends, np.int64), prepend=0)
        if (sizes == 4).all():
            return int(np.frombuffer(self.values, ">u4").sum())
        return sum(int.from_bytes(value, "big") for value in self.value_list())

    def stored_bytes(self) -> int:
        """What the cells weigh as HBase stores them: row key, column and value per cell."""
        return len(self.row) * self.count + len(self.columns) + len(self.values)


def _split(joined: bytes, ends: Ends) -> list[bytes]:
    if isinstance(ends, np.ndarray):
        ends = ends.tolist()
    start = 0
    parts: list[bytes] = []
    append = parts.append
    for end in ends:
        append(joined[start:end])
        start = end
    return parts


class ReplyReader:
    """The bytes of one reply, received as the parser needs them (never more than it holds:
    the socket would wait for bytes that never come). Also a thriftpy2 transport (``read``)
    for what is decoded the slow way."""

    __slots__ = ("recv", "buf", "pos", "mark")

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self.recv = recv
        self.buf = b""
        self.pos = 0
        self.mark = 0  # where the row being parsed began: kept in ``buf`` for a rewind

    def need(self, size: int) -> None:
        """At least ``size`` bytes from ``pos`` in ``buf``; a new ``buf`` starts at ``mark``
        (``pos`` and ``mark`` then move with it)."""
        have = len(self.buf) - self.pos
        if have >= size:
            return
        keep = self.mark
        parts = [self.buf[keep:]]
        while have < size:
            chunk = self.recv(max(RECV_BYTES, size - have))
            if not chunk:
                raise TTransportException(TTransportException.END_OF_FILE,
                                          "TSocket read 0 bytes")
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        self.pos -= keep
        self.mark = 0

    def read(self, size: int) -> bytes:
        self.need(size)
        data = self.buf[self.pos:self.pos + size]
        self.pos += size
        return data

    def i32(self) -> int:
        self.need(4)
        (value,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(value)


def scanner_get_list(transport: Any, scanner_id: int, count: int, result_class: Any,
                     row_class: Any) -> list[ReplyRow]:
    """One ``scannerGetList`` call on a connection's transport, its reply parsed from the
    socket. ``result_class`` / ``row_class`` are ``Hbase.scannerGetList_result`` and
    ``TRowResult`` (the module happybase registers): HBase's ``IOError`` / ``IllegalArgument``
    and ``TApplicationException`` are raised as themselves, as thriftpy2's client would."""
    transport.write(_CALL + b"\x00\x00\x00\x00"  # sequence id 0, as thriftpy2's client
                    + b"\x08\x00\x01" + _I32.pack(scanner_id)  # id: i32, field 1
                    + b"\x08\x00\x02" + _I32.pack(count) + b"\x00")  # nbRows: i32, field 2
    transport.flush()
    # Nothing of an earlier reply is left in the transport's buffer (each was read whole).
    reader = ReplyReader(transport.sock.recv)
    try:
        return read_reply(reader, result_class, row_class)
    except (TException, OSError):
        raise
    except Exception as exc:  # a reply this parser cannot read: the connection is unusable
        raise TTransportException(TTransportException.UNKNOWN,
                                  f"unreadable scannerGetList reply: {exc!r}") from exc


def read_reply(reader: ReplyReader, result_class: Any, row_class: Any) -> list[ReplyRow]:
    """The rows of a ``scannerGetList`` reply read from ``reader``."""
    kind = _message_begin(reader)
    protocol = PureBinaryProtocol(reader, decode_response=False)
    if kind == TMessageType.EXCEPTION:
        failure = TApplicationException()
        failure.read(protocol)
        raise failure
    reader.need(4)
    if reader.buf[reader.pos:reader.pos + 4] != _SUCCESS:
        result = result_class()  # an exception of HBase's, or no list
        result.read(protocol)
        if result.io is not None:
            raise result.io
        if result.ia is not None:
            raise result.ia
        return [_from_thrift(row) for row in result.success or ()]
    reader.pos += 4
    rows = [_row(reader, protocol, row_class) for _ in range(reader.i32())]
    reader.need(1)
    if reader.buf[reader.pos] != 0:  # the result struct's end
        raise TTransportException(TTransportException.UNKNOWN,
                                  "unexpected field after scannerGetList's rows")
    reader.pos += 1
    return rows


def _message_begin(reader: ReplyReader) -> int:
    """The reply's message type, its header read (strict or not, as thriftpy2 reads it)."""
    first = reader.i32()
    if first < 0:
        kind = first & 0xFF
        reader.read(reader.i32())  # the name, then the sequence id
        reader.i32()
        return kind
    reader.read(first)  # old protocol: the name, then the type byte and sequence id
    reader.need(5)
    kind = reader.buf[reader.pos]
    reader.pos += 5
    return kind


def _row(reader: ReplyReader, protocol: Any, row_class: Any) -> ReplyRow:
    reader.mark = reader.pos
    row = _fast_row(reader)
    if row is not None:
        return row
    # Any other shape: thriftpy2's own decode of the row, from where it began.
    reader.pos = reader.mark
    result = row_class()
    result.read(protocol)
    return _from_thrift(result)


def _fast_row(reader: ReplyReader) -> ReplyRow | None:
    """The row at ``reader.pos`` in the expected shape (row, columns, end), else None."""
    reader.need(7)
    buf, pos = reader.buf, reader.pos
    if buf[pos:pos + 3] != _ROW_FIELD:
        return None
    (key_bytes,) = _I32.unpack_from(buf, pos + 3)
    reader.need(7 + key_bytes + 10)  # the key, the map's header and the row's end at least
    buf, pos = reader.buf, reader.pos
    key = buf[pos + 7:pos + 7 + key_bytes]
    at = pos + 7 + key_bytes
    if buf[at:at + 5] != _MAP_FIELD:
        return None
    (entries,) = _I32.unpack_from(buf, at + 5)
    reader.pos = at + 9
    row = _entries(reader, key, entries)
    if row is None:
        return None
    reader.need(1)
    if reader.buf[reader.pos] != 0:  # not the row's end (sortedColumns?)
        return None
    reader.pos += 1
    return row


def _entries(reader: ReplyReader, key: bytes, entries: int) -> ReplyRow | None:
    """The ``entries`` map entries at ``reader.pos``, as runs of one entry length; None when
    one is not in the expected shape (then ``reader.pos`` is left anywhere)."""
    runs: list[tuple[bytes, int, int, int, int]] = []  # (buf, offset, entries, key, value)
    done = 0
    while done < entries:
        reader.need(4)
        (column_bytes,) = _I32.unpack_from(reader.buf, reader.pos)
        reader.need(11 + column_bytes)
        buf, pos = reader.buf, reader.pos
        at = pos + 4 + column_bytes
        if buf[at:at + 3] != _VALUE_FIELD:
            return None
        (value_bytes,) = _I32.unpack_from(buf, at + 3)
        length = column_bytes + value_bytes + ENTRY_BYTES
        reader.need(length)
        buf, pos = reader.buf, reader.pos
        fit = min(entries - done, (len(buf) - pos) // length)
        taken = _run_length(buf, pos, fit, column_bytes, value_bytes)
        if taken == 0:
            return None
        runs.append((buf, pos, taken, column_bytes, value_bytes))
        reader.pos = pos + taken * length
        done += taken
    return _joined(key, runs)


def _run_length(buf: bytes, pos: int, fit: int, column_bytes: int, value_bytes: int) -> int:
    """How many entries from ``pos`` (at most ``fit``) have the first one's lengths and
    every structural byte in place: the first few one by one, then the rest in bulk."""
    length = column_bytes + value_bytes + ENTRY_BYTES
    head = _I32.pack(column_bytes)
    value_head = _VALUE_FIELD + _I32.pack(value_bytes)
    at_value = 4 + column_bytes
    at_stamp = at_value + 7 + value_bytes
    first = min(fit, BULK_ENTRIES)
    taken = 0
    while taken < first:
        base = pos + taken * length
        if (buf[base:base + 4] != head
                or buf[base + at_value:base + at_value + 7] != value_head
                or buf[base + at_stamp:base + at_stamp + 3] != _STAMP_FIELD
                or buf[base + length - 1] != 0):
            return taken
        taken += 1
    rest = fit - taken
    if not rest:
        return taken
    grid = np.frombuffer(buf, np.uint8, rest * length, pos + taken * length).reshape(
        rest, length)
    good = ((grid[:, :4] == np.frombuffer(head, np.uint8)).all(axis=1)
            & (grid[:, at_value:at_value + 7] == np.frombuffer(value_head, np.uint8)).all(axis=1)
            & (grid[:, at_stamp:at_stamp + 3] == np.frombuffer(_STAMP_FIELD, np.uint8)).all(
                axis=1)
            & (grid[:, -1] == 0))
    return taken + (rest if good.all() else int(np.argmin(good)))


def _joined(key: bytes, runs: list[tuple[bytes, int, int, int, int]]) -> ReplyRow:
    """The runs' columns, values and newest stamp, in HBase's column order."""
    if sum(run[2] for run in runs) < BULK_ENTRIES * len(runs):  # mostly single entries
        return _small_row(key, runs)
    columns, values, column_ends, value_ends, newest = [], [], [], [], 0
    column_width = runs[0][3]
    for buf, pos, taken, column_bytes, value_bytes in runs:
        length = column_bytes + value_bytes + ENTRY_BYTES
        grid = np.frombuffer(buf, np.uint8, taken * length, pos).reshape(taken, length)
        at_value = 4 + column_bytes + 7
        columns.append(grid[:, 4:4 + column_bytes])
        values.append(grid[:, at_value:at_value + value_bytes])
        stamps = grid[:, at_value + value_bytes + 3:length - 1]
        newest = max(newest, int(np.ascontiguousarray(stamps).view(">i8").max()))
        column_ends.append(np.full(taken, column_bytes, np.int64))
        value_ends.append(np.full(taken, value_bytes, np.int64))
        if column_bytes != column_width:
            column_width = -1
    column_sizes = np.concatenate(column_ends)
    value_sizes = np.concatenate(value_ends)
    if column_width >= 0 and len(runs) == 1:
        column_grid = columns[0]
    elif column_width >= 0:
        column_grid = np.concatenate(columns)
    else:
        return _sorted_row(key, columns, values, newest)
    value_blob = b"".join(part.tobytes() for part in values)
    order = _unsigned_order(column_grid)
    if order is not None:
        column_grid = column_grid[order]
        value_blob, value_sizes = _reordered(value_blob, value_sizes, order)
    return ReplyRow(key, column_grid.tobytes(), np.cumsum(column_sizes), value_blob,
                    np.cumsum(value_sizes), newest)


def _unsigned_order(grid: np.ndarray) -> np.ndarray | None:
    """The order that sorts fixed-width columns by unsigned bytes; None if already sorted
    (the gateway's map is in signed byte order, so a column with a byte >= 0x80 comes first)."""
    width = grid.shape[1]
    if width > 8:
        keys = np.ascontiguousarray(grid).view(np.dtype((np.void, width))).ravel()
        order = np.argsort(keys, kind="stable")
        return None if (order == np.arange(len(order))).all() else order
    number = np.zeros(len(grid), np.uint64)
    for column in range(width):
        number = (number << np.uint64(8)) | grid[:, column]
    if len(number) < 2 or (number[1:] > number[:-1]).all():
        return None
    return np.argsort(number, kind="stable")


def _reordered(blob: bytes, sizes: np.ndarray, order: np.ndarray
               ) -> tuple[bytes, np.ndarray]:
    """The variable-length pieces of ``blob`` (of ``sizes``) in ``order``, and their sizes."""
    starts = (np.cumsum(sizes) - sizes)[order]
    sizes = sizes[order]
    offsets = (np.repeat(starts - (np.cumsum(sizes) - sizes), sizes)
               + np.arange(int(sizes.sum())))
    return np.frombuffer(blob, np.uint8)[offsets].tobytes(), sizes


def _small_row(key: bytes, runs: list[tuple[bytes, int, int, int, int]]) -> ReplyRow:
    """A row of a few entries (a compacted row is one) or of short runs, without numpy."""
    cells: list[tuple[bytes, bytes]] = []
    newest = 0
    for buf, pos, taken, column_bytes, value_bytes in runs:
        length = column_bytes + value_bytes + ENTRY_BYTES
        at_value = 4 + column_bytes + 7
        for index in range(taken):
            base = pos + index * length
            column = buf[base + 4:base + 4 + column_bytes]
            value = buf[base + at_value:base + at_value + value_bytes]
            (stamp,) = _I64.unpack_from(buf, base + at_value + value_bytes + 3)
            newest = max(newest, stamp)
            cells.append((column, value))
    return _from_cells(key, cells, newest)


def _sorted_row(key: bytes, columns: list[np.ndarray], values: list[np.ndarray],
                newest: int) -> ReplyRow:
    """Columns of several widths: sorted the plain way."""
    cells: list[tuple[bytes, bytes]] = []
    for column_grid, value_grid in zip(columns, values, strict=True):
        cells.extend(zip((row.tobytes() for row in column_grid),
                         (row.tobytes() for row in value_grid), strict=True))
    return _from_cells(key, cells, newest)


def _from_cells(key: bytes, cells: list[tuple[bytes, bytes]], newest: int) -> ReplyRow:
    cells.sort()
    column_ends, value_ends = [], []
    column_end = value_end = 0
    for column, value in cells:
        column_end += len(column)
        value_end += len(value)
        column_ends.append(column_end)
        value_ends.append(value_end)
    return ReplyRow(key, b"".join([column for column, _ in cells]), column_ends,
                    b"".join([value for _, value in cells]), value_ends, newest)


def _from_thrift(result: Any) -> ReplyRow:
    """A ``TRowResult`` decoded by thriftpy2."""
    cells = list((result.columns or {}).items())
    newest = max((cell.timestamp for _, cell in cells), default=0)
    return _from_cells(result.row, [(column, cell.value) for column, cell in cells], newest)
