"""A block's staged form (sqlite_block.py): ``block_blob`` against a reference built cell by
cell here, and ``block_columns`` cutting several staged blocks out at once."""

from __future__ import annotations

import json
import random

from app.storage.base import CellBlock
from app.storage.sqlite_block import block_blob, block_columns, block_records


def reference_blob(rows: list[bytes], cells: list[tuple[int, bytes, bytes]]) -> tuple[bytes, str]:
    """The module doc's format, one cell at a time."""
    data, index = b"", []
    for row_index, qualifier, value in cells:
        row = rows[row_index]
        index.append(len(data) << 20 | len(row) << 12 | len(qualifier) << 8 | len(value))
        data += row + qualifier + value
    return data, json.dumps(index, separators=(",", ":"))


def of(rows: list[bytes], cells: list[tuple[int, bytes, bytes]]) -> CellBlock:
    return CellBlock.of_cells(rows, [c[0] for c in cells], [c[1] for c in cells],
                              [c[2] for c in cells])


def random_block(rnd: random.Random) -> tuple[list[bytes], list[tuple[int, bytes, bytes]]]:
    rows = [rnd.randbytes(rnd.randint(1, 255)) for _ in range(rnd.randint(1, 12))]
    cells = [(rnd.randrange(len(rows)), rnd.randbytes(rnd.choice([2, 4, rnd.randint(1, 15)])),
              rnd.randbytes(rnd.randint(1, 255))) for _ in range(rnd.randint(1, 120))]
    return rows, cells


def test_a_block_is_staged_as_its_cells_back_to_back_with_their_index() -> None:
    rows = [b"\x00\x00\x01\x65\x53\xf1\x00", b"\x00\x00\x02\x65\x53\xf1\x00\x01"]
    cells = [(1, b"\x00\x00", b"\x01"), (0, b"\x00\x10", b"\x00\x02"), (1, b"\x00\x20", b"\x07")]
    assert block_blob(of(rows, cells)) == (
        rows[1] + b"\x00\x00\x01" + rows[0] + b"\x00\x10\x00\x02" + rows[1] + b"\x00\x20\x07",
        f"[{8 << 12 | 2 << 8 | 1},{11 << 20 | 7 << 12 | 2 << 8 | 2},"
        f"{22 << 20 | 8 << 12 | 2 << 8 | 1}]")


def test_any_block_that_fits_is_staged_as_the_reference_stages_it() -> None:
    rnd = random.Random(26)
    for _ in range(300):
        rows, cells = random_block(rnd)
        assert block_blob(of(rows, cells)) == reference_blob(rows, cells)


def test_several_staged_blocks_are_cut_out_at_once_in_order() -> None:
    rnd = random.Random(37)
    blocks = [random_block(rnd) for _ in range(5)]
    staged = [reference_blob(rows, cells) for rows, cells in blocks]
    rows, qualifiers, q_lengths, values, v_lengths, counts = block_columns(
        [data for data, _ in staged], [index for _, index in staged])
    expected = [record for data, index in staged for record in block_records("t", 0, data, index)]
    assert counts == [len(cells) for _, cells in blocks]
    assert rows == [record[1] for record in expected]
    assert qualifiers == b"".join(record[3] for record in expected)
    assert values == b"".join(record[4] for record in expected)
    assert q_lengths.tolist() == [len(record[3]) for record in expected]
    assert v_lengths.tolist() == [len(record[4]) for record in expected]
