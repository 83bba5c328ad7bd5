"""Trees in storage: definitions, rules, branches, leaves, collisions (``Tree``, ``TreeRule``,
``Branch``, ``Leaf``). Edits are OpenTSDB's: the fields a request *changed*; POST keeps the
others, PUT (``overwrite``) resets them; a compare-and-set against the stored bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.errors import BadRequestError, NoSuchUniqueId, TsdbError
from app.meta.store import NotModified
from app.meta.tree_codec import (
    BRANCH_COLUMN,
    COLLISION_PREFIX,
    COLLISION_ROW_SUFFIX,
    LEAF_PREFIX,
    NOT_MATCHED_PREFIX,
    NOT_MATCHED_ROW_SUFFIX,
    RULE_PREFIX,
    TREE_COLUMN,
    TREE_ID_BYTES,
    Branch,
    Leaf,
    Tree,
    TreeRule,
    branch_from_json,
    rule_from_json,
    rule_qualifier,
    tree_from_json,
    tree_id_bytes,
    tree_id_of,
)
from app.storage.base import Row
from app.tsdb import TSDB
from app.tsdb.tsuid import tsuid_tags

TREE_FIELDS = ("name", "description", "notes", "strict_match", "enabled", "store_failures")
RULE_FIELDS = ("type", "field", "custom_field", "regex", "separator", "description", "notes",
               "regex_group_idx", "display_format")


class SaveFailed(TsdbError):
    code = 500


def _id_bytes(tree_id: int) -> bytes:
    try:
        return tree_id_bytes(tree_id)
    except ValueError:
        raise BadRequestError("Invalid Tree ID") from None


# --- trees ----------------------------------------------------------------------------------


def _tree_of_row(row: bytes, cells: Row) -> Tree | None:
    tree = Tree(tree_id=tree_id_of(row))
    found = False
    for column, value in cells.items():
        qualifier = column[2:]
        if column == TREE_COLUMN:
            stored = tree_from_json(tree.tree_id, _json(value))
            tree = replace(stored, rules=tree.rules)
            found = True
        elif qualifier.startswith(RULE_PREFIX) and len(qualifier) > len(RULE_PREFIX):
            tree.add_rule(rule_from_json(_json(value)))
    return tree if found else None


def fetch_tree(tsdb: TSDB, tree_id: int) -> Tree | None:
    row = _id_bytes(tree_id)
    cells = tsdb.tree_table().row(row)
    return _tree_of_row(row, cells) if cells else None


def fetch_all_trees(tsdb: TSDB) -> list[Tree]:
    trees = []
    for row, cells in tsdb.tree_table().scan(row_start=b"\x00\x00", row_stop=b"\xff\xff"):
        if len(row) == TREE_ID_BYTES:
            tree = _tree_of_row(row, cells)
            if tree is not None and tree.tree_id > 0:
                trees.append(tree)
    return trees


def create_tree(tsdb: TSDB, given: Mapping[str, Any], created: int) -> Tree:
    """``createNewTree``: the next ID after the highest in use."""
    if not given.get("name"):
        raise BadRequestError("Tree was missing the name")
    tree_id = max((t.tree_id for t in fetch_all_trees(tsdb)), default=0) + 1
    if tree_id > 65535:
        raise BadRequestError("Exhausted all Tree IDs")
    tree = Tree(tree_id=tree_id, created=created, **{k: given[k] for k in TREE_FIELDS
                                                     if k in given})
    tsdb.tree_table().put(_id_bytes(tree_id), {TREE_COLUMN: tree.storage_json()})
    stored = fetch_tree(tsdb, tree_id)
    assert stored is not None
    return stored


def edit_tree(tsdb: TSDB, tree_id: int, given: Mapping[str, Any], overwrite: bool) -> Tree:
    """``storeTree``: copy the changed fields (all with ``overwrite``) onto the stored tree."""
    if not _tree_changed(given):
        raise NotModified("No changes detected in the tree")
    stored = fetch_tree(tsdb, tree_id)
    if stored is None:
        raise TsdbError(f"Unable to locate tree: {tree_id}", code=404)
    original = stored.storage_json()
    defaults = Tree()
    updated = replace(stored, **{k: given.get(k, getattr(defaults, k)) if overwrite
                                 else given[k] for k in TREE_FIELDS if overwrite or k in given})
    row = _id_bytes(tree_id)
    if not tsdb.tree_table().check_and_put(row, TREE_COLUMN, original, updated.storage_json()):
        raise SaveFailed(f"Unable to save changes to tre tree: {tree_id}",
                         "Plesae try again at a later time")
    result = fetch_tree(tsdb, tree_id)
    assert result is not None
    return result


def _tree_changed(given: Mapping[str, Any]) -> bool:
    """The setters' verdict: text fields when not empty, the flags whenever given."""
    return any(given.get(k) for k in ("name", "description", "notes")) or any(
        k in given for k in ("strict_match", "enabled", "store_failures"))


