"""``/api/put``: write data points (``PutDataPointRpc``)."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, jsonify

from app.api import bp
from app.api.body import has_param, json_body
from app.api.stats import record_points_written
from app.errors import BadRequestError, TsdbError
from app.tsdb.writer import DataPoint, PointWriter, parse_point


def get_writer() -> PointWriter:
    writer: PointWriter | None = current_app.extensions.get("tsdb.writer")
    if writer is None:
        writer = current_app.extensions["tsdb.writer"] = PointWriter(
            current_app.extensions["tsdb"])
    return writer


@bp.route("/put", methods=["POST"])
def put() -> Response:
    body = json_body()
    raw_points: list[Any] = body if isinstance(body, list) else [body]
    if not raw_points:
        raise BadRequestError("No datapoints found in content")
    points: list[DataPoint | None] = []
    errors: list[str | None] = []
    for raw in raw_points:
        try:
            points.append(parse_point(raw))
            errors.append(None)
        except TsdbError as exc:
            points.append(None)
            errors.append(exc.message)
    valid = [p for p in points if p is not None]
    write_errors = iter(get_writer().write(valid))
    errors = [next(write_errors) if p is not None else e for p, e in zip(points, errors)]
    record_points_written(sum(1 for p, e in zip(points, errors) if p is not None and e is None))
    return _respond(raw_points, errors)


def _respond(raw_points: list[Any], errors: list[str | None]) -> Response:
    failed = [(raw, error) for raw, error in zip(raw_points, errors) if error is not None]
    summary, details = has_param("summary"), has_param("details")
    if not summary and not details:
        if failed:
            raise BadRequestError("One or more data points had errors",
                                  'Please see the TSD logs or append "details" to the put request')
        return Response(status=204)
    body: dict[str, Any] = {"failed": len(failed), "success": len(raw_points) - len(failed)}
    if details:
        body["errors"] = [{"datapoint": _as_received(raw), "error": error}
                          for raw, error in failed]
    response = jsonify(body)
    response.status_code = 400 if failed else 200
    return response


def _as_received(raw: Any) -> Any:
    """The point echoed back as OpenTSDB does: non-null fields, ``value`` as a string."""
    if not isinstance(raw, dict):
        return raw
    echoed = {k: v for k, v in raw.items() if v is not None}
    if "value" in echoed and not isinstance(echoed["value"], str):
        echoed["value"] = json_number_text(echoed["value"])
    return echoed


def json_number_text(value: Any) -> str:
    if isinstance(value, float) and value != value:
        return "NaN"
    return str(value)
