"""``/api/rollup``: write rollups and pre-aggregates computed elsewhere (``RollupDataPointRpc``).

A point is a put point plus ``interval`` and ``aggregator`` (a rollup: the cell goes to that
interval's rollup table) and/or ``groupByAggregator`` (a pre-aggregate: the interval's
pre-aggregate table, or the default interval's without ``interval``). Errors and the
``summary``/``details`` answers are ``/api/put``'s.
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app

from app.api import bp
from app.api.body import json_body
from app.api.put import _respond
from app.api.stats import record_points_written
from app.errors import BadRequestError, TsdbError
from app.tsdb.rollups import AggregatePoint, RollupWriter, parse_aggregate_point


@bp.route("/rollup", methods=["POST"])
def rollup() -> Response:
    body = json_body()
    raw_points: list[Any] = body if isinstance(body, list) else [body]
    if not raw_points:
        raise BadRequestError("No datapoints found in content")
    writer = RollupWriter(current_app.extensions["tsdb"])
    points: list[AggregatePoint | None] = []
    errors: list[str | None] = []
    for raw in raw_points:
        try:
            points.append(parse_aggregate_point(raw))
            errors.append(None)
        except TsdbError as exc:
            points.append(None)
            errors.append(exc.message)
    valid = [p for p in points if p is not None]
    write_errors = iter(writer.write(valid))
    errors = [next(write_errors) if p is not None else e for p, e in zip(points, errors)]
    record_points_written(sum(1 for p, e in zip(points, errors) if p is not None and e is None))
    return _respond(raw_points, errors)
