"""``/api/query/exp`` answers in OpenTSDB 2.4's shape (``QueryExecutor#serialize``).

::

    {"outputs": [{"id", "alias"?, "dps": [[ts_ms, v1, v2, ...], ...],
                  "dpsMeta": {"firstTimestamp", "lastTimestamp", "setCount", "series"},
                  "meta": [{"index": 0, "metrics": ["timestamp"]},
                           {"index": i, "metrics": [...], "commonTags": {...},
                            "aggregatedTags": [...]}, ...]}],      # meta only with series
     "query": <the request as 2.4 echoes it, every field, nulls included>}

Values print as Java doubles. An expression's ``dps`` keep the steps inside the query's time
range and its ``lastTimestamp`` stays 0 until a second step is written (2.4's counting); a
metric's output is every point its sub-query read, missing points as 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# The bulk number formatting of /api/query's serializer (orjson plus Java's exceptions)
from app.api.serialize import RawJson, _format_values
from app.engine.expression import Row, SeriesSet, VarSeries, row_of
from app.engine.model import Float64Array, Int64Array
from app.jackson import java_hashmap_iteration
from app.query.expression.model import ExpQuery, FillPolicy, Output

LONG_MAX = 2**63 - 1


def _meta(rows: list[Row]) -> list[dict[str, Any]]:
    metrics = sorted(rows[0].metrics)  # 2.4 names the first series' metrics for every series
    meta: list[dict[str, Any]] = [{"index": 0, "metrics": ["timestamp"]}]
    for i, row in enumerate(rows):
        meta.append({"index": i + 1, "metrics": metrics,
                     "commonTags": {k: row.tags[k] for k in java_hashmap_iteration(row.tags)},
                     "aggregatedTags": [name for _, name in row.agg_tags]})
    return meta


def _dps(timestamps: Int64Array, table: Float64Array) -> RawJson:
    """``[[ts, v1, v2, ...], ...]`` for ``table[row, step]``, rendered in bulk (Java doubles)."""
    rows = table.shape[0] if table.size else 0
    texts = _format_values(np.ascontiguousarray(table.T).ravel(), False, False)
    lines = []
    for step, ts in enumerate(timestamps.tolist()):
        values = ",".join(texts[step * rows:(step + 1) * rows])
        lines.append(f"[{ts},{values}]" if rows else f"[{ts}]")
    return RawJson("[" + ",".join(lines) + "]")


def _head(output: Output) -> dict[str, Any]:
    head: dict[str, Any] = {"id": output.id}
    if output.alias is not None:
        head["alias"] = output.alias
    return head


def expression_output(output: Output, result: SeriesSet, start_ms: int,
                      end_ms: int) -> dict[str, Any]:
    inside = (result.timeline >= start_ms) & (result.timeline <= end_ms)
    steps = np.flatnonzero(inside) if result.rows else np.empty(0, dtype=np.int64)
    stamps = result.timeline[steps]
    body = _head(output)
    body["dps"] = _dps(stamps, result.values[:, steps])
    body["dpsMeta"] = {"firstTimestamp": int(stamps[0]) if stamps.size else 0,
                       "lastTimestamp": int(stamps[-1]) if stamps.size > 1 else 0,
                       "setCount": int(stamps.size), "series": len(result.rows)}
    if result.rows:
        body["meta"] = _meta(result.rows)
    return body


def metric_output(output: Output, series: list[VarSeries]) -> dict[str, Any]:
    stamps = [s.ts_ms for s in series]
    timeline = np.unique(np.concatenate(stamps)) if stamps else np.empty(0, dtype=np.int64)
    columns = []
    for s in series:
        column = np.zeros(timeline.size, dtype=np.float64)  # TimeSyncedIterator fills zero
        column[np.searchsorted(timeline, s.ts_ms)] = s.values
        columns.append(column)
    table = np.stack(columns) if columns else np.empty((0, 0))
    body = _head(output)
    body["dps"] = _dps(timeline, table)
    body["dpsMeta"] = {"firstTimestamp": int(timeline[0]) if timeline.size else LONG_MAX,
                       "lastTimestamp": int(timeline[-1]) if timeline.size else 0,
                       "setCount": int(timeline.size), "series": len(series)}
    if series:
        body["meta"] = _meta([row_of(s) for s in series])
    return body


def _fill(policy: FillPolicy | None) -> dict[str, Any] | None:
    return None if policy is None else policy.echo()


def query_echo(query: ExpQuery) -> dict[str, Any]:
    """The request as 2.4's Jackson writes its ``Query`` back (field order, nulls, defaults)."""
    time = query.time
    assert time is not None
    ds = time.downsampler
    expressions = None if query.expressions is None else [
        {"id": e.id, "expr": e.expr,
         "join": None if e.join is None else {
             "operator": e.join.operator or None, "useQueryTags": e.join.use_query_tags,
             "includeAggTags": e.join.include_agg_tags},
         "fillPolicy": _fill(e.fill_policy)} for e in query.expressions]
    return {
        "name": query.name,
        "time": {"start": time.start, "end": time.end, "timezone": time.timezone,
                 "downsampler": None if ds is None else {
                     "interval": ds.interval, "aggregator": ds.aggregator,
                     "fillPolicy": _fill(ds.fill_policy)},
                 "aggregator": time.aggregator, "rate": time.rate},
        "filters": None if query.filters is None else [
            {"id": f.id, "tags": [_tag_filter(t) for t in f.tags],
             "explicitTags": f.explicit_tags} for f in query.filters],
        "metrics": [{"metric": m.metric, "id": m.id, "filter": m.filter,
                     "aggregator": m.aggregator, "timeOffset": m.time_offset,
                     "fillPolicy": _fill(m.fill_policy)} for m in query.metrics or ()],
        "expressions": expressions,
        "outputs": None if query.outputs is None else [
            {"id": o.id, "alias": o.alias} for o in query.outputs],
    }


def _tag_filter(raw: dict[str, Any]) -> dict[str, Any]:
    group_by = raw.get("groupBy", raw.get("group_by", False))
    return {"tagk": raw.get("tagk"), "filter": raw.get("filter"),
            "group_by": bool(group_by), "type": raw.get("type")}
