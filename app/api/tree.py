"""``/api/tree`` and its sub-endpoints (OpenTSDB 2.4's ``TreeRpc``): tree definitions, rules,
branches, a test run of TSUIDs through a tree, collisions and not-matched TSUIDs."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from flask import Response, current_app

from app.api import bp
from app.api.body import json_body, param
from app.api.uid import api_method, has_content, meta_response
from app.errors import BadRequestError, NoSuchUniqueId, NotFoundError
from app.jackson import jackson_string
from app.meta.codec import java_hashmap_order
from app.meta.store import NotModified, load_ts_meta
from app.meta.tree_builder import TreeBuilder
from app.meta.tree_codec import RULE_TYPES, TreeRule, tree_id_bytes
from app.meta.trees import (
    create_tree,
    delete_all_rules,
    delete_rule,
    delete_tree,
    edit_tree,
    fetch_all_trees,
    fetch_branch,
    fetch_failures,
    fetch_rule,
    fetch_tree,
    sync_rule,
)
from app.tsdb import TSDB

UNSUPPORTED = "Unsupported HTTP request method"
TREE_KEYS = {"treeid": "tree_id", "name": "name", "description": "description",
             "notes": "notes", "enabled": "enabled", "strictmatch": "strict_match",
             "storefailures": "store_failures"}
FLAGS = ("enabled", "strict_match", "store_failures")


def _tsdb() -> TSDB:
    tsdb: TSDB = current_app.extensions["tsdb"]
    return tsdb


def _tree_id(required: bool) -> int:
    text = param("treeid")
    if text is None:
        if required:
            raise BadRequestError("Missing parameter <code>treeid</code>")
        return 0
    try:
        return int(text)
    except ValueError:
        raise BadRequestError("Unable to parse 'tree' value") from None


def _must_exist(tsdb: TSDB, tree_id: int) -> None:
    if fetch_tree(tsdb, tree_id) is None:
        raise NotFoundError(f"Unable to locate tree: {tree_id}")


def _string_map(body: Any) -> dict[str, str | None]:
    """A body read as ``HashMap<String, String>`` (scalars become text)."""
    if not isinstance(body, dict) or any(isinstance(v, (dict, list)) for v in body.values()):
        raise BadRequestError("Unable to parse the given JSON", "Expected an object of strings")
    return {str(k): None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in body.items()}


# --- /api/tree ------------------------------------------------------------------------------


def _tree_request() -> tuple[int, dict[str, Any], int]:
    """``(tree ID, given fields, created)``: a body tree is ``new Tree()`` (created 0), a
    query-string one ``new Tree(id)`` (created now), as in OpenTSDB."""
    given: dict[str, Any] = {}
    if has_content():
        tree_id = 0
        for key, value in _string_map(json_body()).items():
            name = TREE_KEYS.get(key.lower())
            if name is None or value is None:
                continue
            if name == "tree_id":
                try:
                    tree_id = int(value)
                except ValueError:
                    raise BadRequestError("Unable to parse the given JSON",
                                          f"treeId: {value}") from None
            else:
                given[name] = value.lower() == "true" if name in FLAGS else value
        return tree_id, given, 0
    tree_id = _tree_id(False)
    for name in ("name", "description", "notes"):
        if param(name) is not None:
            given[name] = param(name)
    for name in FLAGS:
        if param(name) is not None:
            given[name] = (param(name) or "").lower() == "true"
    return tree_id, given, int(time.time())


@bp.route("/tree", methods=["GET", "POST", "PUT", "DELETE"])
def tree() -> Response:
    tsdb = _tsdb()
    tree_id, given, created = _tree_request()
    method = api_method()
    if method == "GET":
        if tree_id == 0:
            return meta_response("[" + ",".join(t.api_json() for t in fetch_all_trees(tsdb))
                                 + "]")
        found = fetch_tree(tsdb, tree_id)
        if found is None:
            raise NotFoundError(f"Unable to locate tree: {tree_id}")
        return meta_response(found.api_json())
    if method in ("POST", "PUT"):
        try:
            if tree_id > 0:
                _must_exist(tsdb, tree_id)
                return meta_response(edit_tree(tsdb, tree_id, given, method == "PUT").api_json())
            return meta_response(create_tree(tsdb, given, created).api_json())
        except NotModified:
            return Response(status=304)
    if method == "DELETE":
        definition = (_string_map(json_body()).get("definition") if has_content()
                      else param("definition")) or ""
        _must_exist(tsdb, tree_id)
        delete_tree(tsdb, tree_id, definition.lower() == "true")
        return Response(status=204)
    raise BadRequestError(UNSUPPORTED)


# --- /api/tree/branch -----------------------------------------------------------------------


@bp.route("/tree/branch", methods=["GET", "POST", "PUT", "DELETE"])
def tree_branch() -> Response:
    if api_method() != "GET":
        raise BadRequestError(UNSUPPORTED)
    tree_id = _tree_id(False)
    branch_hex = param("branch")
    if not branch_hex:
        if tree_id < 1:
            raise BadRequestError("Missing or invalid branch and tree IDs")
        branch_id = _id_bytes(tree_id)
    else:
        if len(branch_hex) < 4:
            raise BadRequestError("Branch ID was too short")
        try:
            branch_id = bytes.fromhex(branch_hex if len(branch_hex) % 2 == 0
                                      else "0" + branch_hex)
        except ValueError:
            raise BadRequestError(f"Invalid branch ID: {branch_hex}") from None
    branch = fetch_branch(_tsdb(), branch_id, True)
    if branch is None:
        raise NotFoundError(f"Unable to locate branch '{branch_id.hex().upper()}' for tree "
                            f"'{int.from_bytes(branch_id[:2], 'big')}'")
    return meta_response(branch.api_json())


def _id_bytes(tree_id: int) -> bytes:
    try:
        return tree_id_bytes(tree_id)
    except ValueError:
        raise BadRequestError("Missing or invalid tree ID") from None


# --- /api/tree/rule and /api/tree/rules -----------------------------------------------------

RULE_BODY = {"treeId": ("tree_id", "int"), "level": ("level", "int"),
             "order": ("order", "int"), "type": ("type", "type"), "field": ("field", "str"),
             "customField": ("custom_field", "str"), "regex": ("regex", "regex"),
             "separator": ("separator", "str"), "description": ("description", "str"),
             "notes": ("notes", "str"), "regexGroupIdx": ("regex_group_idx", "int"),
             "displayFormat": ("display_format", "str")}


def _rule_value(name: str, kind: str, value: Any, message: str) -> Any:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise BadRequestError(message)
        try:
            number = int(value)
        except ValueError:
            raise BadRequestError(message) from None
        if name in ("level", "order") and number < 0:
            raise BadRequestError(f"Negative {name}s are not allowed")
        return number
    if not isinstance(value, str):
        raise BadRequestError(message)
    if kind == "type":
        if value.upper() not in RULE_TYPES:
            raise BadRequestError(message, "Unrecognized rule type")
        return value.upper()
    if kind == "regex" and value:
        try:
            re.compile(value)
        except re.error as exc:
            raise BadRequestError(message, str(exc)) from None
    return value


def rule_from_body(body: Any) -> tuple[TreeRule, set[str]]:
    """A rule and the fields its setters would mark changed (Jackson binds through them)."""
    if not isinstance(body, dict):
        raise BadRequestError("Unable to parse the given JSON", "Expected a rule object")
    values: dict[str, Any] = {}
    for key, (name, kind) in RULE_BODY.items():
        if key in body and body[key] is not None:
            values[name] = _rule_value(name, kind, body[key], "Unable to parse the given JSON")
    return _rule_and_changes(values)


def _rule_and_changes(values: dict[str, Any]) -> tuple[TreeRule, set[str]]:
    defaults = TreeRule()
    changed = {name for name, value in values.items()
               if name != "tree_id" and value != getattr(defaults, name)}
    return TreeRule(**values), changed


def _rule_from_query() -> tuple[TreeRule, set[str]]:
    values: dict[str, Any] = {"tree_id": _tree_id(True)}
    for name, kind in RULE_BODY.values():
        text_key = "custom_field" if name == "custom_field" else name
        if name in ("tree_id", "level", "order"):
            continue
        text = param(text_key)
        if text is not None:
            values[name] = _rule_value(name, kind, text, f"Unable to parse the '{text_key}' "
                                       "parameter")
    for name in ("level", "order"):
        text = param(name)
        if text is None:
            raise BadRequestError(f"Missing parameter <code>{name}</code>")
        values[name] = _rule_value(name, "int", text, f"Unable to parse the '{name}' parameter")
    return _rule_and_changes(values)


@bp.route("/tree/rule", methods=["GET", "POST", "PUT", "DELETE"])
def tree_rule() -> Response:
    tsdb = _tsdb()
    rule, changed = rule_from_body(json_body()) if has_content() else _rule_from_query()
    method = api_method()
    _id_or_400(rule.tree_id)
    _must_exist(tsdb, rule.tree_id)
    if method == "GET":
        found = fetch_rule(tsdb, rule.tree_id, rule.level, rule.order)
        if found is None:
            raise NotFoundError(f"Unable to locate rule: {rule}")
        return meta_response(found.json_text())
    if method in ("POST", "PUT"):
        try:
            return meta_response(sync_rule(tsdb, rule, changed, method == "PUT").json_text())
        except NotModified:
            return Response(status=304)
    if method == "DELETE":
        if fetch_rule(tsdb, rule.tree_id, rule.level, rule.order) is None:
            raise NotFoundError(f"Unable to locate rule: {rule}")
        delete_rule(tsdb, rule.tree_id, rule.level, rule.order)
        return Response(status=204)
    raise BadRequestError(UNSUPPORTED)


def _id_or_400(tree_id: int) -> None:
    try:
        tree_id_bytes(tree_id)
    except ValueError:
        raise BadRequestError("Invalid Tree ID") from None


@bp.route("/tree/rules", methods=["GET", "POST", "PUT", "DELETE"])
def tree_rules() -> Response:
    tsdb = _tsdb()
    rules: list[tuple[TreeRule, set[str]]] = []
    if has_content():
        body = json_body()
        if not isinstance(body, list):
            raise BadRequestError("Unable to parse the given JSON", "Expected a list of rules")
        rules = [rule_from_body(item) for item in body]
        if not rules:
            raise BadRequestError("Missing tree rules")
        tree_id = rules[0][0].tree_id
        if any(rule.tree_id != tree_id for rule, _ in rules):
            raise BadRequestError("All rules must belong to the same tree")
    else:
        tree_id = _tree_id(False)
    _id_or_400(tree_id)
    _must_exist(tsdb, tree_id)
    method = api_method()
    if method in ("POST", "PUT"):
        if not rules:
            raise BadRequestError("Missing tree rules")
        if method == "PUT":
            delete_all_rules(tsdb, tree_id)
        for rule, changed in rules:
            try:
                sync_rule(tsdb, rule, changed, method == "PUT")
            except NotModified:
                continue  # OpenTSDB answers 500 for an unchanged rule in the list
        return Response(status=204)
    if method == "DELETE":
        delete_all_rules(tsdb, tree_id)
        return Response(status=204)
    raise BadRequestError(UNSUPPORTED)


# --- /api/tree/test, /api/tree/collisions, /api/tree/notmatched -------------------------------


def _tsuids_request() -> tuple[int, list[str] | None]:
    """``(tree ID, TSUIDs or None)`` from a ``{"treeId", "tsuids"}`` body or the query."""
    if has_content():
        body = json_body()
        if not isinstance(body, dict):
            raise BadRequestError("Unable to parse the given JSON", "Expected an object")
        tree_id, tsuids = body.get("treeId"), body.get("tsuids")
        if not isinstance(tree_id, int) or isinstance(tree_id, bool):
            raise BadRequestError("Missing or invalid Tree ID")
        if tsuids is not None and (not isinstance(tsuids, list)
                                   or not all(isinstance(t, str) for t in tsuids)):
            raise BadRequestError("Unable to convert the given data to a list")
        return tree_id, tsuids
    tree_id = _tree_id(True)
    text = param("tsuids")
    return tree_id, [t for t in text.split(",")] if text is not None else None


@bp.route("/tree/test", methods=["GET", "POST", "PUT", "DELETE"])
def tree_test() -> Response:
    tsdb = _tsdb()
    tree_id, tsuids = _tsuids_request()
    _id_or_400(tree_id)
    found = fetch_tree(tsdb, tree_id)
    if found is None:
        raise NotFoundError(f"Unable to locate tree: {tree_id}")
    if not tsuids:
        raise BadRequestError("Missing or empty TSUID list")
    if api_method() not in ("GET", "POST", "PUT"):
        raise BadRequestError(UNSUPPORTED)
    builder = TreeBuilder(tsdb, found)
    results: dict[str, dict[str, str]] = {}
    processed = set()
    for tsuid in tsuids:
        results[tsuid] = _test_one(tsdb, builder, tsuid)
        if "branch" not in results[tsuid]:
            processed.add(tsuid)
    # OpenTSDB puts the builder's one root object in every result and serialises them all at
    # the end: each processed TSUID shows the root as the last run left it.
    root = builder.root.api_json() if builder.root is not None else "null"
    for tsuid in processed:
        results[tsuid]["branch"] = root
    text = "{" + ",".join(
        f"{jackson_string(tsuid)}:" + "{" + ",".join(
            f'"{key}":{results[tsuid][key]}' for key in java_hashmap_order(results[tsuid], 16))
        + "}" for tsuid in java_hashmap_order(results)) + "}"
    return meta_response(text)


def _test_one(tsdb: TSDB, builder: TreeBuilder, tsuid_text: str) -> dict[str, str]:
    failed = {"branch": "null", "meta": "null"}
    try:
        tsuid = bytes.fromhex(tsuid_text)
        meta = load_ts_meta(tsdb, tsuid)
    except ValueError:
        return {**failed, "messages": json.dumps([f"Invalid TSUID: {tsuid_text}"])}
    except NoSuchUniqueId as exc:
        return {**failed, "messages": json.dumps(
            [f"TSUID was missing a UID name: {exc.message}"], ensure_ascii=False)}
    if meta is None:
        return {**failed, "messages": json.dumps(["Unable to locate TSUID meta data"])}
    builder.process(meta, is_testing=True)
    return {"meta": meta.api_json(),
            "messages": "[" + ",".join(jackson_string(m) for m in builder.messages) + "]"}


def _failures(collisions: bool) -> Response:
    tree_id, tsuids = _tsuids_request()
    _id_or_400(tree_id)
    tsdb = _tsdb()
    _must_exist(tsdb, tree_id)
    if api_method() not in ("GET", "POST", "PUT"):
        raise BadRequestError(UNSUPPORTED)
    found = fetch_failures(tsdb, tree_id, tsuids, collisions)
    return meta_response("{" + ",".join(f"{jackson_string(k)}:{jackson_string(found[k])}"
                                        for k in java_hashmap_order(found)) + "}")


@bp.route("/tree/collisions", methods=["GET", "POST", "PUT", "DELETE"])
def tree_collisions() -> Response:
    return _failures(True)


@bp.route("/tree/notmatched", methods=["GET", "POST", "PUT", "DELETE"])
def tree_not_matched() -> Response:
    return _failures(False)


@bp.route("/tree/<path:rest>", methods=["GET", "POST", "PUT", "DELETE"])
def tree_other(rest: str) -> Response:
    lowered = rest.lower()
    handlers = {"branch": tree_branch, "rule": tree_rule, "rules": tree_rules,
                "test": tree_test, "collisions": tree_collisions,
                "notmatched": tree_not_matched}
    if lowered in handlers:
        return handlers[lowered]()
    raise NotFoundError("This endpoint is not supported")

