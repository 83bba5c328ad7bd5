"""``/api/search/lookup``: series of a metric and/or tags, without ``tsdb-meta`` (``SearchRpc``);
the other search types, without a plugin, from :mod:`app.meta.search`.

GET ``m=metric{k=v,...}`` (see :mod:`app.tsdb.lookup` for the grammar), ``limit``, and pytsd's
``start``/``end`` (any ``/api/query`` time format) bounding the scan in time. POST the JSON
``{"metric", "tags": [{"key", "value"}], "limit", "start", "end"}``. ``useMeta`` is accepted and
ignored: the data table is always used.
"""

from __future__ import annotations

import json
import time
from typing import Any

from flask import Response, current_app, jsonify, request

from app.api import bp
from app.api.body import json_body, param, parse_int_param
from app.api.budget import request_budget
from app.errors import BadRequestError, TsdbError
from app.meta import search as meta_search
from app.query.timeparse import parse_duration_ms, parse_time
from app.tsdb import TSDB
from app.tsdb.lookup import Pair, lookup_series, name_series, parse_lookup_m

PLUGIN_TYPES = ("tsmeta", "tsmeta_summary", "tsuids", "uidmeta", "annotation")


def parse_limit(raw: Any, default: int) -> int:
    limit = parse_int_param(raw, "Unable to convert 'limit' to a valid number")
    if limit is None:
        return default
    if limit < 0:
        raise BadRequestError("Unable to convert 'limit' to a valid number",
                              "limit must be 0 (the default) or more")
    return limit or default


def _time_s(raw: Any, name: str, now_ms: int, tz: str) -> int | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise BadRequestError(f"Invalid '{name}' time: {raw}")
    return parse_time(str(raw), now_ms, tz) // 1000


def _pairs_from_json(tags: Any) -> list[Pair]:
    if tags is None:
        return []
    if not isinstance(tags, list) or not all(isinstance(t, dict) for t in tags):
        raise BadRequestError("Unable to parse the given JSON",
                              'tags must be a list of {"key": ..., "value": ...} objects')
    pairs: list[Pair] = []
    for tag in tags:
        key, value = tag.get("key"), tag.get("value")
        if not isinstance(key, (str, type(None))) or not isinstance(value, (str, type(None))):
            raise BadRequestError("Unable to parse the given JSON",
                                  "tag keys and values must be strings or null")
        pairs.append((key, value))
    return pairs


def _lookup_request() -> dict[str, Any]:
    """The request's lookup, from the JSON body (POST with content) or the query string."""
    if request.method == "POST" and request.get_data(cache=True).strip():
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
        metric = body.get("metric", "*")
        if not isinstance(metric, (str, type(None))):
            raise BadRequestError("Unable to parse the given JSON", "metric must be a string")
        return {"metric": None if metric in (None, "", "*") else metric,
                "tags": _pairs_from_json(body.get("tags")), "limit": body.get("limit"),
                "start": body.get("start"), "end": body.get("end")}
    m = param("m")
    if not m:
        raise BadRequestError("Missing parameter <code>m</code>")
    metric, pairs = parse_lookup_m(m)
    return {"metric": metric, "tags": pairs, "limit": param("limit"),
            "start": param("start"), "end": param("end")}


def _time_bounds(tsdb: TSDB, raw_start: Any, raw_end: Any) -> tuple[int | None, int | None]:
    now_ms = time.time_ns() // 1_000_000
    tz = tsdb.config["tsd.core.timezone"]
    start_s = _time_s(raw_start, "start", now_ms, tz)
    end_s = _time_s(raw_end, "end", now_ms, tz)
    window = tsdb.config["tsd.search.lookup.default_window"]
    if start_s is None and window:
        try:
            start_s = (now_ms - parse_duration_ms(window)) // 1000
        except BadRequestError as exc:
            raise TsdbError("Invalid value for tsd.search.lookup.default_window",
                            exc.message) from None
    if start_s is not None and end_s is not None and end_s < start_s:
        raise BadRequestError(f"End time [{end_s}] must be greater than the start time "
                              f"[{start_s}]")
    return start_s, end_s


