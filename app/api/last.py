"""``/api/query/last``: the newest point of series (``QueryRpc#handleLastDataPointQuery``).

GET ``timeseries=metric{k=v,...}`` (repeatable), ``tsuids=a,b`` (repeatable), ``back_scan``
(hours), ``resolve`` (presence). POST ``{"queries": [{"metric", "tags"} | {"tsuids"}],
"resolveNames", "backScan"}``. Works from the data table alone; tags may be filters
(``host=*``, ``host=a|b``). ``back_scan`` 0 or absent scans ``tsd.query.last.default_back_scan``
hours, where OpenTSDB would read ``tsdb-meta`` (and often answer ``[]``).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Response, current_app, jsonify, request

from app.api import bp, stats
from app.api.body import has_param, json_body, param, parse_int_param
from app.api.budget import request_budget
from app.api.query_tracking import admitted
from app.api.serialize import java_double
from app.errors import BadRequestError
from app.tsdb import TSDB
from app.tsdb.admission import WILDCARD_FACTOR, last_cost
from app.tsdb.last import LastPoint, LastQuery, last_points
from app.tsdb.lookup import Pair, name_series, parse_lookup_m


def _parse_back_scan(raw: Any) -> int:
    value = parse_int_param(raw, "Unable to parse back_scan parameter")
    if value is None:
        return 0
    if value < 0:
        raise BadRequestError("Unable to parse back_scan parameter",
                              "back_scan must be 0 (the default) or more hours")
    return value


def _queries_from_args() -> list[LastQuery]:
    queries = []
    for text in request.args.getlist("timeseries"):
        metric, pairs = parse_lookup_m(text)
        queries.append(LastQuery(metric=metric, tags=tuple(pairs)))
    for text in request.args.getlist("tsuids"):
        tsuids = tuple(t for t in text.split(",") if t)
        if tsuids:
            queries.append(LastQuery(tsuids=tsuids))
    return queries


def _query_from_json(raw: Any) -> LastQuery:
    if not isinstance(raw, dict):
        raise BadRequestError("Unable to parse the given JSON", "Each query must be an object")
    tsuids = raw.get("tsuids")
    if tsuids:
        if not isinstance(tsuids, list) or not all(isinstance(t, str) for t in tsuids):
            raise BadRequestError("Unable to parse the given JSON", "tsuids must be strings")
        return LastQuery(tsuids=tuple(tsuids))
    metric, tags = raw.get("metric"), raw.get("tags") or {}
    if not isinstance(metric, str) or not metric:
        raise BadRequestError("Missing metric", "A sub query needs a metric or tsuids")
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in tags.items()):
        raise BadRequestError("Unable to parse the given JSON",
                              "tags must map tag keys to values")
    pairs: tuple[Pair, ...] = tuple(tags.items())
    return LastQuery(metric=metric, tags=pairs)


def _parse_request() -> tuple[list[LastQuery], int, bool]:
    if request.method == "POST":
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
        raw_queries = body.get("queries") or []
        if not isinstance(raw_queries, list):
            raise BadRequestError("Unable to parse the given JSON", "queries must be a list")
        queries = [_query_from_json(q) for q in raw_queries]
        return queries, _parse_back_scan(body.get("backScan")), bool(body.get("resolveNames"))
    return _queries_from_args(), _parse_back_scan(param("back_scan")), has_param("resolve")


def _back_scan_hours(tsdb: TSDB, requested: int) -> int:
    limit = tsdb.config["tsd.query.last.max_back_scan"]
    if requested > limit:
        raise BadRequestError(f"back_scan {requested} is over the limit of {limit} hours",
                              "See tsd.query.last.max_back_scan")
    return requested or tsdb.config["tsd.query.last.default_back_scan"]


def _render(tsdb: TSDB, point: LastPoint, resolve: bool) -> dict[str, Any] | None:
    value = str(int(point.value)) if point.is_int else java_double(point.value)
    out: dict[str, Any] = {}
    if resolve:
        named = name_series(tsdb, point.tsuid)
        if named is None:
            return None
        out["metric"] = named.metric
        out.update(timestamp=point.timestamp_ms, value=value, tags=named.tags)
    else:
        out.update(timestamp=point.timestamp_ms, value=value)
    out["tsuid"] = point.tsuid.hex().upper()
    return out


@bp.route("/query/last", methods=["GET", "POST"])
def query_last() -> Response:
    queries, back_scan, resolve = _parse_request()
    if not queries:
        raise BadRequestError("Missing sub queries")
    tsdb: TSDB = current_app.extensions["tsdb"]
    budget = request_budget()
    for query in queries:
        budget.bounds.check_tsuids(len(query.tsuids))
    hours = _back_scan_hours(tsdb, back_scan)
    series = sum(len(query.tsuids) or WILDCARD_FACTOR for query in queries)
    with admitted(last_cost(series, hours)):  # a lane, as /api/query: cheap ones never wait
        points = last_points(tsdb, queries, hours, time.time_ns() // 1_000_000, budget)
    stats.record_points_read(len(points))
    rendered = (_render(tsdb, point, resolve) for point in points)
    return jsonify([item for item in rendered if item is not None])
