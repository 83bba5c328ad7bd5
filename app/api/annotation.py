"""``/api/annotation``, ``/api/annotations``, ``/api/annotation/bulk`` (``AnnotationRpc``) and
our ``/api/annotation/list``.

* ``/api/annotation``: GET one note, POST (merge), PUT (replace), DELETE; from a JSON body, or
  else the query string (``tsuid``, ``start_time``, ``end_time``, ``description``, ``notes``).
  A GET may pick the verb with ``method_override``. Statuses: 200, 304 (nothing changed),
  204 (deleted), 400, 404 (no such note), 405.
* ``/api/annotations``: GET lists the global notes starting in [start_time, end_time]; the
  other verbs behave as on the singular path.
* ``/api/annotation/bulk``: POST/PUT a JSON array; DELETE a range (body or query string).
* ``/api/annotation/list`` (pytsd): global and series notes in a range, selected by TSUIDs or
  by metric and tag filters, searched by text. See ``docs/annotations.md``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from flask import Response, current_app, request

import app.tsdb.annotations as store
from app.api import bp
from app.api.body import json_body, raw_body
from app.api.budget import request_budget
from app.errors import BadRequestError, MethodNotAllowedError, NotFoundError
from app.query.parse import parse_metric_and_filters
from app.query.timeparse import parse_time
from app.tsdb import TSDB
from app.tsdb.annotation_model import Note, NoteRequest, note_from_json, set_field

METHODS = ["GET", "POST", "PUT", "DELETE"]
OVERRIDES = {"get", "post", "put", "delete"}
DEFAULT_LIST_LIMIT = 1000


def get_tsdb() -> TSDB:
    tsdb: TSDB = current_app.extensions["tsdb"]
    return tsdb


def json_response(body: Any) -> Response:
    """Compact JSON as OpenTSDB's serializer writes it (no trailing newline, raw UTF-8)."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return Response(text, mimetype="application/json; charset=UTF-8")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def api_method() -> str:
    """``HttpQuery#getAPIMethod``: a GET may name another verb with ``method_override``."""
    if request.method != "GET" or "method_override" not in request.args:
        return request.method
    override = request.args.get("method_override", "").strip().lower()
    if not override:
        raise MethodNotAllowedError("Missing method override value")
    if override not in OVERRIDES:
        raise MethodNotAllowedError("Unknown or unsupported method override value")
    return override.upper()


def not_allowed(method: str) -> MethodNotAllowedError:
    return MethodNotAllowedError("Method not allowed", f"The HTTP method [{method}] is not "
                                 "permitted for this endpoint")


def has_content() -> bool:
    return bool(raw_body().strip())


def parse_when(text: str | None) -> int:
    """A query-string time (any OpenTSDB format) in ms, or -1 when absent."""
    if not text:
        return -1
    return parse_time(text, now_ms(), current_app.config["TSD"]["tsd.core.timezone"])


def stored_units(ts_ms: int) -> int:
    """OpenTSDB divides query-string times by 1000, so a millisecond note could never be
    fetched (issue #729). Keep milliseconds when there are any, else seconds as OpenTSDB."""
    return ts_ms if ts_ms % 1000 else ts_ms // 1000


# --- one note --------------------------------------------------------------------------------


def note_from_query_string() -> NoteRequest:
    """``AnnotationRpc#parseQS`` (``custom`` cannot be given in the query string)."""
    note_request = NoteRequest(Note(tsuid=request.args.get("tsuid", "")))
    start_ms = parse_when(request.args.get("start_time"))
    if start_ms < 1:
        raise BadRequestError("Missing start time")
    note_request.note.start_time = stored_units(start_ms)
    end_ms = parse_when(request.args.get("end_time"))
    if end_ms > 0:
        set_field(note_request, "end_time", stored_units(end_ms))
    for key in ("description", "notes"):
        if key in request.args:
            set_field(note_request, key, request.args[key])
    return note_request


def note_from_request() -> NoteRequest:
    note_request = note_from_json(json_body()) if has_content() else note_from_query_string()
    note_request.note.tsuid = note_request.note.tsuid.upper()
    return note_request


def single(method: str) -> Response:
    """The singular endpoint, for whichever verb."""
    if method not in METHODS:
        raise not_allowed(method)
    note_request = note_from_request()
    note = note_request.note
    tsdb = get_tsdb()
    if method == "GET":
        found = store.get_note(tsdb, note.tsuid, note.start_time)
        if found is None:
            raise NotFoundError("Unable to locate annotation in storage")
        return json_response(found.api_json())
    if method == "DELETE":
        store.delete_note(tsdb, note.tsuid, note.start_time)
        return Response(status=204)
    store.cell_of(tsdb, note.tsuid, note.start_time)  # 400s before the 304 check
    if not note_request.changed:
        return Response(status=304)
    return json_response(store.sync_note(tsdb, note_request, overwrite=method == "PUT").api_json())


@bp.route("/annotation", methods=METHODS)
def annotation() -> Response:
    return single(api_method())


@bp.route("/annotations", methods=METHODS)
def global_annotations() -> Response:
    method = api_method()
    if method != "GET":
        return single(method)
    start_ms = parse_when(request.args.get("start_time"))
    if start_ms < 1:
        raise BadRequestError("Missing start time")
    end_ms = parse_when(request.args.get("end_time"))
    end_ms = now_ms() if end_ms < 1 else end_ms
    notes = store.global_notes(get_tsdb(), start_ms, end_ms, request_budget())
    return json_response([note.api_json() for note in notes])


# --- bulk ------------------------------------------------------------------------------------


