"""``/api/query``: both front doors (GET ``m=``/``tsuid=`` and POST JSON) to one model."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from flask import Response, current_app, request

from app.api import bp, security
from app.api.body import has_param, parse_json, raw_body
from app.api.budget import request_budget
from app.api.query_tracking import Tracking, tracked
from app.api.schemas import query_from_json
from app.api.serialize import dumps_opentsdb, serialize_results, stats_summary
from app.api.stats import record_points_read
from app.errors import BadRequestError
from app.query.ast import Query
from app.query.budget import Budget
from app.query.parse import query_from_args
from app.tsdb.execute import run_query

JSON_TYPE = "application/json; charset=UTF-8"


def parse_request(now_ms: int) -> Query:
    """Whichever door the request came through, the same validated :class:`Query`."""
    tz = current_app.config["TSD"]["tsd.core.timezone"]
    if request.method == "POST" or (request.method == "DELETE" and request.content_length):
        return query_from_json(_body_or_none(), now_ms, tz, arrays=has_param("arrays"))
    return query_from_args(request.args.to_dict(flat=False), now_ms, tz)


def _body_or_none() -> Any:
    text = raw_body().decode("utf-8", errors="replace").strip()
    if not text:
        return None
    return parse_json(text)


def delete_allowed() -> bool:
    config = current_app.config["TSD"]
    return bool(config["tsd.query.allow_delete"] or config["tsd.http.query.allow_delete"])


def authorize_delete() -> None:
    """``"delete": true`` (or ``DELETE``) deletes data: only when enabled, never in ``ro``
    mode, only for the admin role, never from a cross-site form."""
    if not delete_allowed():
        raise BadRequestError("Bad request",
                              "Deleting data is not enabled (tsd.query.allow_delete=false)")
    if current_app.config["TSD"]["tsd.mode"] == "ro":
        raise BadRequestError("Bad request", "Deleting data is not allowed in tsd.mode=ro")
    security.require_role("admin")
    security.guard_write()


@bp.route("/query", methods=["GET", "POST", "DELETE"])
def query() -> Response:
    if request.method == "DELETE" and not delete_allowed():  # OpenTSDB checks this first
        authorize_delete()
    query = parse_request(time.time_ns() // 1_000_000)
    if request.method == "DELETE":
        query = dataclasses.replace(query, delete=True)
    if query.delete:
        authorize_delete()
    budget = request_budget()
    with tracked(query) as tracking:  # its lane, /api/stats/query, the query log
        return _answer(query, tracking, budget)


def _answer(query: Query, tracking: Tracking, budget: Budget) -> Response:
    outcome = run_query(current_app.extensions["tsdb"], query, budget=budget)
    tracking.ran(outcome.stats)
    summary = None
    if query.show_summary:
        summary = stats_summary(outcome.summary, [outcome.stats[s.index] for s in query.queries])
    serialize_started = time.perf_counter()
    body = serialize_results(query, outcome.results,
                             global_annotations=outcome.global_annotations,
                             stats=outcome.stats, summary=summary, deadline=budget)
    if summary is not None:
        # OpenTSDB's summary also times the serialisation. The dps text is rendered by now
        # and ``body`` shares this inner dict, so the figures still reach the response.
        totals = summary["statsSummary"]
        totals["serializationTime"] = round((time.perf_counter() - serialize_started) * 1000, 3)
        totals["processingPreWriteTime"] = outcome.summary["processingTimeMs"]
    record_points_read(sum(stats["dpsRead"] for stats in outcome.stats.values()))
    text = dumps_opentsdb(body)
    # The series' dps texts add up to the whole answer: let them go before the answer is
    # encoded, so at most two copies of it are alive (the text and its bytes), not three.
    del body
    return Response(text, content_type=JSON_TYPE)
