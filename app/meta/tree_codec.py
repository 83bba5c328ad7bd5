"""OpenTSDB 2.4's trees in ``tsdb-tree``: keys, qualifiers, stored and API JSON. Pure.

Layout (``Tree.java``, ``TreeRule.java``, ``Branch.java``, ``Leaf.java``), family ``t``::

    row = tree ID (2 bytes)              tree               -> tree JSON (no ID: from the key)
                                         tree_rule:<L>:<O>  -> rule JSON (Jackson's bean JSON)
                                         branch             -> the root branch
    row = tree ID + 4-byte String.hashCode() of each path name below the root
                                         branch             -> {"path":{...},"displayName":...}
                                         leaf:<4-byte hash of the leaf's name> -> leaf JSON
    row = tree ID + 0x01                 tree_collision:<TSUID bytes>   -> existing TSUID (text)
    row = tree ID + 0x02                 tree_not_matched:<TSUID bytes> -> message

The API field orders are Jackson's for these beans (properties backed by a field of the same
name first, in declaration order, then getter-only ones), as OpenTSDB 2.4.1's own classes
serialise them under Jackson 2.9.5; the documentation's examples come from older versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.jackson import jackson_string, java_string_hash

TREE_FAMILY = b"t"
TREE_COLUMN = b"t:tree"
BRANCH_COLUMN = b"t:branch"
RULE_PREFIX = b"tree_rule:"
LEAF_PREFIX = b"leaf:"
COLLISION_PREFIX = b"tree_collision:"
NOT_MATCHED_PREFIX = b"tree_not_matched:"
COLLISION_ROW_SUFFIX = b"\x01"
NOT_MATCHED_ROW_SUFFIX = b"\x02"
TREE_ID_BYTES = 2
MAX_TREE_ID = 65535
RULE_TYPES = ("METRIC", "METRIC_CUSTOM", "TAGK", "TAGK_CUSTOM", "TAGV_CUSTOM")


def tree_id_bytes(tree_id: int) -> bytes:
    if not 0 < tree_id <= MAX_TREE_ID:
        raise ValueError("Invalid Tree ID")
    return tree_id.to_bytes(TREE_ID_BYTES, "big")


def tree_id_of(row: bytes) -> int:
    return int.from_bytes(row[:TREE_ID_BYTES], "big")


def rule_qualifier(level: int, order: int) -> bytes:
    return RULE_PREFIX + f"{level}:{order}".encode()




def hash_bytes(text: str) -> bytes:
    """``Bytes.fromInt(text.hashCode())``."""
    return java_string_hash(text).to_bytes(4, "big", signed=True)


def ignore_case_key(text: str) -> str:
    """A sort key close to ``String.compareToIgnoreCase`` (per char: upper, then lower)."""
    return "".join(c.upper().lower() if len(c.upper()) == 1 else c for c in text)


def java_split(pattern: re.Pattern[str], text: str) -> list[str]:
    """``String.split(regex)``: no leading empty part for a zero-width match at 0, trailing
    empty parts dropped, the text itself when nothing matches."""
    parts: list[str] = []
    index = 0
    for match in pattern.finditer(text):
        if match.end() == 0:
            continue
        if match.start() == match.end() and match.start() >= len(text):
            break
        parts.append(text[index:match.start()])
        index = match.end()
    if not parts and index == 0:
        return [text]
    parts.append(text[index:])
    while parts and parts[-1] == "":
        parts.pop()
    return parts


# --- rules and trees -------------------------------------------------------------------------


@dataclass
class TreeRule:
    tree_id: int = 0
    level: int = 0
    order: int = 0
    type: str | None = None  # one of RULE_TYPES
    field: str = ""
    custom_field: str = ""
    regex: str = ""
    separator: str = ""
    description: str = ""
    notes: str = ""
    regex_group_idx: int = 0
    display_format: str = ""

    def __str__(self) -> str:
        return f"[{self.tree_id}:{self.level}:{self.order}:{self.type or 'null'}]"

    def json_text(self) -> str:
        """Jackson's bean JSON: what ``JSON.serializeToBytes`` stores and the API prints."""
        fields = [("type", jackson_string(self.type) if self.type else "null"),
                  ("field", jackson_string(self.field)), ("regex", jackson_string(self.regex)),
                  ("separator", jackson_string(self.separator)),
                  ("description", jackson_string(self.description)),
                  ("notes", jackson_string(self.notes)), ("level", str(self.level)),
                  ("order", str(self.order)), ("treeId", str(self.tree_id)),
                  ("customField", jackson_string(self.custom_field)),
                  ("regexGroupIdx", str(self.regex_group_idx)),
                  ("displayFormat", jackson_string(self.display_format))]
        return _object(fields)

    def compiled(self) -> re.Pattern[str] | None:
        return re.compile(self.regex) if self.regex else None


