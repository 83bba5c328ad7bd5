"""``/api/query``: both front doors (GET ``m=``/``tsuid=`` and POST JSON) to one model."""

from __future__ import annotations

import time
from typing import Any

from flask import Response, current_app, request

from app.api import bp
from app.api.body import has_param, parse_json, raw_body
from app.api.schemas import query_from_json
from app.api.serialize import dumps_opentsdb, serialize_results, stats_summary
from app.api.stats import record_points_read
from app.query.ast import Query
from app.query.parse import query_from_args
from app.tsdb.execute import run_query

JSON_TYPE = "application/json; charset=UTF-8"


def parse_request(now_ms: int) -> Query:
    """Whichever door the request came through, the same validated :class:`Query`."""
    tz = current_app.config["TSD"]["tsd.core.timezone"]
    if request.method == "POST":
        return query_from_json(_body_or_none(), now_ms, tz, arrays=has_param("arrays"))
    return query_from_args(request.args.to_dict(flat=False), now_ms, tz)


def _body_or_none() -> Any:
    text = raw_body().decode("utf-8", errors="replace").strip()
    if not text:
        return None
    return parse_json(text)


@bp.route("/query", methods=["GET", "POST"])
def query() -> Response:
    query = parse_request(time.time_ns() // 1_000_000)
    outcome = run_query(current_app.extensions["tsdb"], query)
    summary = None
    if query.show_summary:
        summary = stats_summary(outcome.summary, [outcome.stats[s.index] for s in query.queries])
    serialize_started = time.perf_counter()
    body = serialize_results(query, outcome.results,
                             global_annotations=outcome.global_annotations,
                             stats=outcome.stats, summary=summary)
    if summary is not None:
        # OpenTSDB's summary also times the serialisation. The dps text is rendered by now
        # and ``body`` shares this inner dict, so the figures still reach the response.
        totals = summary["statsSummary"]
        totals["serializationTime"] = round((time.perf_counter() - serialize_started) * 1000, 3)
        totals["processingPreWriteTime"] = outcome.summary["processingTimeMs"]
    record_points_read(sum(stats["dpsRead"] for stats in outcome.stats.values()))
    return Response(dumps_opentsdb(body), content_type=JSON_TYPE)
