"""The middle key of a scan's rows from a bounded sample (``hbase_halves.MiddleSample``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.storage import hbase_halves
from app.storage.hbase_halves import MiddleSample


@dataclass
class Row:
    row: int  # stands for a row key: only its order matters


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 100, 2049, 5000, 100_003])
@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_the_middle_of_any_number_of_rows_in_any_batches(rows: int, batch: int) -> None:
    sample = MiddleSample()
    results = [Row(i) for i in range(rows)]
    for at in range(0, rows, batch):
        sample.add(results[at:at + batch])  # type: ignore[arg-type]
    assert sample.rows == rows
    assert sample.keys == list(range(0, rows, sample.stride))  # every stride-th, no other
    assert len(sample.keys) <= hbase_halves.SAMPLE_KEYS
    assert abs(sample.middle() - rows / 2) <= sample.stride  # type: ignore[operator]