def delete_tree(tsdb: TSDB, tree_id: int, definition: bool) -> None:
    """``deleteTree``: branches, leaves, collisions and not-matched entries; the tree and its
    rules too with ``definition``."""
    start = _id_bytes(tree_id)
    stop = (tree_id + 1).to_bytes(TREE_ID_BYTES, "big") if tree_id < 65535 else None
    table = tsdb.tree_table()
    for row, cells in list(table.scan(row_start=start, row_stop=stop)):
        doomed = [c for c in cells if _deletable(c[2:], definition)]
        if doomed:
            table.delete(row, doomed)


def _deletable(qualifier: bytes, definition: bool) -> bool:
    if qualifier in (b"tree",) or (qualifier.startswith(RULE_PREFIX)
                                   and len(qualifier) > len(RULE_PREFIX)):
        return definition
    return qualifier == b"branch" or any(
        qualifier.startswith(p) and len(qualifier) > len(p)
        for p in (LEAF_PREFIX, COLLISION_PREFIX, NOT_MATCHED_PREFIX))


# --- rules ----------------------------------------------------------------------------------


def fetch_rule(tsdb: TSDB, tree_id: int, level: int, order: int) -> TreeRule | None:
    column = b"t:" + rule_qualifier(level, order)
    raw = tsdb.tree_table().row(_id_bytes(tree_id), [column]).get(column)
    return rule_from_json(_json(raw)) if raw else None


def sync_rule(tsdb: TSDB, local: TreeRule, changed: set[str], overwrite: bool) -> TreeRule:
    """``TreeRule#syncToStorage``: a new rule as given, or the changes copied onto the stored
    one; validated; a compare-and-set against the stored rule's JSON."""
    _id_bytes(local.tree_id)
    if not changed:
        raise NotModified("No changes detected in the rule")
    stored = fetch_rule(tsdb, local.tree_id, local.level, local.order)
    original = stored.json_text().encode("utf-8") if stored is not None else None
    if stored is None:
        result = local
    else:
        updates = {k: getattr(local, k) for k in RULE_FIELDS
                   if overwrite or (k in changed and getattr(local, k) != getattr(stored, k))}
        if not updates:
            raise NotModified("No changes detected in the rule")
        result = replace(stored, **updates)
    validate_rule(result)
    column = b"t:" + rule_qualifier(local.level, local.order)
    if not tsdb.tree_table().check_and_put(_id_bytes(local.tree_id), column, original,
                                           result.json_text().encode("utf-8")):
        raise SaveFailed(f"Unable to save rule {local} to storage")
    return result


def validate_rule(rule: TreeRule) -> None:
    """``TreeRule#validateRule``."""
    if rule.type is None:
        raise BadRequestError("Missing rule type")
    if rule.type in ("METRIC_CUSTOM", "TAGK_CUSTOM", "TAGV_CUSTOM", "TAGK") and not rule.field:
        raise BadRequestError(f"Missing field name required for {rule.type} rule")
    if rule.type != "TAGK" and rule.type != "METRIC" and not rule.custom_field:
        raise BadRequestError(f"Missing custom field name required for {rule.type} rule")
    if rule.regex_group_idx < 0:
        raise BadRequestError("Invalid regex group index. Cannot be less than 0")


def delete_rule(tsdb: TSDB, tree_id: int, level: int, order: int) -> None:
    tsdb.tree_table().delete(_id_bytes(tree_id), [b"t:" + rule_qualifier(level, order)])


def delete_all_rules(tsdb: TSDB, tree_id: int) -> None:
    row = _id_bytes(tree_id)
    table = tsdb.tree_table()
    columns = [c for c in table.row(row) if c[2:].startswith(RULE_PREFIX)
               and len(c) > 2 + len(RULE_PREFIX)]
    if columns:
        table.delete(row, columns)


# --- branches and leaves --------------------------------------------------------------------


def fetch_branch_only(tsdb: TSDB, branch_id: bytes) -> Branch | None:
    raw = tsdb.tree_table().row(branch_id, [BRANCH_COLUMN]).get(BRANCH_COLUMN)
    return branch_from_json(tree_id_of(branch_id), _json(raw)) if raw else None


