"""``"delete": true`` in a query: delete the data points the query matched.

OpenTSDB (``SaltScanner#processRow``) deletes every whole row its scan matched, so points
outside the query range but in the same hours go too, and so do the notes in those rows.
pytsd deletes exactly the matched series' data points in [start, end]: hour rows inside the
range lose their data cells; a row the range cuts is rewritten with the points outside it.
Annotations stay (``/api/annotation/bulk`` deletes those).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from app.storage import codec
from app.storage.base import Row
from app.tsdb import TSDB
from app.tsdb.rollup_coverage import mark_rows

log = logging.getLogger(__name__)
DATA_PREFIX = codec.DATA_PREFIX
HOUR_MS = codec.MAX_TIMESPAN * 1000


def delete_points(tsdb: TSDB, rows: Iterable[tuple[bytes, Row]], start_ms: int,
                  end_ms: int) -> int:
    """Delete the data points of ``rows`` in [start_ms, end_ms]; return how many."""
    table = tsdb.data_table()
    time_at = tsdb.layout.salt_width + tsdb.layout.metric_width
    deleted = 0
    changed: list[bytes] = []
    for key, cells in rows:
        data = {column: value for column, value in cells.items()
                if column.startswith(DATA_PREFIX)
                and not codec.is_annotation_qualifier(column[len(DATA_PREFIX):])}
        if not data:
            continue
        base_s = int.from_bytes(key[time_at:time_at + 4], "big")
        decoded = codec.decode_row(base_s, [(c[len(DATA_PREFIX):], v) for c, v in data.items()])
        inside = (decoded.ts_ms >= start_ms) & (decoded.ts_ms <= end_ms)
        if not inside.any():
            continue
        kept = {}
        for ts_ms, value, is_int in zip(decoded.ts_ms[~inside].tolist(),
                                        decoded.values[~inside].tolist(),
                                        decoded.is_int[~inside].tolist()):
            ts = ts_ms // 1000 if ts_ms % 1000 == 0 else ts_ms
            _, qualifier, raw = codec.point_cell(ts, int(value) if is_int else value)
            kept[DATA_PREFIX + qualifier] = raw
        # Rewrite the kept points, then delete only the columns not rewritten: on HBase a column
        # delete and a put of the same column in the same millisecond would hide the put.
        if kept:
            table.put(key, kept)
        dropped = [column for column in data if column not in kept]
        if dropped:
            table.delete(key, dropped)
        deleted += int(inside.sum())
        changed.append(key)
    mark_rows(tsdb, changed)  # after the cells: their hours' rollups no longer hold
    log.info("query delete: %d data points deleted in [%d, %d]", deleted, start_ms, end_ms)
    return deleted
