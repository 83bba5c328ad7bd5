"""``/api/uid/assign``, ``/api/uid/uidmeta`` and ``/api/uid/rename`` (``UniqueIdRpc``);
``/api/uid/tsmeta`` is in :mod:`app.api.tsmeta`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

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
from app.meta.codec import KIND_OF_TYPE, java_hashmap_order
from app.meta.store import NotModified, delete_uid_meta, load_uid_meta, sync_uid_meta
from app.tsdb import TSDB
from app.tsdb.uid import validate_name

# The request's type names -> the UID table's kinds.
ASSIGN_TYPES = {"metric": "metrics", "tagk": "tagk", "tagv": "tagv"}


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


def api_method() -> str:
    """The verb, or the ``method_override`` OpenTSDB honours for meta (``getAPIMethod``)."""
    override = param("method_override")
    if request.method == "GET" and override is not None:
        return override.upper()
    return request.method


def meta_response(text: str, status: int = 200) -> Response:
    """A meta object's JSON, as Jackson wrote it (field order, quoted NaN)."""
    return Response(text, status=status, mimetype="application/json; charset=UTF-8")


def has_content() -> bool:
    return bool(request.get_data(cache=True).strip())


@bp.route("/uid/uidmeta", methods=["GET", "POST", "PUT", "DELETE"])
def uidmeta() -> Response:
    method = api_method()
    tsdb: TSDB = current_app.extensions["tsdb"]
    if method == "GET":
        kind, uid = _uid_of(required_param("uid"), _kind_of(required_param("type")), tsdb)
        return meta_response(_found(lambda: load_uid_meta(tsdb, kind, uid)).api_json())
    if method not in ("POST", "PUT", "DELETE"):
        raise MethodNotAllowedError("Method not allowed", f"The HTTP method [{method}] is not "
                                    "permitted for this endpoint")
    uid_text, type_text, given = _uid_meta_request()
    if method == "DELETE":
        if not uid_text or type_text is None:
            raise BadRequestError("Unable to delete UIDMeta information",
                                  "Missing UID" if not uid_text else "Missing type")
        kind, uid = _uid_of(uid_text, _kind_of(type_text), tsdb)
        delete_uid_meta(tsdb, kind, uid)
        return Response(status=204)
    if not uid_text:
        raise BadRequestError("Missing UID")
    if type_text is None:
        raise BadRequestError("Missing type")
    kind, uid = _uid_of(uid_text, _kind_of(type_text), tsdb)
    try:
        meta = _found(lambda: sync_uid_meta(tsdb, kind, uid, given, method == "PUT"))
    except NotModified:
        return Response(status=304)
    return meta_response(meta.api_json())


def required_param(name: str) -> str:
    value = param(name)
    if not value:
        raise BadRequestError(f"Missing parameter <code>{name}</code>")
    return value


def _kind_of(type_text: str) -> str:
    kind = KIND_OF_TYPE.get(type_text.lower())
    if kind is None:
        raise BadRequestError(f"Invalid type requested: {type_text}", "Use metric, tagk or tagv")
    return kind


def _uid_of(uid_text: str, kind: str, tsdb: TSDB) -> tuple[str, bytes]:
    width = tsdb.uids[kind].width
    try:
        uid = bytes.fromhex(uid_text)
    except ValueError:
        uid = b""
    if len(uid) != width:
        raise BadRequestError(f"Invalid UID: {uid_text}",
                              f"A {kind} UID is {width} bytes ({2 * width} hex digits)")
    return kind, uid


T = TypeVar("T")


def _found(load: Callable[[], T]) -> T:
    try:
        return load()
    except NoSuchUniqueId as exc:
        raise NotFoundError("Could not find the requested UID", exc.message) from None


def _uid_meta_request() -> tuple[str, str | None, dict[str, Any]]:
    """``(uid, type, changed user fields)`` from the JSON body or the query string."""
    if not has_content():
        uid_text, type_text = required_param("uid"), required_param("type")
        given = {field: param(field) for field in ("display_name", "description", "notes")
                 if param(field) is not None}
        return uid_text, type_text, given
    body = json_body()
    if not isinstance(body, dict):
        raise BadRequestError("Unable to parse the given JSON", "Expected a JSON object")
    given = parse_meta_fields(body, UID_BODY_FIELDS)
    uid_text, raw_type = body.get("uid") or "", body.get("type")
    if not isinstance(uid_text, str) or not isinstance(raw_type, (str, type(None))):
        raise BadRequestError("Unable to parse the given JSON", "uid and type are strings")
    if raw_type is not None and raw_type.lower() not in KIND_OF_TYPE:
        raise BadRequestError("Unable to parse the given JSON",
                              f"Invalid type requested: {raw_type}")
    return uid_text, raw_type, given


