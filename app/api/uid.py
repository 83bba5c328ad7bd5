"""``/api/uid/assign`` and ``/api/uid/uidmeta`` (GET) from the UID table (``UniqueIdRpc``).

Editing UID meta data, TSMeta and renames are not served: they answer 501 with what to use.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, current_app, jsonify, request

from app.api import bp
from app.api.body import json_body, param
from app.errors import (
    BadRequestError,
    MethodNotAllowedError,
    NoSuchUniqueId,
    NotFoundError,
    StorageError,
    TsdbError,
)
from app.tsdb import TSDB
from app.tsdb.uid import NAME_FAMILY, validate_name

# The request's type names -> the UID table's kinds.
ASSIGN_TYPES = {"metric": "metrics", "tagk": "tagk", "tagv": "tagv"}
META_TYPES = {"metric": "metrics", "metrics": "metrics", "tagk": "tagk", "tagv": "tagv"}
META_QUALIFIERS = {"metrics": b"metric_meta", "tagk": b"tagk_meta", "tagv": b"tagv_meta"}


class NotImplementedYet(TsdbError):
    code = 501


def _assign_source() -> dict[str, list[str]]:
    """``{type: [names]}`` from the POST body or the comma-separated query string."""
    if request.method == "POST":
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
        source: dict[str, list[str]] = {}
        for kind, names in body.items():
            if kind not in ASSIGN_TYPES:
                raise BadRequestError(f"Invalid type requested: {kind}",
                                      "Use metric, tagk or tagv")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise BadRequestError("Unable to parse the given JSON",
                                      f"'{kind}' must be a list of names")
            if names:
                source[kind] = names
        return source
    source = {}
    for kind in ASSIGN_TYPES:
        values = param(kind)
        if values:
            names = values.split(",")
            while names and names[-1] == "":  # Java's String.split drops trailing empties
                names.pop()
            if names:
                source[kind] = names
    return source


def _assign_one(tsdb: TSDB, kind: str, name: str) -> str:
    """The new UID in hex; raises :class:`TsdbError` with OpenTSDB's per-name message."""
    validate_name(kind, name, tsdb.config["tsd.core.tag.allow_specialchars"])
    size, max_bytes = len(name.encode("utf-8")), tsdb.config["tsd.core.max_name_bytes"]
    if size > max_bytes:  # as for puts: the names a write may assign a UID to
        raise BadRequestError(f"Invalid {kind} name: {size} bytes, more than the {max_bytes} "
                              "allowed (tsd.core.max_name_bytes)")
    uids = tsdb.uids[ASSIGN_TYPES[kind]]
    existing = uids.find_id(name)
    if existing is not None:
        raise BadRequestError(f"Name already exists with UID: {existing.hex().upper()}")
    return uids.get_or_create_id(name).hex().upper()


@bp.route("/uid/assign", methods=["GET", "POST"])
def assign() -> Response:
    source = _assign_source()
    if not source:
        raise BadRequestError("Missing values to assign UIDs")
    tsdb: TSDB = current_app.extensions["tsdb"]
    body: dict[str, dict[str, str]] = {}
    failed = False
    for kind in ASSIGN_TYPES:
        if kind not in source:
            continue
        assigned, errors = {}, {}
        for name in source[kind]:
            try:
                assigned[name] = _assign_one(tsdb, kind, name)
            except StorageError:
                raise  # the store failed, not this name or line: fail the whole request
            except TsdbError as exc:
                errors[name] = exc.message
        body[kind] = dict(sorted(assigned.items()))
        if errors:
            body[f"{kind}_errors"] = dict(sorted(errors.items()))
            failed = True
    response = jsonify(body)
    response.status_code = 400 if failed else 200
    return response


def _api_method() -> str:
    """The verb, or the ``method_override`` OpenTSDB honours for uidmeta (``getAPIMethod``)."""
    override = param("method_override")
    if request.method == "GET" and override is not None:
        return override.upper()
    return request.method


@bp.route("/uid/uidmeta", methods=["GET", "POST", "PUT", "DELETE"])
def uidmeta() -> Response:
    if _api_method() != "GET":
        raise NotImplementedYet("Editing UID meta data is not implemented",
                                "pytsd serves GET /api/uid/uidmeta only; meta data written "
                                "by OpenTSDB is shown as stored")
    uid_text, type_text = param("uid"), param("type")
    if not uid_text:
        raise BadRequestError("Missing parameter <code>uid</code>")
    if not type_text:
        raise BadRequestError("Missing parameter <code>type</code>")
    kind = META_TYPES.get(type_text.lower())
    if kind is None:
        raise BadRequestError(f"Invalid type requested: {type_text}", "Use metric, tagk or tagv")
    return jsonify(uid_meta(current_app.extensions["tsdb"], kind, uid_text))


def uid_meta(tsdb: TSDB, kind: str, uid_text: str) -> dict[str, Any]:
    """OpenTSDB's UIDMeta JSON: the name, plus the stored ``<type>_meta`` cell if any."""
    uids = tsdb.uids[kind]
    try:
        uid = bytes.fromhex(uid_text)
    except ValueError:
        uid = b""
    if len(uid) != uids.width:
        raise BadRequestError(f"Invalid UID: {uid_text}",
                              f"A {kind} UID is {uids.width} bytes ({2 * uids.width} hex digits)")
    try:
        name = uids.get_name(uid)
    except NoSuchUniqueId as exc:
        raise NotFoundError("Could not find the requested UID", exc.message) from None
    meta: dict[str, Any] = {"uid": uid.hex().upper(), "type": _type_label(kind), "name": name,
                            "description": "", "notes": "", "created": 0, "custom": None,
                            "displayName": ""}
    column = NAME_FAMILY + b":" + META_QUALIFIERS[kind]
    stored = tsdb.uid_table().row(uid, [column]).get(column)
    if stored:
        meta.update(_stored_meta(stored))
    return meta


def _type_label(kind: str) -> str:
    return "METRIC" if kind == "metrics" else kind.upper()


def _stored_meta(raw: bytes) -> dict[str, Any]:
    """The user fields of a meta cell OpenTSDB wrote (``UIDMeta#getStorageJSON``)."""
    try:
        stored = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(stored, dict):
        return {}
    keys = ("displayName", "description", "notes", "created", "custom")
    return {key: stored[key] for key in keys if key in stored}


@bp.route("/uid/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
def uid_other(rest: str) -> Response:
    if rest == "assign":  # the route exists, only for other verbs
        raise MethodNotAllowedError("Method not allowed", f"The HTTP method [{request.method}] "
                                    "is not permitted for this endpoint")
    if rest.lower() in ("tsmeta", "rename"):
        raise NotImplementedYet(f"/api/uid/{rest} is not implemented",
                                "pytsd keeps no TSMeta; see docs/api.md for what is served")
    raise NotImplementedYet("Other UID endpoints have not been implemented yet")
