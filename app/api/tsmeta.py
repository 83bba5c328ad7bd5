"""``/api/uid/tsmeta``: a series' meta data in ``tsdb-meta`` (``UniqueIdRpc#handleTSMeta``).

GET ``tsuid=`` one object, or ``m=metric{tagk=tagv,...}`` the list of every TSMeta of the
metric holding those tag pairs; POST (the given fields) and PUT (all fields) edit one, by
``tsuid`` or by ``m=`` (``create=true`` stores a new one); DELETE removes the object (its
counter stays). Answers, codes and messages are OpenTSDB 2.4's.
"""

from __future__ import annotations

import struct
from typing import Any

from flask import Response, current_app

from app.api import bp
from app.api.body import json_body, param
from app.api.uid import api_method, has_content, meta_response, parse_meta_fields
from app.errors import (
    BadRequestError,
    MethodNotAllowedError,
    NoSuchUniqueId,
    NoSuchUniqueName,
    NotFoundError,
)
from app.meta.store import (
    NotModified,
    delete_ts_meta,
    load_ts_meta,
    scan_ts_metas,
    store_new_ts_meta,
    sync_ts_meta,
    ts_meta_exists,
)
from app.tsdb import TSDB
from app.tsdb.lookup import parse_lookup_m
from app.tsdb.tsuid import parse_tsuid

TS_BODY_FIELDS: dict[str, tuple[str, str]] = {
    "displayName": ("display_name", "string"), "description": ("description", "string"),
    "notes": ("notes", "string"), "custom": ("custom", "map"), "created": ("created", "long"),
    "units": ("units", "string"), "dataType": ("data_type", "string"),
    "retention": ("retention", "long"), "max": ("max", "double"), "min": ("min", "double")}
TEXT_PARAMS = ("display_name", "description", "notes", "units", "data_type")
UIDS_MISSING = "Unable to find one of the UIDs"
# A DeferredGroupException's message: the first of the group's failures is its cause.
DEFERRED_GROUP_FAILED = "At least one of the Deferreds failed, first exception:"


@bp.route("/uid/tsmeta", methods=["GET", "POST", "PUT", "DELETE"])
def tsmeta() -> Response:
    tsdb: TSDB = current_app.extensions["tsdb"]
    method = api_method()
    if method == "GET":
        return _get(tsdb)
    if method in ("POST", "PUT"):
        tsuid_text, given = _tsmeta_request()
        try:
            return meta_response(_edit(tsdb, tsuid_text, given, method == "PUT").api_json())
        except NotModified:
            return Response(status=304)
        except (NoSuchUniqueId, NoSuchUniqueName) as exc:
            raise NotFoundError("Unable to find one or more UIDs", exc.message) from None
    if method == "DELETE":
        tsuid_text, _ = _tsmeta_request()
        if not tsuid_text:
            raise BadRequestError("Unable to delete TSMeta information", "Missing UID")
        delete_ts_meta(tsdb, parse_tsuid(tsdb.layout, tsuid_text))
        return Response(status=204)
    raise MethodNotAllowedError("Method not allowed", f"The HTTP method [{method}] is not "
                                "permitted for this endpoint")


def _get(tsdb: TSDB) -> Response:
    tsuid_text = param("tsuid")
    if tsuid_text is not None:
        tsuid = parse_tsuid(tsdb.layout, tsuid_text)
        try:
            meta = load_ts_meta(tsdb, tsuid)
        except NoSuchUniqueId as exc:
            raise NotFoundError(UIDS_MISSING, exc.message) from None
        if meta is None:
            raise NotFoundError("Could not find Timeseries meta data")
        return meta_response(meta.api_json())
    m = param("m")
    if not m:
        raise BadRequestError("Missing parameter <code>m</code>")
    metric_uid, tag_uids = _series_uids(tsdb, m, group=True)
    metas = scan_ts_metas(tsdb, metric_uid, [k + v for k, v in sorted(tag_uids.items())])
    return meta_response("[" + ",".join(meta.api_json() for meta in metas) + "]")


def _series_uids(tsdb: TSDB, m: str, group: bool = False) -> tuple[bytes, dict[bytes, bytes]]:
    """The metric UID and the tag UIDs of ``metric{k=v,...}``, every name taken literally (a
    ``*`` too). The metric is resolved first (unknown: 404); on a GET (``group``), the tags
    together, as ``TSUIDQuery`` does in a Deferred group whose failure OpenTSDB answers as a
    400 with the group's message."""
    metric, pairs = parse_lookup_m(m)
    if metric is None:
        raise NotFoundError(UIDS_MISSING, "TSMeta queries name a metric")
    try:
        metric_uid = tsdb.metrics.get_id(metric)
    except NoSuchUniqueName as exc:
        raise NotFoundError(UIDS_MISSING, exc.message) from None
    try:
        return metric_uid, {tsdb.tagk.get_id("*" if k is None else str(k)):
                            tsdb.tagv.get_id("*" if v is None else str(v)) for k, v in pairs}
    except NoSuchUniqueName as exc:
        if group:
            raise BadRequestError(DEFERRED_GROUP_FAILED, exc.message) from None
        raise NotFoundError(UIDS_MISSING, exc.message) from None


def _edit(tsdb: TSDB, tsuid_text: str, given: dict[str, Any], overwrite: bool) -> Any:
    if tsuid_text:
        return sync_ts_meta(tsdb, parse_tsuid(tsdb.layout, tsuid_text), given, overwrite)
    m = param("m")
    if not m:
        raise BadRequestError("Missing parameter <code>m</code>")
    metric_uid, tag_uids = _series_uids(tsdb, m)
    tsuid = metric_uid + b"".join(k + v for k, v in sorted(tag_uids.items()))
    if ts_meta_exists(tsdb, tsuid):
        return sync_ts_meta(tsdb, tsuid, given, overwrite)
    if param("create") == "true":
        meta = store_new_ts_meta(tsdb, tsuid, given, given.get("created", 0),
                                 counter_if_missing=True)
        tsdb.new_ts_meta(tsuid)  # through the trees, when tsd.core.tree.enable_processing
        return meta
    raise BadRequestError('Could not find TSMeta, specify "create=true" to create a new one.')


def _tsmeta_request() -> tuple[str, dict[str, Any]]:
    """``(tsuid or "", the given user fields)`` from the JSON body or the query string."""
    if has_content():
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
        tsuid = body.get("tsuid") or ""
        if not isinstance(tsuid, str):
            raise BadRequestError("Unable to parse the given JSON", "tsuid is a string")
        return tsuid, parse_meta_fields(body, TS_BODY_FIELDS)
    given: dict[str, Any] = {name: param(name) for name in TEXT_PARAMS
                             if param(name) is not None}
    retention = param("retention")
    if retention:
        try:
            given["retention"] = int(retention)
        except ValueError:
            raise BadRequestError("Unable to parse 'retention' value") from None
    for name in ("max", "min"):
        text = param(name)
        if text:
            given[name] = _java_float(text, name)
    return param("tsuid") or "", given


def _java_float(text: str, name: str) -> float:
    """``Float.parseFloat`` widened to a double, as ``parseTSMetaQS`` reads max and min."""
    try:
        value = float(text.strip().rstrip("fFdD"))
    except ValueError:
        raise BadRequestError(f"Unable to parse '{name}' value") from None
    if value != value or abs(value) == float("inf"):
        return value
    try:
        return float(struct.unpack(">f", struct.pack(">f", value))[0])
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")

