"""``/api/put``: write data points (``PutDataPointRpc``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from flask import Response, current_app, request

from app.api import bp
from app.api.annotation import json_response
from app.api.body import has_param, json_body, raw_body
from app.api.stats import record_points_written
from app.errors import BadRequestError, NoSuchUniqueName, TsdbError
from app.tsdb.points import ECHO_CHARS, PointBatch, add_json_points
from app.tsdb.writer import PointWriter

# Every digit as "0": a run of 20 digits becomes a run of 20 zeros, found by bytes.find
# (20x faster than a regex search over a 4 KB body).
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
TWENTY_DIGITS = b"0" * 20
UID_KIND_LABELS = {"metrics": "metric", "tagk": "tagk", "tagv": "tagv"}


def get_writer() -> PointWriter:
    return writer_of(current_app.extensions)


def writer_of(extensions: dict[str, Any]) -> PointWriter:
    """The app's one writer (``/api/put`` and the line protocol share its caches)."""
    writer: PointWriter | None = extensions.get("tsdb.writer")
    if writer is None:
        writer = extensions["tsdb.writer"] = PointWriter(extensions["tsdb"])
    return writer


# The request environ's key under which the server hands the view a put it has already
# stored (``app/api/put_direct.py``): the view then only answers it.
STORED_PUT = "pytsd.stored_put"


@dataclass
class StoredPut:
    """A put body's points, stored: what the view answers from."""

    raw_points: list[Any]
    errors: list[TsdbError | None]  # each point's, None when it was stored
    error: BaseException | None = None  # the store failed: raised again by the view

    @property
    def complete(self) -> bool:
        """Every point stored: the answer is a 204 unless ``?summary`` or ``?details``."""
        return self.error is None and self.errors.count(None) == len(self.raw_points)


def store_bodies(writer: PointWriter, bodies: list[list[Any]]) -> list[StoredPut]:
    """The points of several put bodies (requests) validated and stored by one writer call,
    in order, and counted for ``/api/stats``; each body's outcome. A store failure raises."""
    # OpenTSDB's HTTP put stores every non-integer value as an 8-byte double.
    batch = PointBatch(wide_floats=True)
    for raw_points in bodies:
        add_json_points(batch, raw_points, writer.known_series)
    record_points_written(writer.write_batch(batch))
    done, end = [], 0
    for raw_points in bodies:
        start, end = end, end + len(raw_points)
        done.append(StoredPut(raw_points, batch.errors[start:end]))
    return done


@bp.route("/put", methods=["POST"])
def put() -> Response:
    done: StoredPut | None = request.environ.get(STORED_PUT)
    if done is None:
        body = fast_json_body()
        raw_points: list[Any] = body if isinstance(body, list) else [body]
        if not raw_points:
            raise BadRequestError("No datapoints found in content")
        done = store_bodies(get_writer(), [raw_points])[0]
    elif done.error is not None:
        raise done.error
    if done.complete and not request.args:  # every point stored, no ?summary
        return Response(status=204)
    return _respond(done.raw_points,
                    [None if e is None else http_message(e) for e in done.errors])


def fast_json_body() -> Any:
    """The body parsed by orjson when it is a plain JSON object or array; anything else
    (invalid UTF-8, NaN, errors) goes through :func:`json_body`, which answers it as OpenTSDB
    does."""
    body = plain_json(raw_body())
    return json_body() if body is None else body


def plain_json(data: bytes) -> dict[str, Any] | list[Any] | None:
    """``data`` parsed by orjson when it is a plain JSON object or array, else None. None too
    for a body with a run of 20 digits: orjson reads an integer past 64 bits as a double,
    where it must stay an integer (and be refused as too big)."""
    if TWENTY_DIGITS in data.translate(DIGITS_AS_ZERO):
        return None
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, (dict, list)) else None


def http_message(error: TsdbError) -> str:
    """The per-point error text: OpenTSDB's HTTP put names an unknown UID 'Unknown metric'."""
    if isinstance(error, NoSuchUniqueName):
        return f"Unknown {UID_KIND_LABELS.get(error.kind, error.kind)}"
    return error.message


def _respond(raw_points: list[Any], errors: list[str | None]) -> Response:
    failed = [(raw, error) for raw, error in zip(raw_points, errors) if error is not None]
    summary, details = has_param("summary"), has_param("details")
    if not summary and not details:
        if failed:
            raise BadRequestError("One or more data points had errors",
                                  'Please see the TSD logs or append "details" to the put request')
        return Response(status=204)
    # OpenTSDB's order (a Java HashMap of these three keys), compact, no trailing newline.
    body: dict[str, Any] = {"success": len(raw_points) - len(failed), "failed": len(failed)}
    if details:
        body["errors"] = [{"datapoint": _as_received(raw), "error": error}
                          for raw, error in failed]
    response = json_response(body)
    response.status_code = 400 if failed else 200
    return response


def _as_received(raw: Any) -> Any:
    """The point echoed back as OpenTSDB does: non-null fields, ``value`` as a string.

    Strings longer than ``ECHO_CHARS`` are cut short: an error never repeats megabytes.
    """
    if not isinstance(raw, dict):
        return _short(raw)
    echoed = {k: _short(v) for k, v in raw.items() if v is not None}
    if "value" in echoed and not isinstance(echoed["value"], str):
        echoed["value"] = json_number_text(echoed["value"])
    return echoed


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ECHO_CHARS:
        return f"{value[:ECHO_CHARS]}... ({len(value)} characters)"
    if isinstance(value, dict):
        return {_short(k): _short(v) for k, v in value.items()}
    return value


def json_number_text(value: Any) -> str:
    if isinstance(value, float) and value != value:
        return "NaN"
    return str(value)