# The JSON names of the user fields -> (field, the Java type Jackson reads).
UID_BODY_FIELDS: dict[str, tuple[str, str]] = {
    "displayName": ("display_name", "string"), "description": ("description", "string"),
    "notes": ("notes", "string"), "custom": ("custom", "map"), "created": ("created", "long")}


def parse_meta_fields(body: dict[str, Any], fields: dict[str, tuple[str, str]]
                      ) -> dict[str, Any]:
    """The given user fields, checked as Jackson binds them (a wrong type is a 400)."""
    given: dict[str, Any] = {}
    for key, (name, java_type) in fields.items():
        if key not in body:
            continue
        value = body[key]
        if value is None and java_type in ("string", "map"):
            given[name] = None if java_type == "map" else ""
            continue
        given[name] = _bound(key, value, java_type)
    return given


def _bound(key: str, value: Any, java_type: str) -> Any:
    ok = {"string": isinstance(value, (str, int, float)) and not isinstance(value, bool),
          "long": isinstance(value, int) and not isinstance(value, bool),
          "double": isinstance(value, (int, float)) and not isinstance(value, bool)
          or value in ("NaN", "Infinity", "-Infinity"),
          "map": isinstance(value, dict)
          and all(isinstance(v, (str, type(None))) for v in value.values())}[java_type]
    if not ok:
        raise BadRequestError("Unable to parse the given JSON",
                              f"'{key}' cannot be read as a {java_type}")
    if java_type == "string":
        return value if isinstance(value, str) else json.dumps(value)
    if java_type == "double":
        return float(value)
    if java_type == "map":
        return {str(k): "" if v is None else v for k, v in value.items()}
    return value


# --- /api/uid/rename --------------------------------------------------------------------------


@bp.route("/uid/rename", methods=["GET", "POST", "PUT", "DELETE"])
def rename() -> Response:
    if request.method not in ("GET", "POST"):
        raise MethodNotAllowedError("Method not allowed", f"The HTTP method[{request.method}] "
                                    "is not permitted for this endpoint")
    source = _rename_source()
    kind_name = old_name = new_name = None
    for key in java_hashmap_order(source):  # the last type in HashMap order wins, as there
        if key == "name":
            new_name = source[key]
        else:
            kind_name, old_name = key, source[key]
    if kind_name is None or old_name is None or new_name is None:
        raise BadRequestError("Missing necessary values to rename UID")
    tsdb: TSDB = current_app.extensions["tsdb"]
    try:
        rename_uid(tsdb, kind_name, old_name, new_name)
    except StorageError:
        raise
    except TsdbError as exc:
        # A HashMap whose two keys share a bucket: they iterate as inserted.
        body = {"result": "false", "error": exc.message}
        return meta_response(json.dumps(body, ensure_ascii=False, separators=(",", ":")), 400)
    return meta_response('{"result":"true"}')


def _rename_source() -> dict[str, str]:
    if request.method == "POST":
        text = request.get_data(cache=True).strip()
        if not text:
            raise BadRequestError("Missing message content",
                                  "Supply valid JSON formatted data in the body of your request")
        body = json_body()
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            raise BadRequestError("Unable to parse the given JSON",
                                  "Expected an object of strings")
        return body
    return {key: value for key in ("metric", "tagk", "tagv", "name")
            if (value := param(key) or "")}


def rename_uid(tsdb: TSDB, kind_name: str, old_name: str, new_name: str) -> None:
    """``TSDB.renameUid``: both names checked, the old one must exist."""
    specials = tsdb.config["tsd.core.tag.allow_specialchars"]
    validate_name(kind_name, old_name, specials)
    validate_name(kind_name, new_name, specials)
    kind = {"metric": "metrics", "tagk": "tagk", "tagv": "tagv"}.get(kind_name.lower())
    if kind is None:
        raise BadRequestError("Unknown type name")
    uids = tsdb.uids[kind]
    if uids.find_id(old_name) is None:
        raise BadRequestError(f'Name("{old_name}") does not exist')
    uids.rename(old_name, new_name, tsdb.uid_table_name)


@bp.route("/uid/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
def uid_other(rest: str) -> Response:
    if rest == "assign":  # the route exists, only for other verbs
        raise MethodNotAllowedError("Method not allowed", f"The HTTP method [{request.method}] "
                                    "is not permitted for this endpoint")
    lowered = rest.lower()
    if lowered == "uidmeta":
        return uidmeta()
    if lowered == "rename":
        return rename()
    raise NotImplementedYet("Other UID endpoints have not been implemented yet")
