"""``/api/histogram``: write histogram points (``HistogramDataPointRpc``, OpenTSDB 2.4).

A point is a put point whose value is either ``buckets`` (``{"lower,upper": count}``, with
optional ``underflow``/``overflow``: the built-in simple-bucket codec) or ``value``: the codec's
bytes in base64, with the codec ``id``. Errors and the ``summary``/``details`` answers are
``/api/put``'s; with ``tsd.core.histograms.config`` empty the endpoint answers 503.
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app

from app.api import bp
from app.api.body import json_body
from app.api.put import _respond, get_writer, http_message
from app.api.stats import record_points_written
from app.errors import BadRequestError, TsdbError
from app.storage.codec_histogram import HistogramCodecs
from app.tsdb.histograms import DISABLED, HistogramPoint, parse_json_histogram, write_histograms


@bp.route("/histogram", methods=["POST"])  # other verbs: the app's 405, OpenTSDB's words
def histogram() -> Response:
    codecs: HistogramCodecs = current_app.extensions["tsdb"].histogram_codecs
    if not codecs.enabled:
        raise TsdbError(DISABLED, code=503)
    body = json_body()
    raw_points: list[Any] = body if isinstance(body, list) else [body]
    if not raw_points:
        raise BadRequestError("No datapoints found in content")
    parsed: list[HistogramPoint | None] = []
    errors: list[str | None] = []
    for raw in raw_points:
        try:
            parsed.append(parse_json_histogram(raw, codecs))
            errors.append(None)
        except TsdbError as exc:
            parsed.append(None)
            errors.append(exc.message)
    valid = [p for p in parsed if p is not None]
    written = iter(write_histograms(get_writer(), valid))
    for i, point in enumerate(parsed):
        if point is not None:
            error = next(written)
            errors[i] = None if error is None else http_message(error)
    record_points_written(sum(1 for p, e in zip(parsed, errors) if p is not None and e is None))
    return _respond(raw_points, errors)
