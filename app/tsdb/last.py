"""The last data point of series, from the data table alone (no ``tsdb-meta`` counters).

How a point is found, for a window of ``back_scan_h`` hours before the hour of ``now``:

* TSUIDs: the exact row keys of the window are known; rows are fetched newest first, a few
  hours per round trip, until one holds a data point (OpenTSDB's ``TSUIDQuery#getLastPoint``).
* A metric with tags: tags are filters, as in ``/api/query`` (``host=*``, ``host=a|b``,
  ``host=web*``, other tags allowed), so one key-only scan of the window finds every matching
  series and its rows; then each series' newest row is fetched and, if it holds only
  annotations, the one before it.

The point is the last one (greatest timestamp) of that row, duplicates resolved as the query
path resolves them. Series without a point in the window are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import BadRequestError
from app.query.limits import NO_DEADLINE, Deadline
from app.storage import codec
from app.tsdb import TSDB
from app.tsdb.lookup import Pair, compile_matcher, scan_matching_rows
from app.tsdb.tsuid import parse_tsuid

HOUR_S = 3600
TSUID_ROWS_PER_ROUND = 6
# Row keys fetched per round trip, the request's deadline checked between them.
FETCH_KEYS = 4096


@dataclass(frozen=True)
class LastQuery:
    """One sub-query: a metric with tag pairs, or a list of hex TSUIDs."""

    metric: str | None = None
    tags: tuple[Pair, ...] = ()
    tsuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class LastPoint:
    tsuid: bytes
    timestamp_ms: int
    value: float
    is_int: bool


def last_points(tsdb: TSDB, queries: Sequence[LastQuery], back_scan_h: int, now_ms: int,
                deadline: Deadline = NO_DEADLINE) -> list[LastPoint]:
    """The last point of every series the queries name, query by query, each sorted by TSUID;
    ``deadline`` (the request's budget) checked per batch of rows."""
    now_s = now_ms // 1000
    last_base_s = now_s - now_s % HOUR_S
    first_base_s = max(last_base_s - back_scan_h * HOUR_S, 0)
    deadline.check()
    points: list[LastPoint] = []
    for query in queries:
        if query.tsuids:
            rows = _tsuid_rows(tsdb, query.tsuids, first_base_s, last_base_s, deadline)
            per_round = TSUID_ROWS_PER_ROUND
        else:
            rows = _metric_rows(tsdb, query, first_base_s, last_base_s, deadline)
            per_round = 1  # these rows exist: the newest one nearly always has the point
        points.extend(_newest_points(tsdb, rows, per_round, deadline))
    return points


def _tsuid_rows(tsdb: TSDB, tsuids: Sequence[str], first_base_s: int, last_base_s: int,
                deadline: Deadline = NO_DEADLINE) -> dict[bytes, list[bytes]]:
    """Every row key of the window per TSUID, newest first."""
    hours = range(last_base_s, first_base_s - 1, -HOUR_S)
    rows: dict[bytes, list[bytes]] = {}
    for count, text in enumerate(tsuids, 1):
        if count % 256 == 0:
            deadline.check()
        tsuid = parse_tsuid(tsdb.layout, text, require_tags=True)
        rows[tsuid] = [tsdb.layout.row_key_from_tsuid(tsuid, base_s) for base_s in hours]
    return rows


def _metric_rows(tsdb: TSDB, query: LastQuery, first_base_s: int, last_base_s: int,
                 deadline: Deadline) -> dict[bytes, list[bytes]]:
    """The existing rows of each matching series in the window, newest first."""
    if not query.metric:
        raise BadRequestError("Missing metric", "A sub query needs a metric or tsuids")
    metric_uid = tsdb.metrics.get_id(query.metric)
    matcher = compile_matcher(tsdb, query.tags)
    rows: dict[bytes, list[bytes]] = {}
    for tsuid, key in scan_matching_rows(tsdb, metric_uid, matcher, first_base_s, last_base_s,
                                         deadline):
        rows.setdefault(tsuid, []).append(key)
    for keys in rows.values():
        keys.reverse()
    return rows


def _newest_points(tsdb: TSDB, rows: dict[bytes, list[bytes]], per_round: int,
                   deadline: Deadline = NO_DEADLINE) -> list[LastPoint]:
    """Walk each series' rows newest first, ``per_round`` rows per batch fetch."""
    table = tsdb.data_table()
    found: dict[bytes, LastPoint] = {}
    pending = {tsuid: keys for tsuid, keys in rows.items() if keys}
    while pending:
        wanted = sorted(key for keys in pending.values() for key in keys[:per_round])
        fetched: dict[bytes, dict[bytes, bytes]] = {}
        for first in range(0, len(wanted), FETCH_KEYS):
            deadline.check()
            fetched.update(table.rows(wanted[first:first + FETCH_KEYS], columns=[b"t"]))
        still: dict[bytes, list[bytes]] = {}
        for tsuid, keys in pending.items():
            point = next((p for key in keys[:per_round]
                          if (p := _last_in_row(tsdb, tsuid, key, fetched.get(key))) is not None),
                         None)
            if point is not None:
                found[tsuid] = point
            elif len(keys) > per_round:
                still[tsuid] = keys[per_round:]
        pending = still
    return [found[tsuid] for tsuid in sorted(found)]


def _last_in_row(tsdb: TSDB, tsuid: bytes, key: bytes,
                 cells: dict[bytes, bytes] | None) -> LastPoint | None:
    if not cells:
        return None
    base_time_s = tsdb.layout.parse_row_key(key).base_time_s
    data = [(column[2:], value) for column, value in cells.items() if column.startswith(b"t:")]
    decoded = codec.decode_row(base_time_s, data)
    if decoded.has_duplicates:
        # Two cells for one timestamp: the newest write wins, as on the query path.
        times = tsdb.data_table().row_write_times(key)
        decoded = codec.decode_row(base_time_s, data,
                                   {column[2:]: ts for column, ts in times.items()})
    if not len(decoded):
        return None
    return LastPoint(tsuid, int(decoded.ts_ms[-1]), float(decoded.values[-1]),
                     bool(decoded.is_int[-1]))