def rule_from_json(data: Mapping[str, object]) -> TreeRule:
    """A stored rule (unknown fields ignored, missing ones at their defaults)."""
    kind = data.get("type")
    return TreeRule(tree_id=_int(data.get("treeId")), level=_int(data.get("level")),
                    order=_int(data.get("order")),
                    type=str(kind).upper() if kind else None,
                    field=_text(data.get("field")), custom_field=_text(data.get("customField")),
                    regex=_text(data.get("regex")), separator=_text(data.get("separator")),
                    description=_text(data.get("description")), notes=_text(data.get("notes")),
                    regex_group_idx=_int(data.get("regexGroupIdx")),
                    display_format=_text(data.get("displayFormat")))


@dataclass
class Tree:
    tree_id: int = 0
    name: str = ""
    description: str = ""
    notes: str = ""
    strict_match: bool = False
    enabled: bool = False
    store_failures: bool = False
    created: int = 0
    rules: dict[int, dict[int, TreeRule]] | None = None

    def add_rule(self, rule: TreeRule) -> None:
        if self.rules is None:
            self.rules = {}
        self.rules.setdefault(rule.level, {})[rule.order] = rule

    def rule(self, level: int, order: int) -> TreeRule | None:
        return (self.rules or {}).get(level, {}).get(order)

    def storage_json(self) -> bytes:
        """``Tree#toStorageJson`` (the ID lives in the row key)."""
        return _object([("name", jackson_string(self.name)),
                        ("description", jackson_string(self.description)),
                        ("notes", jackson_string(self.notes)),
                        ("strictMatch", _bool(self.strict_match)), ("created", str(self.created)),
                        ("enabled", _bool(self.enabled)),
                        ("storeFailures", _bool(self.store_failures))]).encode("utf-8")

    def api_json(self) -> str:
        if self.rules is None:
            rules = "null"
        else:
            rules = _object((str(level), _object((str(order), rule.json_text())
                                                 for order, rule in sorted(orders.items())))
                            for level, orders in sorted(self.rules.items()))
        return _object([("name", jackson_string(self.name)),
                        ("description", jackson_string(self.description)),
                        ("notes", jackson_string(self.notes)),
                        ("enabled", _bool(self.enabled)), ("rules", rules),
                        ("created", str(self.created)), ("treeId", str(self.tree_id)),
                        ("strictMatch", _bool(self.strict_match)),
                        ("storeFailures", _bool(self.store_failures))])


def tree_from_json(tree_id: int, data: Mapping[str, object]) -> Tree:
    return Tree(tree_id=tree_id, name=_text(data.get("name")),
                description=_text(data.get("description")), notes=_text(data.get("notes")),
                strict_match=data.get("strictMatch") is True, enabled=data.get("enabled") is True,
                store_failures=data.get("storeFailures") is True,
                created=_int(data.get("created")))


# --- branches and leaves ---------------------------------------------------------------------


@dataclass
class Leaf:
    display_name: str
    tsuid: str
    metric: str = ""
    tags: dict[str, str] | None = None

    @property
    def key(self) -> int:
        """``Leaf#hashCode``: the display name's; leaves of a branch are unique by it."""
        return java_string_hash(self.display_name)

    def qualifier(self) -> bytes:
        return LEAF_PREFIX + hash_bytes(self.display_name)

    def storage_json(self) -> bytes:
        return _object([("displayName", jackson_string(self.display_name)),
                        ("tsuid", jackson_string(self.tsuid))]).encode("utf-8")

    def api_json(self) -> str:
        tags = "null" if self.tags is None else _object(
            (k, jackson_string(v)) for k, v in self.tags.items())
        return _object([("metric", jackson_string(self.metric)), ("tags", tags),
                        ("tsuid", jackson_string(self.tsuid)),
                        ("displayName", jackson_string(self.display_name))])

    def __str__(self) -> str:
        return f"name: {self.display_name} tsuid: {self.tsuid}"


