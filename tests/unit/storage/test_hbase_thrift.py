"""``mutate_rows_args`` writes the very bytes thriftpy2 writes for the same ``mutateRows``
arguments (its compiled binary protocol over ``BatchMutation``/``Mutation`` objects)."""

from __future__ import annotations

import happybase  # noqa: F401 - registers the Hbase_thrift module
import pytest
from Hbase_thrift import BatchMutation, Hbase, Mutation
from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.transport import TMemoryBuffer

from app.storage.hbase_thrift import mutate_rows_args


def thriftpy2_bytes(table: bytes, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> bytes:
    buffer = TMemoryBuffer()
    Hbase.mutateRows_args(tableName=table, attributes={}, rowBatches=[
        BatchMutation(row=row, mutations=[Mutation(column=c, value=v) for c, v in cells.items()])
        for row, cells in rows]).write(TCyBinaryProtocol(buffer))
    return bytes(buffer.getvalue())


@pytest.mark.parametrize("rows", [
    [],
    [(b"\x00\x00\x01P\x47>\xc0\x00\x00\x01\x00\x00\x01", {b"t:\x00\x10": b"\x01"})],
    [(b"r1", {b"t:\x00\x00": b"", b"t:\x05\x00\x00": b"\x00\x10\x01" * 300}),
     (b"", {b"t:\xf0\x00\x00\x07": b"\xff" * 8}),
     (b"r3" * 200, {})],
    # lengths of 256 and more (a compacted column's qualifier, a row of 300 cells): packed,
    # not taken from the table of small lengths
    [(b"r4", {b"t:" + b"\x00\x10" * 200: b"\x01" * 201}),
     (b"r5", {b"t:" + i.to_bytes(2, "big"): b"\x02" for i in range(300)}),
     (b"r6" * 128, {b"t:" + b"\x01" * 254: b"\x03" * 255})],
], ids=["none", "one point", "mixed", "long"])
def test_the_same_bytes_as_thriftpy2(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
    assert mutate_rows_args(b"pfx_tsdb", rows) == thriftpy2_bytes(b"pfx_tsdb", rows)
