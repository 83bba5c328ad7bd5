"""A stored row's cells as a dict that also keeps them joined, as a reply carried them.

The HBase backend reads a row's columns and values as two joined byte strings
(``hbase_reply``); the decoder's bulk path for a row not compacted yet wants exactly those
(``codec_decode._Batch._add_singles``), so handing it the joined bytes spares joining the
dict's keys and values again. Everything else sees a plain ``dict`` (rows are never
modified after a read).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class PackedCells(dict[bytes, bytes]):
    """``{column: value}`` in HBase's column order, plus ``joined_columns`` (the columns
    joined, in that order), ``joined_values`` and ``value_sizes`` (each value's length)."""

    __slots__ = ("joined_columns", "joined_values", "value_sizes")

    def __init__(self, columns: list[bytes], values: list[bytes], joined_columns: bytes,
                 joined_values: bytes, value_sizes: npt.NDArray[np.int64]) -> None:
        super().__init__(zip(columns, values, strict=True))
        self.joined_columns = joined_columns
        self.joined_values = joined_values
        self.value_sizes = value_sizes