@bp.route("/search/lookup", methods=["GET", "POST"])
def lookup() -> Response:
    tsdb: TSDB = current_app.extensions["tsdb"]
    spec = _lookup_request()
    limit = parse_limit(spec["limit"], tsdb.config["tsd.search.lookup.default_limit"])
    start_s, end_s = _time_bounds(tsdb, spec["start"], spec["end"])
    result = lookup_series(tsdb, spec["metric"], spec["tags"], limit, start_s, end_s,
                           request_budget())
    body: dict[str, Any] = {"type": "LOOKUP"}
    if spec["metric"] is not None:
        body["metric"] = spec["metric"]
    body.update({
        "tags": [{"key": key, "value": value} for key, value in spec["tags"]],
        "limit": limit,
        "time": round(result.elapsed_ms, 3),
        "results": [{"tsuid": s.tsuid, "metric": s.metric, "tags": s.tags}
                    for s in result.series],
        "startIndex": 0,
        "totalResults": len(result.series),
    })
    return jsonify(body)


@bp.route("/search/<search_type>", methods=["GET", "POST"])
def search_other(search_type: str) -> Response:
    if search_type.lower() == "lookup":  # OpenTSDB matches the type case-insensitively
        return lookup()
    if search_type.lower() in PLUGIN_TYPES:
        return _search(search_type.lower())
    raise BadRequestError("Invalid search query type supplied", f"Unknown type: {search_type}")


# --- tsmeta, tsmeta_summary, tsuids, uidmeta, annotation ------------------------------------


def _search_request() -> tuple[str, int, int]:
    """``(query, limit, start index)`` from the JSON body or the query string."""
    if request.method == "POST" and request.get_data(cache=True).strip():
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
        query = body.get("query") or "*"
        if not isinstance(query, str):
            raise BadRequestError("Unable to parse the given JSON", "query must be a string")
        raw_limit, raw_index = body.get("limit"), body.get("startIndex")
    else:
        query = param("query") or ""
        if not query:
            raise BadRequestError("Missing parameter <code>query</code>")
        raw_limit, raw_index = param("limit"), param("start_index")
    limit = parse_int_param(raw_limit, "Unable to convert 'limit' to a valid number")
    index = parse_int_param(raw_index, "Unable to convert 'start_index' to a valid number")
    if (limit is not None and limit < 0) or (index is not None and index < 0):
        raise BadRequestError("Unable to convert 'limit' to a valid number" if index is None
                              or index >= 0 else
                              "Unable to convert 'start_index' to a valid number",
                              "limit and start_index are 0 or more")
    return query, 25 if limit is None else limit, index or 0


def _search(search_type: str) -> Response:
    tsdb: TSDB = current_app.extensions["tsdb"]
    query, limit, start_index = _search_request()
    started = time.monotonic()
    terms = meta_search.parse_search_query(query)
    total, results = _search_results(tsdb, search_type, terms, limit, start_index)
    elapsed_ms = float(round((time.monotonic() - started) * 1000))
    fields = [("type", json.dumps(search_type.upper())),
              ("query", json.dumps(query, ensure_ascii=False)), ("metric", '"*"'),
              ("limit", str(limit)), ("time", repr(elapsed_ms)),
              ("results", "[" + ",".join(results) + "]"), ("startIndex", str(start_index)),
              ("totalResults", str(total))]
    text = "{" + ",".join(f'"{key}":{value}' for key, value in fields) + "}"
    return Response(text, mimetype="application/json; charset=UTF-8")


def _search_results(tsdb: TSDB, search_type: str, terms: meta_search.SearchTerms, limit: int,
                    start_index: int) -> tuple[int, list[str]]:
    """The number of hits and the JSON of the page ``[start_index, start_index + limit)``."""
    end = start_index + limit
    if search_type == "uidmeta":
        uids = meta_search.search_uid_metas(tsdb, terms)
        metas = (meta_search.uid_meta_or_none(tsdb, kind, uid)
                 for kind, uid in uids[start_index:end])
        return len(uids), [meta.api_json() for meta in metas if meta is not None]
    if search_type == "annotation":
        notes = meta_search.search_notes(tsdb, terms)
        return len(notes), [json.dumps(note.api_json(), ensure_ascii=False,
                                       separators=(",", ":")) for note in notes[start_index:end]]
    tsuids = meta_search.search_tsuids(tsdb, terms, request_budget())
    page = tsuids[start_index:end]
    if search_type == "tsuids":
        return len(tsuids), [json.dumps(tsuid.hex().upper()) for tsuid in page]
    if search_type == "tsmeta":
        ts_metas = (meta_search.ts_meta_or_default(tsdb, tsuid) for tsuid in page)
        return len(tsuids), [meta.api_json() for meta in ts_metas if meta is not None]
    summaries = (name_series(tsdb, tsuid) for tsuid in page)
    return len(tsuids), [json.dumps({"tsuid": s.tsuid, "metric": s.metric, "tags": s.tags},
                                    ensure_ascii=False, separators=(",", ":"))
                         for s in summaries if s is not None]
