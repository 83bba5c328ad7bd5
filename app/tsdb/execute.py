"""Running a whole query: read each sub-query's series, hand them to the engine, time it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from app.engine.execute import run_subquery
from app.engine.flat import count_inside
from app.engine.histogram import is_histogram_query
from app.engine.model import GroupResult
from app.errors import QueryLimitError, QueryTimeoutError
from app.query.ast import Query, SubQuery
from app.query.budget import Budget
from app.query.validate import describe_query
from app.tsdb import TSDB
from app.tsdb.reader import SeriesReader


@dataclass
class QueryOutcome:
    results: list[GroupResult]
    global_annotations: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def run_query(tsdb: TSDB, query: Query, *, keep_scanned: bool = False,
              budget: Budget | None = None) -> QueryOutcome:
    """Execute every sub-query in order under the request's ``budget`` (``app.query.budget``;
    one from the settings when None): its input bounds before any read, its limits, deadline
    and cancellation inside the read and the engine. ``keep_scanned``: results keep every
    point of the scanned rows (``app.engine.execute.run_subquery``)."""
    started = time.perf_counter()
    budget = budget or Budget.from_config(tsdb.config)
    budget.bounds.check_query(query)
    outcome = QueryOutcome(results=[])
    try:
        budget.check()  # called off (or out of time) before it started
        for sub in query.queries:
            outcome.results += _run_sub(tsdb, query, sub, outcome, budget, keep_scanned)
            budget.check(sub.index)
    except (QueryLimitError, QueryTimeoutError) as exc:
        exc.details = describe_query(query)  # logged once, by the query log that refuses it
        raise
    if query.global_annotations and not query.no_annotations:
        from app.tsdb.annotations import global_annotations

        outcome.global_annotations = global_annotations(tsdb, query.start_ms, query.end_ms,
                                                        budget)
    total_ms = (time.perf_counter() - started) * 1000
    outcome.summary = {"processingTimeMs": round(total_ms, 3),
                       "emittedDPs": int(sum(r.ts_ms.size for r in outcome.results)),
                       "queryCount": len(query.queries)}
    return outcome


def _run_sub(tsdb: TSDB, query: Query, sub: SubQuery, outcome: QueryOutcome,
             budget: Budget, keep_scanned: bool = False) -> list[GroupResult]:
    if is_histogram_query(sub):
        return _run_histogram_sub(tsdb, query, sub, outcome, budget)
    started = time.perf_counter()
    reader = SeriesReader(tsdb, budget.limits, budget)
    # Deleting needs the stored cells of what it matched.
    series = reader.read(sub, query.start_ms, query.end_ms, keeps_cells=query.delete)
    if query.delete:  # the API checked tsd.query.allow_delete and the caller's role
        from app.tsdb.delete import delete_points

        delete_points(tsdb, reader.matched_rows, query.start_ms, query.end_ms)
    read_ms = (time.perf_counter() - started) * 1000
    if sub.aggregator == "none" and sub.downsample is None:
        # Raw series out as they came in: the output is known before the engine runs.
        reader.limits.check_output(sub, sum(count_inside(s, query.start_ms, query.end_ms + 1)
                                            for s in series))
    metric = sub.metric or _metric_of(tsdb, series[0].tsuid if series else "")
    results = run_subquery(sub, metric, series, query.start_ms, query.end_ms,
                           timezone=query.timezone or "UTC", deadline=budget,
                           keep_scanned=keep_scanned)
    emitted = int(sum(r.ts_ms.size for r in results))
    reader.limits.check_output(sub, emitted)
    outcome.stats[sub.index] = {
        "queryIndex": sub.index, "rowsScanned": reader.stats.rows,
        "seriesRead": reader.stats.series, "dpsRead": reader.stats.points,
        "emittedDPs": emitted,
        "storageTimeMs": round(read_ms, 3),
        "processingTimeMs": round((time.perf_counter() - started) * 1000, 3)}
    if reader.stats.hours_not_rolled:  # pytsd: ROLLUP_NOFALLBACK read hours not (yet) rolled
        outcome.stats[sub.index]["rollupHoursNotRolled"] = reader.stats.hours_not_rolled
    return results


def _run_histogram_sub(tsdb: TSDB, query: Query, sub: SubQuery, outcome: QueryOutcome,
                       budget: Budget) -> list[GroupResult]:
    """A ``percentiles`` / ``show-histogram-buckets`` sub-query: histogram cells only."""
    from app.tsdb.histograms import HistogramReader, run_histogram_query

    started = time.perf_counter()
    reader = HistogramReader(tsdb, budget.limits, budget)
    results, read_ms = run_histogram_query(tsdb, sub, query.start_ms, query.end_ms, reader,
                                           query.timezone or "UTC")
    emitted = int(sum(r.ts_ms.size for r in results))
    reader.limits.check_output(sub, emitted)
    outcome.stats[sub.index] = {
        "queryIndex": sub.index, "rowsScanned": reader.stats.rows,
        "seriesRead": reader.stats.series, "dpsRead": reader.stats.points,
        "emittedDPs": emitted, "storageTimeMs": round(read_ms, 3),
        "processingTimeMs": round((time.perf_counter() - started) * 1000, 3)}
    return results


def _metric_of(tsdb: TSDB, tsuid_hex: str) -> str:
    """A tsuid sub-query's metric name, from the first series' metric UID."""
    if not tsuid_hex:
        return ""
    width = tsdb.layout.metric_width
    return tsdb.metrics.get_name(bytes.fromhex(tsuid_hex)[:width])
