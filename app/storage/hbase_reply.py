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

A row of a few entries (a compacted row is one) is read entry by entry. A longer one's entries
are found in bulk: every place of the bytes received where an entry of the first one's column
width could start (its key length, then the value field's header; its timestamp field and end
where its value length puts them) is a candidate, and the entries are the chain of candidates
from the first, each ending where the next starts. All rows of a reply are then cut together:
columns, values and newest stamps in a few numpy calls, each row's columns put in HBase's
order (unsigned bytes; the gateway's map is in signed order). A row in any other shape
(fields out of order, a ``sortedColumns`` list, columns of several widths among many) is
decoded by thriftpy2 itself, so any valid reply is read exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

import numpy as np
from thriftpy2.protocol.binary import TBinaryProtocol as PureBinaryProtocol
from thriftpy2.thrift import TApplicationException, TException, TMessageType
from thriftpy2.transport import TTransportException

from app.storage.packed_cells import Ends, PackedCells, sizes, split

_I32 = Struct(">i")
_I64 = Struct(">q")
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
# Longer columns in a row of many (rare: compacted columns are one a row) are decoded by
# thriftpy2; rollup columns ("t:count:" + 2 bytes) are 10.
MAX_BULK_COLUMN = 16
WINDOW_BYTES = 16  # pieces up to this long are cut from windows of the reply (``_pieces``)


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
        return split(self.columns, self.column_ends)

    def value_list(self) -> list[bytes]:
        return split(self.values, self.value_ends)

    def cells(self) -> PackedCells:
        """``{column: value}`` in HBase's column order (a dict keeping the joined bytes,
        its entries made only when read as a dict)."""
        return PackedCells(self.columns, self.column_ends, self.values, self.value_ends)

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
        if (sizes(self.value_ends) == 4).all():
            return int(np.frombuffer(self.values, ">u4").sum())
        return sum(int.from_bytes(value, "big") for value in self.value_list())

    def stored_bytes(self) -> int:
        """What the cells weigh as HBase stores them: row key, column and value per cell."""
        return len(self.row) * self.count + len(self.columns) + len(self.values)


class ReplyReader:
    """The bytes of one reply, received as the parser needs them (never more than it holds:
    the socket would wait for bytes that never come). Also a thriftpy2 transport (``read``)
    for what is decoded the slow way."""

    __slots__ = ("recv", "buf", "pos", "mark", "origin", "received")

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self.recv = recv
        self.buf = b""
        self.pos = 0
        self.mark = 0  # where the row being parsed began: kept in ``buf`` for a rewind
        self.origin = 0  # where ``buf`` starts in the reply
        self.received: list[bytes] = []  # the reply so far

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
            self.received.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        self.pos -= keep
        self.mark = 0
        self.origin += keep

    def whole(self) -> bytes:
        """The reply's bytes received so far."""
        return b"".join(self.received)

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
    reader.need(1)  # a result of no field is one byte: its end
    if reader.buf[reader.pos] != _SUCCESS[0] or not _has(reader, _SUCCESS):
        result = result_class()  # an exception of HBase's, or no list
        result.read(protocol)
        if result.io is not None:
            raise result.io
        if result.ia is not None:
            raise result.ia
        if result.success is None:  # as thriftpy2's client says it
            raise TApplicationException(TApplicationException.MISSING_RESULT,
                                        "scannerGetList failed: unknown result")
        return [_from_thrift(row) for row in result.success]
    reader.pos += 4
    rows = [_row(reader, protocol, row_class) for _ in range(reader.i32())]
    reader.need(1)
    if reader.buf[reader.pos] != 0:  # the result struct's end
        raise TTransportException(TTransportException.UNKNOWN,
                                  "unexpected field after scannerGetList's rows")
    reader.pos += 1
    pending = [row for row in rows if isinstance(row, _Pending)]
    if not pending:
        return rows  # type: ignore[return-value]  # no _Pending among them
    settled = iter(_settle(reader.whole(), pending))
    return [next(settled) if isinstance(row, _Pending) else row for row in rows]


def _has(reader: ReplyReader, head: bytes) -> bool:
    """The bytes at ``reader.pos`` start with ``head`` (a field of a list: its header and
    the list's are there)."""
    reader.need(len(head))
    return reader.buf[reader.pos:reader.pos + len(head)] == head


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


def _row(reader: ReplyReader, protocol: Any, row_class: Any) -> ReplyRow | _Pending:
    reader.mark = reader.pos
    row = _fast_row(reader)
    if row is not None:
        return row
    # Any other shape: thriftpy2's own decode of the row, from where it began.
    reader.pos = reader.mark
    result = row_class()
    result.read(protocol)
    return _from_thrift(result)


def _fast_row(reader: ReplyReader) -> ReplyRow | _Pending | None:
    """The row at ``reader.pos`` in the expected shape (row, columns, end), else None."""
    reader.need(7)
    buf, pos = reader.buf, reader.pos
    if buf[pos:pos + 3] != _ROW_FIELD:
        return None
    (key_bytes,) = _I32.unpack_from(buf, pos + 3)
    # The key, then at least the row's end and the reply's; a columns map's header and the
    # row's end only once its field header is there (a row may hold no map).
    reader.need(7 + key_bytes + 2)
    buf, pos = reader.buf, reader.pos
    at = pos + 7 + key_bytes
    if buf[at] != _MAP_FIELD[0]:
        return None
    reader.need(7 + key_bytes + 10)
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


class _Pending:
    """A row whose entries were found (where each starts in the reply) but not yet cut: all
    rows of a reply are cut together (:func:`_settle`), a few numpy calls for them all."""

    __slots__ = ("key", "column_bytes", "starts")

    def __init__(self, key: bytes, column_bytes: int, starts: np.ndarray) -> None:
        self.key = key
        self.column_bytes = column_bytes
        self.starts = starts


def _entries(reader: ReplyReader, key: bytes, entries: int) -> ReplyRow | _Pending | None:
    """The ``entries`` map entries at ``reader.pos``; None when one is not in the expected
    shape (then ``reader.pos`` is left anywhere). A few are read one by one; more must have
    one column width of at most ``MAX_BULK_COLUMN`` bytes (a row of single points, of
    rollup cells), found in bulk and cut with the reply's other rows."""
    if entries < BULK_ENTRIES:
        return _small_row(reader, key, entries)
    reader.need(4)
    (column_bytes,) = _I32.unpack_from(reader.buf, reader.pos)
    if not 0 <= column_bytes <= MAX_BULK_COLUMN:
        return None
    offsets = _offsets(reader, entries, column_bytes)
    if offsets is None:
        return None
    return _Pending(key, column_bytes, offsets + reader.origin)


def _small_row(reader: ReplyReader, key: bytes, entries: int) -> ReplyRow | None:
    """A row of a few entries (a compacted row is one), read one by one."""
    cells: list[tuple[bytes, bytes]] = []
    newest = 0
    unpack = _I32.unpack_from
    for _ in range(entries):
        reader.need(4)
        column_bytes = unpack(reader.buf, reader.pos)[0]
        if column_bytes < 0:
            return None
        reader.need(11 + column_bytes)
        buf, pos = reader.buf, reader.pos
        at_value = pos + 4 + column_bytes
        value_bytes = unpack(buf, at_value + 3)[0]
        if buf[at_value:at_value + 3] != _VALUE_FIELD or value_bytes < 0:
            return None
        length = column_bytes + value_bytes + ENTRY_BYTES
        reader.need(length)
        # need() may have moved the bytes (a new ``buf`` starts at the row): offsets taken
        # before it point that far ahead, at a later row's bytes, which can pass every check
        # below (rows of one shape) and move ``pos`` past rows not yet read.
        buf, pos = reader.buf, reader.pos
        at_value = pos + 4 + column_bytes
        at_stamp = at_value + 7 + value_bytes
        if buf[at_stamp:at_stamp + 3] != _STAMP_FIELD or buf[pos + length - 1] != 0:
            return None
        cells.append((buf[pos + 4:at_value], buf[at_value + 7:at_stamp]))
        newest = max(newest, _I64.unpack_from(buf, at_stamp + 3)[0])
        reader.pos = pos + length
    return _from_cells(key, cells, newest)


def _offsets(reader: ReplyReader, entries: int, column_bytes: int) -> np.ndarray | None:
    """Where each of the ``entries`` entries from ``reader.pos`` starts in ``reader.buf``
    (``reader.pos`` then after the last); None when one has not ``column_bytes`` columns.

    Found in bulk: every place of the bytes received where an entry's head could start
    (its column length, then the value field's header) is a candidate, and the entries are
    the chain of candidates from the first, each ending where the next starts. A candidate
    that only looks like a head (inside a value) breaks the chain there, and the search
    resumes from where the last entry ended: the chain found is always the entries."""
    found: list[np.ndarray] = []  # offsets from where the row began (``reader.mark``)
    done = 0
    while done < entries:
        # The entry's column length first: the entry's head is only asked for once it is
        # known to be one of this width (a shorter one at the reply's end has fewer bytes).
        reader.need(4)
        if _I32.unpack_from(reader.buf, reader.pos)[0] != column_bytes:
            return None
        reader.need(11 + column_bytes)
        buf, pos = reader.buf, reader.pos
        at = pos + 4 + column_bytes
        if buf[at:at + 3] != _VALUE_FIELD:
            return None
        length = column_bytes + ENTRY_BYTES + _I32.unpack_from(buf, at + 3)[0]
        # As much of the row as it surely holds (each entry is at least ENTRY_BYTES, and the
        # row's and the reply's ends follow): fewer, longer windows when it comes in pieces.
        reader.need(max(length, (entries - done) * ENTRY_BYTES + 2))
        buf, pos = reader.buf, reader.pos
        window = (entries - done) * max(length, column_bytes + ENTRY_BYTES + 8)
        chain = _chain(buf, pos, min(len(buf), pos + window), column_bytes, entries - done)
        if chain is None:
            return None
        starts, end = chain
        found.append(starts - reader.mark)
        reader.pos = end
        done += len(starts)
    return np.concatenate(found) + reader.mark


def _chain(buf: bytes, pos: int, end: int, column_bytes: int, limit: int
           ) -> tuple[np.ndarray, int] | None:
    """The starts of the chain of whole entries in ``buf[pos:end]`` from ``pos``, at most
    ``limit``, and where the last ends; None when the entry at ``pos`` is not one."""
    data = np.frombuffer(buf, np.uint8, end - pos, pos)
    heads = len(data) - (column_bytes + ENTRY_BYTES) + 1  # places with room for an entry
    if heads <= 0:
        return None
    head = _I32.pack(column_bytes) + b"\x00" * column_bytes + _VALUE_FIELD
    mask = np.ones(heads, np.bool_)
    for index, byte in enumerate(head):
        if not 4 <= index < 4 + column_bytes:  # the column's own bytes are anything
            mask &= data[index:index + heads] == byte
    starts = np.flatnonzero(mask)
    ends = starts + (column_bytes + ENTRY_BYTES) + _be32(data, starts + 7 + column_bytes)
    whole = (ends >= starts + column_bytes + ENTRY_BYTES) & (ends <= len(data))
    starts, ends = starts[whole], ends[whole]
    tail = ends - 12  # the stamp field's header, then 8 bytes and the entry's end
    whole = ((data[tail] == 0x0A) & (data[tail + 1] == 0) & (data[tail + 2] == 2)
             & (data[ends - 1] == 0))
    starts, ends = starts[whole], ends[whole]
    if not len(starts) or starts[0] != 0:
        return None
    chained = ends[:-1] == starts[1:]
    taken = len(starts) if chained.all() else int(np.argmin(chained)) + 1
    taken = min(taken, limit)
    return starts[:taken] + pos, int(ends[taken - 1]) + pos


def _be32(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The big-endian i32 at each offset ``at`` of ``data`` (bytes)."""
    return ((data[at].astype(np.int64) << 24) | (data[at + 1].astype(np.int64) << 16)
            | (data[at + 2].astype(np.int64) << 8) | data[at + 3])


def _settle(reply: bytes, pending: list[_Pending]) -> list[ReplyRow]:
    """The pending rows cut from the whole ``reply``: their columns, values and newest
    stamps in bulk, each row's cells in HBase's column order (unsigned bytes)."""
    # Padded: a window of the longest short piece may pass the reply's end (``_pieces``).
    data = np.frombuffer(reply + bytes(WINDOW_BYTES), np.uint8)
    counts = np.array([len(row.starts) for row in pending], np.int64)
    widths = np.repeat(np.array([row.column_bytes for row in pending], np.int64), counts)
    starts = np.concatenate([row.starts for row in pending])
    owner = np.repeat(np.arange(len(pending)), counts)
    at_value = starts + 4 + widths + 7
    value_sizes = _fixed(data, at_value - 4, 4).view(">i4").ravel().astype(np.int64)
    stamps = _fixed(data, at_value + value_sizes + 3, 8).view(">i8").ravel()
    firsts = np.cumsum(counts) - counts
    newest = np.maximum.reduceat(stamps, firsts).tolist()
    columns_read = _pieces(data, starts + 4, widths)
    order = _row_order(columns_read, widths, owner)
    if order is not None:
        at_value, value_sizes, widths = at_value[order], value_sizes[order], widths[order]
        columns_read = _pieces(data, starts[order] + 4, widths)
    columns = columns_read.tobytes()
    values = _pieces(data, at_value, value_sizes).tobytes()
    value_ends = np.cumsum(value_sizes)
    column_ends = np.cumsum(widths)
    bounds = (np.cumsum(counts) - 1).tolist()
    rows = []
    column_from = value_from = 0
    for row, last, count, stamp in zip(pending, bounds, counts.tolist(), newest, strict=True):
        column_to, value_to = int(column_ends[last]), int(value_ends[last])
        rows.append(ReplyRow(
            row.key, columns[column_from:column_to],
            np.arange(1, count + 1) * row.column_bytes, values[value_from:value_to],
            value_ends[last - count + 1:last + 1] - value_from, int(stamp)))
        column_from, value_from = column_to, value_to
    return rows


def _row_order(columns: np.ndarray, widths: np.ndarray, owner: np.ndarray
               ) -> np.ndarray | None:
    """The order that sorts each row's columns (``columns`` joined, one width per row, at
    most ``MAX_BULK_COLUMN`` bytes) by unsigned bytes, rows kept in place; None if they are
    in order already (the gateway's map is in signed byte order: a column with a byte
    >= 0x80 comes first)."""
    width = int(widths[0]) if len(widths) else 0
    if (widths == width).all() and width in (1, 2, 4):
        key = (owner.astype(np.uint64) << np.uint64(32)) | columns.view(f">u{width}")
        if len(key) < 2 or (key[1:] > key[:-1]).all():
            return None
        return np.argsort(key, kind="stable")
    # Any widths: each column as two numbers of 8 bytes (zero-padded: one width per row).
    firsts = np.cumsum(widths) - widths
    numbers = []
    for part in range(0, MAX_BULK_COLUMN, 8):
        number = np.zeros(len(widths), np.uint64)
        for index in range(part, part + 8):
            byte = columns[np.minimum(firsts + index, len(columns) - 1)].astype(np.uint64)
            number = (number << np.uint64(8)) | np.where(index < widths, byte, np.uint64(0))
        numbers.append(number)
    return np.lexsort((*reversed(numbers), owner))


def _fixed(data: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` bytes at each of ``starts``, as rows of a grid (each a window of
    ``data``: a gather of rows, not of bytes)."""
    return np.lib.stride_tricks.sliding_window_view(data, size)[starts]


def _pieces(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The pieces ``[start, start + size)`` of ``data`` one after another. Short ones (all
    columns and single points' values) as windows of the longest, cut by a mask (``data``
    is padded by ``WINDOW_BYTES``, so no window passes its end)."""
    longest = int(sizes.max()) if len(sizes) else 0
    if not longest:
        return np.empty(0, np.uint8)
    if longest > WINDOW_BYTES:
        return data[_picks(starts, sizes)]
    grid = _fixed(data, starts, longest)
    if (sizes == longest).all():
        return grid.ravel()
    return grid[np.arange(longest) < sizes[:, None]]


def _picks(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The offsets of pieces ``[start, start + size)`` one after another."""
    ends = np.cumsum(sizes)
    picks = np.repeat(starts - (ends - sizes), sizes)
    picks += np.arange(len(picks))
    return picks


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
    # A gateway asked for sorted columns sends them as a list instead (scans never ask).
    cells = list((result.columns or {column.columnName: column.cell
                                     for column in result.sortedColumns or ()}).items())
    newest = max((cell.timestamp for _, cell in cells), default=0)
    return _from_cells(result.row, [(column, cell.value) for column, cell in cells], newest)