def fetch_branch(tsdb: TSDB, branch_id: bytes, load_leaf_uids: bool) -> Branch | None:
    """``Branch.fetchBranch``: the branch, its leaves and its children one level down."""
    tree_id = tree_id_of(branch_id)
    stop = (tree_id + 1).to_bytes(TREE_ID_BYTES, "big") if tree_id < 65535 else None
    branch: Branch | None = None
    children: list[Branch] = []
    leaves: list[Leaf] = []
    for row, cells in tsdb.tree_table().scan(row_start=branch_id, row_stop=stop):
        if not row.startswith(branch_id):
            break
        if len(row) not in (len(branch_id), len(branch_id) + 4):
            continue
        for column, value in cells.items():
            if column == BRANCH_COLUMN:
                loaded = branch_from_json(tree_id, _json(value))
                if row == branch_id:
                    branch = loaded
                else:
                    children.append(loaded)
            elif column[2:].startswith(LEAF_PREFIX) and row == branch_id:
                leaf = _leaf_of(tsdb, value, load_leaf_uids)
                if leaf is not None:
                    leaves.append(leaf)
    if branch is None or branch.path is None:
        return None
    for child in children:
        branch.add_child(child)
    for leaf in leaves:
        branch.add_leaf(leaf, None)
    return branch


def _leaf_of(tsdb: TSDB, raw: bytes, load_uids: bool) -> Leaf | None:
    data = _json(raw)
    leaf = Leaf(display_name=str(data.get("displayName") or ""), tsuid=str(data.get("tsuid") or ""))
    if not leaf.tsuid:
        return None
    if load_uids:
        try:
            tsuid = bytes.fromhex(leaf.tsuid)
            leaf.metric = tsdb.metrics.get_name(tsuid[:tsdb.layout.metric_width])
            leaf.tags = tsuid_tags(tsdb, tsuid)
        except (NoSuchUniqueId, ValueError):
            return None  # a leaf whose UID was deleted: skipped, as OpenTSDB does
    return leaf


def store_branch(tsdb: TSDB, branch: Branch, collisions: dict[str, str] | None,
                 store_leaves: bool) -> None:
    """``storeBranch``: the branch cell if absent, then each leaf if absent; a leaf name
    taken by another TSUID is a collision."""
    table = tsdb.tree_table()
    row = branch.branch_id()
    table.check_and_put(row, BRANCH_COLUMN, None, branch.storage_json())
    if not store_leaves or not branch.leaves:
        return
    for leaf in branch.leaves.values():
        column = b"t:" + leaf.qualifier()
        if table.check_and_put(row, column, None, leaf.storage_json()):
            continue
        existing = _json(table.row(row, [column]).get(column, b"{}"))
        existing_tsuid = str(existing.get("tsuid") or "")
        if existing_tsuid and existing_tsuid != leaf.tsuid and collisions is not None:
            collisions.setdefault(leaf.tsuid, existing_tsuid)


def flush_collisions(tsdb: TSDB, tree: Tree, collisions: dict[str, str]) -> None:
    """``flushCollisions``: stored only when the tree stores failures."""
    if tree.store_failures and collisions:
        row = _id_bytes(tree.tree_id) + COLLISION_ROW_SUFFIX
        tsdb.tree_table().put(row, {b"t:" + COLLISION_PREFIX + bytes.fromhex(tsuid):
                                    existing.encode("latin-1", errors="replace")
                                    for tsuid, existing in collisions.items()})
    collisions.clear()


def fetch_failures(tsdb: TSDB, tree_id: int, tsuids: Sequence[str] | None,
                   collisions: bool) -> dict[str, str]:
    """``fetchCollisions`` / ``fetchNotMatched``: TSUID -> the stored text."""
    prefix = COLLISION_PREFIX if collisions else NOT_MATCHED_PREFIX
    suffix = COLLISION_ROW_SUFFIX if collisions else NOT_MATCHED_ROW_SUFFIX
    columns = None
    if tsuids:
        try:
            columns = [b"t:" + prefix + bytes.fromhex(t if len(t) % 2 == 0 else "0" + t)
                       for t in tsuids]
        except ValueError:
            raise BadRequestError("Invalid TSUID in the list") from None
    cells = tsdb.tree_table().row(_id_bytes(tree_id) + suffix, columns)
    return {column[2 + len(prefix):].hex().upper(): value.decode("latin-1")
            for column, value in sorted(cells.items())
            if column[2:].startswith(prefix) and len(column) > 2 + len(prefix)}


def _json(raw: bytes | None) -> dict[str, Any]:
    try:
        data = json.loads((raw or b"{}").decode("utf-8", errors="replace"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