@bp.route("/annotation/bulk", methods=METHODS)
@bp.route("/annotations/bulk", methods=METHODS, endpoint="annotations_bulk")
def annotation_bulk() -> Response:
    method = api_method()
    if method in ("POST", "PUT"):
        return bulk_update(overwrite=method == "PUT")
    if method == "DELETE":
        return bulk_delete()
    raise not_allowed(method)


def _missing_content() -> BadRequestError:
    return BadRequestError("Missing message content",
                           "Supply valid JSON formatted data in the body of your request")


def bulk_update(overwrite: bool) -> Response:
    """Sync every note of a JSON array; notes without changes are skipped (and not returned).
    All notes are validated before any is written (OpenTSDB stops half-way)."""
    if not has_content():
        raise _missing_content()
    body = json_body()
    if not isinstance(body, list):
        raise BadRequestError("Unable to parse the given JSON",
                              "The bulk endpoint takes a JSON array of annotations")
    tsdb = get_tsdb()
    requests = [note_from_json(item) for item in body]
    for note_request in requests:
        note = note_request.note
        note.tsuid = note.tsuid.upper()
        if note.start_time < 1:
            raise BadRequestError("The start timestamp has not been set",
                                  f"Annotation error: TSUID: {note.tsuid} Start: "
                                  f"{note.start_time}  Description: {note.description}")
        store.cell_of(tsdb, note.tsuid, note.start_time)
    synced = [store.sync_note(tsdb, r, overwrite) for r in requests if r.changed]
    return json_response([note.api_json() for note in synced])


def _bulk_delete_settings() -> tuple[str, str, list[str] | None, bool]:
    """(start, end, tsuids, global) from the JSON body or the query string."""
    if not has_content():
        tsuids = None
        if "tsuids" in request.args:
            tsuids = [t.strip() for t in request.args.get("tsuids", "").split(",")]
        return (request.args.get("start_time", ""), request.args.get("end_time", ""),
                tsuids, "global" in request.args)
    body = json_body()
    if not isinstance(body, dict):
        raise BadRequestError("Unable to parse the given JSON",
                              "A bulk delete takes a JSON object")
    tsuids = body.get("tsuids")
    if tsuids is not None and (not isinstance(tsuids, list)
                               or not all(isinstance(t, str) for t in tsuids)):
        raise BadRequestError("Unable to parse the given JSON", "'tsuids' must be strings")
    return (_as_text(body.get("startTime")), _as_text(body.get("endTime")), tsuids,
            body.get("global") is True)


def _as_text(value: Any) -> str:
    return "" if value is None else str(value)


def bulk_delete() -> Response:
    """Delete the notes whose start is in [start, end] (ms, inclusive; end defaults to now)."""
    start_text, end_text, tsuids, is_global = _bulk_delete_settings()
    if not start_text:
        raise BadRequestError("Missing the start time value")
    wanted = [t.upper() for t in tsuids or [] if t]
    if not is_global and not wanted:
        raise BadRequestError("Missing the TSUIDs or global annotations flag")
    start_ms = parse_when(start_text)
    end_ms = parse_when(end_text) if end_text else now_ms()
    if end_ms < start_ms:
        raise BadRequestError("The end timestamp cannot be less than the start timestamp")
    tsdb = get_tsdb()
    total = store.delete_range(tsdb, None, start_ms, end_ms) if is_global else 0
    for tsuid in wanted:
        total += store.delete_range(tsdb, tsuid, start_ms, end_ms)
    return json_response({"startTime": start_ms, "endTime": end_ms, "tsuids": tsuids,
                          "global": is_global, "totalDeleted": total})


# --- our listing -----------------------------------------------------------------------------


def _flag(name: str, default: bool) -> bool:
    value = request.args.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("false", "0", "no", "off")


def _selected_notes(tsdb: TSDB, start_ms: int, end_ms: int) -> list[Note]:
    notes: dict[tuple[str, int], Note] = {}
    budget = request_budget()
    if _flag("global", True):
        notes.update(((n.tsuid, n.start_ms), n) for n in store.global_notes(tsdb, start_ms,
                                                                             end_ms, budget))
    tsuids = [t.strip().upper() for value in request.args.getlist("tsuid")
              for t in value.split(",") if t.strip()]
    if tsuids:
        notes.update(((n.tsuid.upper(), n.start_ms), n)
                     for n in store.tsuid_notes(tsdb, tsuids, start_ms, end_ms, budget))
    for expression in request.args.getlist("m"):
        metric, filters = parse_metric_and_filters(expression.strip())
        notes.update(((n.tsuid.upper(), n.start_ms), n)
                     for n in store.metric_notes(tsdb, metric, filters, start_ms, end_ms,
                                                 budget))
    return sorted(notes.values(), key=lambda n: (n.start_ms, n.tsuid))


@bp.get("/annotation/list")
def annotation_list() -> Response:
    """Notes starting in [start, end]: global ones (``global``, default true), those of the
    series in ``tsuid`` and of the series matching each ``m=metric{tagk=filter,...}``, keeping
    only those containing ``q`` (case-insensitive) in description, notes or custom."""
    start_ms = parse_when(request.args.get("start"))
    if start_ms < 0:
        raise BadRequestError("Missing the start time value", "Pass start=<time>, e.g. 1d-ago")
    end_ms = parse_when(request.args.get("end"))
    end_ms = now_ms() if end_ms < 0 else end_ms
    if end_ms < start_ms:
        raise BadRequestError("The end timestamp cannot be less than the start timestamp")
    limit = store.listing_limit(request.args.get("limit", str(DEFAULT_LIST_LIMIT)))
    tsdb = get_tsdb()
    notes = _selected_notes(tsdb, start_ms, end_ms)
    return json_response(store.listing(tsdb, notes, start_ms, end_ms,
                                       request.args.get("q", "").strip(), limit))