@dataclass
class Branch:
    tree_id: int
    display_name: str = ""
    path: dict[int, str] | None = None
    leaves: dict[int, Leaf] | None = None
    branches: list[Branch] | None = field(default=None)

    def __str__(self) -> str:
        if self.path is None:
            return f"Name: [{self.display_name}]"
        return f"ID: [{self.branch_id().hex().upper()}] Name: [{self.display_name}]"

    def add_child(self, child: Branch) -> bool:
        """A TreeSet ordered by name ignoring case: a child of the same name is not added."""
        if self.branches is None:
            self.branches = []
        key = ignore_case_key(child.display_name)
        if any(ignore_case_key(b.display_name) == key for b in self.branches):
            return False
        self.branches.append(child)
        self.branches.sort(key=lambda b: ignore_case_key(b.display_name))
        return True

    def add_leaf(self, leaf: Leaf, collisions: dict[str, str] | None) -> bool:
        """``addLeaf``: a different TSUID under an existing name is a collision."""
        if self.leaves is None:
            self.leaves = {}
        existing = self.leaves.get(leaf.key)
        if existing is None:
            self.leaves[leaf.key] = leaf
            return True
        if existing.tsuid != leaf.tsuid and collisions is not None:
            collisions.setdefault(leaf.tsuid, existing.tsuid)
        return False

    def prepend_parent_path(self, parent_path: Mapping[int, str]) -> None:
        self.path = dict(parent_path)

    def compiled_path(self) -> dict[int, str]:
        """``compileBranchId``'s side effect: the display name at the tip of the path."""
        if self.path is None:
            raise ValueError("Missing branch path")
        if not self.display_name:
            raise ValueError("Missing display name")
        if not self.path:
            self.path[0] = self.display_name
        else:
            last = max(self.path)
            if self.path[last] != self.display_name:
                self.path[last + 1] = self.display_name
        return self.path

    def branch_id(self) -> bytes:
        path = self.compiled_path()
        return tree_id_bytes(self.tree_id) + b"".join(
            hash_bytes(path[depth]) for depth in sorted(path) if depth != 0)

    def storage_json(self) -> bytes:
        path = self.compiled_path()
        return _object([("path", _path_json(path)),
                        ("displayName", jackson_string(self.display_name))]).encode("utf-8")

    def api_json(self) -> str:
        path = self.compiled_path()
        leaves = "null" if self.leaves is None else "[" + ",".join(
            leaf.api_json() for leaf in _leaf_set(self.leaves.values())) + "]"
        branches = "null" if self.branches is None else "[" + ",".join(
            b.api_json() for b in self.branches) + "]"
        return _object([("leaves", leaves), ("branches", branches), ("path", _path_json(path)),
                        ("displayName", jackson_string(self.display_name)),
                        ("treeId", str(self.tree_id)),
                        ("branchId", jackson_string(self.branch_id().hex().upper())),
                        ("depth", str(max(path)))])


def branch_from_json(tree_id: int, data: Mapping[str, object]) -> Branch:
    raw_path = data.get("path")
    path = ({int(k): _text(v) for k, v in raw_path.items()}
            if isinstance(raw_path, dict) else None)
    return Branch(tree_id=tree_id, display_name=_text(data.get("displayName")), path=path)


def _leaf_set(leaves: Iterable[Leaf]) -> list[Leaf]:
    """``new TreeSet<Leaf>(values)``: by name ignoring case, the first of equal names kept."""
    kept: dict[str, Leaf] = {}
    for leaf in leaves:
        kept.setdefault(ignore_case_key(leaf.display_name), leaf)
    return [kept[k] for k in sorted(kept)]


def _path_json(path: Mapping[int, str]) -> str:
    return _object((str(depth), jackson_string(path[depth])) for depth in sorted(path))


# --- text ----------------------------------------------------------------------------------


def _object(fields: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{jackson_string(k)}:{v}" for k, v in fields) + "}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
