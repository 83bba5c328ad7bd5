"""Byte-level comparison of two table sets that hold the same data with the same UIDs.

Every data cell is broken into its points (a single cell, a compacted column, an append
column), so a row compacted by one server and not by the other still compares point by point:
``(row key, offset) -> (qualifier, value bytes)``. Annotation cells compare as stored bytes,
UID rows cell by cell.
"""

from __future__ import annotations

from typing import Any

from app.storage.base import Store
from app.storage.codec_cells import cell_kind, cell_points

CellMap = dict[tuple[bytes, bytes], set[bytes]]


def data_points(store: Store, table: str) -> CellMap:
    """``(row key, point key) -> {qualifier + value}``; point key: offset or annotation column."""
    out: CellMap = {}
    for key, columns in store.table(table).scan():
        for column, value in columns.items():
            qualifier = column.split(b":", 1)[1]
            kind = cell_kind(qualifier)
            if kind is None:  # an annotation (or another non-point column): its bytes
                out.setdefault((key, b"col:" + qualifier), set()).add(value)
                continue
            for offset_ms, q, v in cell_points(kind, qualifier, value):
                out.setdefault((key, str(offset_ms).encode()), set()).add(q + b"=" + v)
    return out


def uid_cells(store: Store, table: str) -> CellMap:
    return {(key, column): {value} for key, columns in store.table(table).scan()
            for column, value in columns.items()}


def differences(ref: CellMap, got: CellMap) -> list[tuple[str, Any, Any]]:
    """``(where, OpenTSDB's, pytsd's)`` for every point or cell that differs."""
    out = []
    for where in sorted(set(ref) | set(got)):
        a, b = ref.get(where), got.get(where)
        if a != b:
            out.append((f"{where[0].hex()} {where[1]!r}", a, b))
    return out
